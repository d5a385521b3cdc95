"""Run ``graphdist`` with a fault injected from outside the product (tests only)::

    python tests/fault_entry.py RANK EPOCH train-gcn SPEC ...

Rank RANK dies (``os._exit(3)``, like a killed node) after epoch EPOCH - 1, i.e. at the start of
epoch EPOCH, through the public ``callbacks`` argument of :func:`graphdist.gnn.trainer.fit`.
"""
from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    die_rank, die_epoch = int(argv[0]), int(argv[1])
    from graphdist.gnn import trainer
    real_fit = trainer.fit

    def fit(cfg, lg, pinfo, ctx, callbacks=()):
        def die(epoch, hist):
            if ctx.rank == die_rank and epoch == die_epoch - 1:
                os._exit(3)
        return real_fit(cfg, lg, pinfo, ctx, callbacks=[*callbacks, die])

    trainer.fit = fit
    from graphdist.cli import main as cli_main
    return cli_main(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
