"""``python -m graphdist.gnn.pyg.run --nproc-per-node K SCRIPT [ARGS ...]``: run a PyG script on K
local ranks, as ``torchrun --standalone`` does, through torch's own elastic agent, without the
agent's report of failed workers: a graphdist user error is the one line the script printed
(exit code 2); another failure is one line naming the first failed rank (exit code 1)."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import uuid

__all__ = ["main"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m graphdist.gnn.pyg.run", description=__doc__.splitlines()[0])
    p.add_argument("--nproc-per-node", type=int, default=1, help="ranks on this node")
    p.add_argument("--local-ranks-filter", default="", metavar="RANKS",
                   help="show only these local ranks' output, e.g. 0 (as torchrun's flag); the others' goes to "
                        "/dev/null")
    p.add_argument("script", help="the Python script every rank runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    a = p.parse_args(argv)
    if a.nproc_per_node < 1:
        sys.stderr.write(f"graphdist: error: --nproc-per-node must be >= 1, got {a.nproc_per_node}\n")
        return 2
    try:
        shown = {int(r) for r in a.local_ranks_filter.split(",") if r.strip()} if a.local_ranks_filter else None
    except ValueError:
        shown = None
    if a.local_ranks_filter and (not shown or not all(0 <= r < a.nproc_per_node for r in shown)):
        sys.stderr.write(f"graphdist: error: --local-ranks-filter must list local ranks 0..{a.nproc_per_node - 1} "
                         f"separated by commas, got {a.local_ranks_filter!r}\n")
        return 2
    if not os.path.isfile(a.script):
        sys.stderr.write(f"graphdist: error: {a.script}: no such script\n")
        return 2
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from graphdist.proc import kept_signal_handlers
    for name in [*logging.root.manager.loggerDict, "torch.distributed.elastic"]:
        if name.startswith(("torch.distributed.elastic", "torch.distributed.launcher")):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // a.nproc_per_node)))
    lc = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=a.nproc_per_node, run_id=f"pyg-{uuid.uuid4().hex[:8]}",
                      rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0, monitor_interval=0.2,
                      start_method="spawn", logs_specs=DefaultLogsSpecs(local_ranks_filter=shown))
    try:
        with kept_signal_handlers():
            elastic_launch(lc, sys.executable)(a.script, *a.args)
    except ChildFailedError as e:
        codes = {int(r): f.exitcode for r, f in e.failures.items()}
        failed = {r: c for r, c in codes.items() if c != -15} or codes  # (-15: stopped by the agent)
        if shown is not None and not set(failed) & shown:  # the failing ranks' own lines were filtered out
            r = min(failed)
            sys.stderr.write(f"graphdist: error: rank {r} of {a.script} failed with exit code {failed[r]} (its output "
                             f"is not shown: --local-ranks-filter {a.local_ranks_filter})\n")
            return 2 if 2 in failed.values() else 1
        if 2 in codes.values():  # a user error: the script printed its line
            return 2
        r = min(codes, key=lambda q: (codes[q] == -15, q))
        sys.stderr.write(f"graphdist: error: rank {r} of {a.script} failed with exit code {codes[r]}; the other "
                         f"{a.nproc_per_node - 1} rank(s) were stopped\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
