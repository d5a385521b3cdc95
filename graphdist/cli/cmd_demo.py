"""``graphdist demo [--out DIR]``: the README quick start (see :mod:`graphdist.demo`)."""
from __future__ import annotations


def _handler(args) -> int:
    from graphdist.demo import run_gcn_demo
    run_gcn_demo(args.out, nproc=args.nproc, progress=not args.no_progress)
    return 0


def register(sub) -> None:
    p = sub.add_parser("demo", help="end-to-end demo: 2-worker GCN training on the default SBM graph")
    p.add_argument("--out", default="runs/demo", help="where reports go (default: runs/demo)")
    p.add_argument("--nproc", type=int, default=2, help="workers = parts (default 2)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_handler)
