"""``graphdist train-rec SPEC (--parts K --method M | --partition DIR) [--nproc N] ...``

The flags are generated from :class:`graphdist.rec.RecConfig`; the command is
:func:`graphdist.rec.run` (checks, then one process, N local workers, or this rank of torchrun).
"""
from __future__ import annotations

from graphdist import config
from graphdist.rec.config import RecConfig


def _handler(args) -> int:
    from graphdist.rec.job import run
    run(config.from_namespace(RecConfig, args))
    return 0


def register(sub) -> None:
    import argparse

    from graphdist.specs import kinds_help
    p = sub.add_parser("train-rec", epilog=kinds_help("ratings"), formatter_class=argparse.RawDescriptionHelpFormatter,
                        help="LightGCN recommender training, embedding rows sharded along the partition",
                       description="Train LightGCN on a user-item graph split over k workers: each rank owns "
                                   "the embedding rows of its part; halo exchange per layer, remote item rows "
                                   "by all-to-all. Give the interaction data SPEC (and optionally --partition DIR).")
    config.add_arguments(p, RecConfig)
    p.set_defaults(func=_handler)
