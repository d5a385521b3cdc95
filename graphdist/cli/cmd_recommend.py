"""``graphdist recommend (SPEC | --partition DIR) --checkpoint-dir D --top-k K --out OUT [--users FILE]``

The flags are generated from :class:`graphdist.rec.recommend.RecommendConfig`; the command is
:func:`graphdist.rec.recommend.run`.
"""
from __future__ import annotations

from graphdist import config
from graphdist.rec.recommend import RecommendConfig


def _handler(args) -> int:
    from graphdist.rec.recommend import run
    run(config.from_namespace(RecommendConfig, args))
    return 0


def register(sub) -> None:
    import argparse

    from graphdist.specs import kinds_help
    p = sub.add_parser("recommend", epilog=kinds_help("ratings"), formatter_class=argparse.RawDescriptionHelpFormatter,
                       help="top-K items per user from a trained recommender, as Parquet",
                       description="Top-K items per user from a train-rec checkpoint, training items excluded, "
                                   "ranked as evaluation ranks them (ties by lowest item id), in the ratings file's "
                                   "own ids: OUT/part-RRRRR.parquet (user_id, rank, item_id, score) and "
                                   "OUT/_manifest.json.")
    config.add_arguments(p, RecommendConfig)
    p.set_defaults(func=_handler)
