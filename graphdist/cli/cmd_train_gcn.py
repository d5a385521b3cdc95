"""``graphdist train-gcn (SPEC [--parts K --method M] | --partition DIR) [--nproc N] ...``

The flags are generated from :class:`graphdist.gnn.GCNConfig`; the command is
:func:`graphdist.gnn.run` (checks, then one process, N local workers, or this rank of torchrun).
"""
from __future__ import annotations

from graphdist import config
from graphdist.gnn.config import GCNConfig


def _handler(args) -> int:
    from graphdist.gnn.job import run
    run(config.from_namespace(GCNConfig, args))
    return 0


def register(sub) -> None:
    import argparse

    from graphdist.specs import kinds_help
    p = sub.add_parser("train-gcn", epilog=kinds_help("graph"), formatter_class=argparse.RawDescriptionHelpFormatter,
                        help="full-batch GCN/GraphSAGE (or PyG model) training on k partitioned ranks",
                       description="Train a GCN, GraphSAGE or PyG model (--model) on a graph split over k "
                                   "workers (halo exchange, data-parallel weights). Give a dataset SPEC or "
                                   "--partition DIR.")
    config.add_arguments(p, GCNConfig)
    p.set_defaults(func=_handler)
