"""``graphdist score DIR SPEC --out OUT [--json FILE]``: click probabilities of an exported DLRM.

The flags are generated from :class:`embeddings.score.ScoreConfig`; the command is
:func:`embeddings.score.run` (one process, no process group).
"""
from __future__ import annotations

import argparse

from embeddings.score import ScoreConfig
from graphdist import config


def _handler(args) -> int:
    from embeddings.score import run
    run(config.from_namespace(ScoreConfig, args))
    return 0


def register(sub) -> None:
    from graphdist.specs import kinds_help
    p = sub.add_parser("score", help="click probabilities of an exported DLRM, as Parquet, with AUC / log loss / NE",
                       description="Score click data with a DLRM that graphdist export unsharded (DIR: model.py, "
                                   "model.pt, model.json), in one process: OUT/part-00000.parquet holds line (0-based "
                                   "line of the input), prob and label; AUC, log loss and NE are printed (and "
                                   "written with --json).",
                       epilog=kinds_help("clicks"), formatter_class=argparse.RawDescriptionHelpFormatter)
    config.add_arguments(p, ScoreConfig)
    p.set_defaults(func=_handler)
