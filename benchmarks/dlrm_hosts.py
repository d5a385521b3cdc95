"""DLRM 1D against 2D (``--sparse-groups G``, both ``--sparse-layout``s) across test-bed hosts on a capped link.

    sudo python benchmarks/dlrm_hosts.py [--hosts 2] [--nproc 2] [--gbps 1] [--configs 1,2:torchrec,2:hosts]
        [--data criteo-synth:rows=65536] [--steps 40] [--batch-size 4096] [--sharding row_wise]
        [--repeats 2] [--json FILE]

Every configuration runs ``graphdist train-dlrm DATA --nnodes H --nproc L --rdzv-endpoint h0:29500``
on H test-bed hosts whose links are capped at ``--gbps`` (each direction), configurations
interleaved per repeat (A/B/C/A/B/C). A configuration is ``G`` or ``G:LAYOUT`` (``--sparse-groups
G --sparse-layout LAYOUT``; LAYOUT hosts, the default, or torchrec). Reported: samples/s (the
report's ``throughput/samples_per_s``), the bytes that crossed the links per step (the hosts'
interface tx counters over the run, divided by the steps; start-up and evaluation included; also
per host, not divided), the replica sync bytes per step, the final loss, the 1-minute load
average after each run, and the rank layout (which ranks share a sharding group / a replica
group, and which host each rank is on: ranks are host-major, rank = node rank x L + local rank).
Every worker runs with OMP_NUM_THREADS=1.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import harness


def run(tb, args, groups: int, kind: str, out: Path) -> dict:
    cmd = harness.graphdist_cmd(
        "train-dlrm", args.data, "--steps", str(args.steps), "--batch-size", str(args.batch_size),
        "--sharding", args.sharding, "--sparse-groups", str(groups), "--sparse-layout", kind,
        "--sync-every", str(args.sync_every),
        "--nnodes", str(args.hosts), "--nproc", str(args.nproc), "--rdzv-endpoint", "h0:29500")
    t0 = time.perf_counter()
    r, tx = harness.on_hosts(tb, cmd, out)
    wall = time.perf_counter() - t0
    return {"groups": groups, "layout_kind": kind if groups > 1 else "-",
            "samples_per_s": r.get("throughput/samples_per_s"),
            "link_tx_bytes_per_step": sum(tx) / args.steps, "link_tx_bytes_per_host": tx,
            "replica_sync_bytes_per_step": r.get("comm/replica_sync_bytes_per_step"),
            "train_s": r.get("time/train_s"), "wall_s": wall, "final_loss": (r.get("losses") or [None])[-1],
            "layout": layout(args, groups, kind), "load": harness.load()}


def layout(args, groups: int, kind: str) -> dict:
    """embeddings.twod's groups, and whether each stays on one host (ranks host-major)."""
    from embeddings.twod import layout_for
    d = layout_for(args.hosts * args.nproc, groups, args.nproc, kind).describe()
    host = lambda ranks: sorted({r // args.nproc for r in ranks})  # noqa: E731
    d["sharding_group_hosts"] = [host(g) for g in d["sharding_groups"]]
    d["replica_group_hosts"] = [host(g) for g in d["replica_groups"]]
    return d


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--gbps", type=float, default=1.0)
    ap.add_argument("--configs", default="1,2:torchrec,2:hosts",
                    help="comma-separated G or G:LAYOUT (--sparse-groups, --sparse-layout)")
    ap.add_argument("--data", default="criteo-synth:rows=65536")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--sharding", default="row_wise")
    ap.add_argument("--sync-every", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", default="runs/dlrm_hosts")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from graphdist.testbed import Testbed
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    t0 = time.time()
    print(f"load: {os.getloadavg()}", flush=True)
    with Testbed(args.hosts, gbps=args.gbps or None) as tb:
        for rep in range(args.repeats):
            for c in harness.csv(args.configs):
                g, _, kind = c.partition(":")
                g, kind = int(g), kind or "hosts"
                row = run(tb, args, g, kind, work / f"g{g}{kind}-{rep}.json")
                row["repeat"] = rep
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"done in {time.time() - t0:.0f} s; load {os.getloadavg()}", flush=True)
    harness.write_json(args.json, rows)
    print("\n" + harness.table(
        ["G", "layout", "repeat", "samples/s", "bytes crossing hosts / step", "replica sync bytes / step",
         "final loss", "load"],
        [[r["groups"], r["layout_kind"], r["repeat"], round(r["samples_per_s"] or 0), round(r["link_tx_bytes_per_step"]),
          round(r["replica_sync_bytes_per_step"] or 0), str(r["final_loss"]), f"{r['load']:.1f}"] for r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
