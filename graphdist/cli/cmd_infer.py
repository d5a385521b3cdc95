"""``graphdist infer (SPEC | --partition DIR) --checkpoint-dir D --out OUT [--nproc N] [--layer L]``

The flags are generated from :class:`graphdist.gnn.infer.InferConfig`; the command is
:func:`graphdist.gnn.infer.run`.
"""
from __future__ import annotations

from graphdist import config
from graphdist.gnn.infer import InferConfig


def _handler(args) -> int:
    from graphdist.gnn.infer import run
    run(config.from_namespace(InferConfig, args))
    return 0


def register(sub) -> None:
    import argparse

    from graphdist.specs import kinds_help
    p = sub.add_parser("infer", epilog=kinds_help("graph"), formatter_class=argparse.RawDescriptionHelpFormatter,
                       help="predictions and node embeddings of a trained GCN/SAGE/PyG model, as Parquet",
                       description="Full-graph inference from a train-gcn checkpoint on any number of ranks: each "
                                   "rank writes its own nodes (node_id, pred, logits, embedding) to OUT/part-RRRRR."
                                   "parquet, plus OUT/_manifest.json.")
    config.add_arguments(p, InferConfig)
    p.set_defaults(func=_handler)
