"""``graphdist train-dlrm SPEC``: DLRM with sharded embedding tables (torchrec) on click logs.

    graphdist train-dlrm criteo-synth: --nproc 2 --sharding row_wise --batch-size 512 --epochs 1
    torchrun --nproc-per-node 4 -m graphdist train-dlrm criteo:/data/train.txt --sharding auto

The flags are generated from :class:`embeddings.DLRMTrainConfig`; the command is
:func:`embeddings.run` (checks the input, then one process, N local workers, or this rank of
torchrun).
"""
from __future__ import annotations

import argparse

from embeddings.config import DLRMTrainConfig
from graphdist import config

DESCRIPTION = """\
Train DLRM/DCNv2 with sharded embedding tables (torchrec) on click logs.

  graphdist train-dlrm criteo-synth: --nproc 2 --sharding row_wise --batch-size 512 --epochs 1
  torchrun --nproc-per-node 4 -m graphdist train-dlrm criteo:/data/train.txt --sharding auto

The input is checked first (data, flags, that the sharding plan fits), then one process,
--nproc local workers, or this rank of torchrun trains."""


def _handler(args) -> int:
    from embeddings.job import run
    run(config.from_namespace(DLRMTrainConfig, args))
    return 0


def register(sub) -> None:
    from graphdist.specs import kinds_help
    p = sub.add_parser("train-dlrm", help="train DLRM/DCNv2 with sharded embedding tables (torchrec)",
                       description=DESCRIPTION, epilog=kinds_help("clicks"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    config.add_arguments(p, DLRMTrainConfig)
    p.set_defaults(func=_handler)
