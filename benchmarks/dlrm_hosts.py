"""DLRM 1D against 2D (``--sparse-groups G``) across test-bed hosts on a capped link.

    sudo python benchmarks/dlrm_hosts.py [--hosts 2] [--nproc 2] [--gbps 1] [--groups 1,2]
        [--data criteo-synth:rows=65536] [--steps 40] [--batch-size 4096] [--sharding row_wise]
        [--repeats 2] [--json FILE]

Every configuration runs ``graphdist train-dlrm DATA --nnodes H --nproc L --rdzv-endpoint h0:29500``
on H test-bed hosts whose links are capped at ``--gbps`` (each direction), configurations
interleaved per repeat. Reported: samples/s (the report's ``throughput/samples_per_s``), the bytes
that crossed the links per step (the hosts' interface tx counters over the run, divided by the
steps; start-up and evaluation included), the replica sync bytes per step, the final loss, and the
rank layout (which ranks share a sharding group / a replica group, and which host each rank is on:
ranks are host-major, rank = node rank x L + local rank).
Every worker runs with OMP_NUM_THREADS=1.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from graphdist.testbed import Testbed  # noqa: E402

GD = [sys.executable, "-m", "graphdist"]


def env() -> dict:
    e = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.setdefault("OMP_NUM_THREADS", "1")
    return e


def run(tb: Testbed, args, groups: int, out: Path) -> dict:
    cmd = GD + ["train-dlrm", args.data, "--steps", str(args.steps), "--batch-size", str(args.batch_size),
                "--sharding", args.sharding, "--sparse-groups", str(groups), "--sync-every", str(args.sync_every),
                "--nnodes", str(args.hosts), "--nproc", str(args.nproc), "--rdzv-endpoint", "h0:29500"]
    before = [tb.link_bytes(i) for i in range(args.hosts)]
    t0 = time.perf_counter()
    res = tb.run_all([cmd + ["--report", str(out) + ("" if i == 0 else f".{i}")] for i in range(args.hosts)],
                     timeout=1800, env=env())
    wall = time.perf_counter() - t0
    for rc, t in res:
        if rc != 0:
            raise SystemExit(f"G={groups} failed ({rc}):\n{t[-3000:]}")
    after = [tb.link_bytes(i) for i in range(args.hosts)]
    r = json.loads(out.read_text())
    return {"groups": groups, "samples_per_s": r.get("throughput/samples_per_s"),
            "link_tx_bytes_per_step": sum(a[1] - b[1] for a, b in zip(after, before)) / args.steps,
            "replica_sync_bytes_per_step": r.get("comm/replica_sync_bytes_per_step"),
            "train_s": r.get("time/train_s"), "wall_s": wall, "final_loss": (r.get("losses") or [None])[-1],
            "layout": layout(args, groups), "load": os.getloadavg()[0]}


def layout(args, groups: int) -> dict:
    """embeddings.twod's groups, and whether each stays on one host (ranks host-major)."""
    from embeddings.twod import layout_for
    d = layout_for(args.hosts * args.nproc, groups, args.nproc).describe()
    host = lambda ranks: sorted({r // args.nproc for r in ranks})  # noqa: E731
    d["sharding_group_hosts"] = [host(g) for g in d["sharding_groups"]]
    d["replica_group_hosts"] = [host(g) for g in d["replica_groups"]]
    return d


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--gbps", type=float, default=1.0)
    ap.add_argument("--groups", default="1,2")
    ap.add_argument("--data", default="criteo-synth:rows=65536")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--sharding", default="row_wise")
    ap.add_argument("--sync-every", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", default="runs/dlrm_hosts")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    t0 = time.time()
    print(f"load: {os.getloadavg()}", flush=True)
    with Testbed(args.hosts, gbps=args.gbps or None) as tb:
        for rep in range(args.repeats):
            for g in (int(x) for x in args.groups.split(",")):
                row = run(tb, args, g, work / f"g{g}-{rep}.json")
                row["repeat"] = rep
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"done in {time.time() - t0:.0f} s; load {os.getloadavg()}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("\n| G | repeat | samples/s | bytes crossing hosts / step | replica sync bytes / step | final loss |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['groups']} | {r['repeat']} | {r['samples_per_s'] or 0:,.0f} | {r['link_tx_bytes_per_step']:,.0f} | "
              f"{r['replica_sync_bytes_per_step'] or 0:,.0f} | {r['final_loss']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
