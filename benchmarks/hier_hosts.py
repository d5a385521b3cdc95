"""Bytes crossing hosts per epoch: host-aware partition (``--hosts H``) against a flat one, same K,
measured with the test bed hosts' interface byte counters.

    sudo python benchmarks/hier_hosts.py [--specs SPEC;SPEC] [--k 4] [--hosts 2] [--method metis]
        [--balance nodes|edges|both] [--halo mvc|plain] [--route direct,hosts] [--epochs 5,15] [--json FILE]
    python benchmarks/hier_hosts.py --count [--specs ...] [--method M] [--balance B]

``--count``: no test bed and no training, the search tool: per spec the flat and the host-aware
partition (Python API, same K, method, balance) and their rows moved between hosts per layer,
counted by brute force over the part pairs on different hosts (``rows_between_hosts``: mvc
moved rows and plain halo rows), node and in-edge imbalance, partition seconds.

Per spec: ``graphdist partition SPEC --parts K --method M`` (flat) and the same with ``--hosts H``;
each artifact trained with ``graphdist train-gcn --partition DIR --nnodes H --nproc K/H`` on H
test-bed hosts (uncapped veth: the bytes do not depend on the rate), at two epoch counts; the
difference of the summed interface tx bytes over the difference of the epochs is the bytes that
cross hosts per epoch (start-up traffic cancels). The ranks of one host exchange through loopback,
which the counters do not see. Also printed: each partition's halo rows between hosts
(``quality`` over the host groups) and the final losses (same model, same epochs).
``--route``: each artifact trained with each of these ``train-gcn --halo-route`` values
(``direct``: every row on its rank pair; ``hosts``: a raw row crosses to a host once and is
forwarded inside it, :mod:`graphdist.exchange.route`); the ratio column is to flat + the first route.
Every worker runs with OMP_NUM_THREADS=1.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from graphdist.testbed import Testbed  # noqa: E402

GD = [sys.executable, "-m", "graphdist"]
SPECS = ("sbm:nodes=20000,classes=8,avg_degree=20,homophily=0.7,features=32,seed=0;"
         "edgelist:snap/facebook_combined.txt,features=degree,labels=random:4")


def env() -> dict:
    e = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.setdefault("OMP_NUM_THREADS", "1")
    return e


def host_rows(spec: str, part: Path, k: int, hosts: int) -> tuple[int, int, int, int]:
    """(distinct (row, other host) pairs, edges cut between hosts, rows moved between hosts per
    layer with mvc, plain halo rows between hosts per layer: part pairs as the exchange sends
    them) of an artifact's assignment."""
    from graphdist.data import load_graph
    from partitioners import comm_volume, edge_cut
    from partitioners.hostsplit import rows_between_hosts
    g = load_graph(spec)
    a = np.load(part / "assignment.npy")
    moved, plain = rows_between_hosts(g, a, k, hosts)
    return int(comm_volume(g, a // (k // hosts))), int(edge_cut(g, a // (k // hosts))), moved, plain


def train(tb: Testbed, spec: str, part: Path, args, epochs: int, out: Path, route: str = "direct") -> dict:
    nproc = args.k // args.hosts
    cmd = GD + ["train-gcn", spec, "--partition", str(part), "--epochs", str(epochs), "--halo", args.halo,
                "--halo-route", route,
                "--nnodes", str(args.hosts), "--nproc", str(nproc), "--rdzv-endpoint", "h0:29500", "--no-progress"]
    before = [tb.link_bytes(i) for i in range(args.hosts)]
    procs = [tb.popen(i, cmd + ["--report", str(out) + ("" if i == 0 else f".{i}")], stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT, text=True, env=env()) for i in range(args.hosts)]
    texts = [p.communicate(timeout=1800)[0] for p in procs]
    for p, t in zip(procs, texts):
        if p.returncode != 0:
            raise SystemExit(f"run failed ({p.returncode}):\n{t[-3000:]}")
    after = [tb.link_bytes(i) for i in range(args.hosts)]
    r = json.loads(out.read_text())
    return {"tx_bytes": sum(a[1] - b[1] for a, b in zip(after, before)), "losses": r["losses"],
            "halo_bytes_per_epoch": r.get("comm/halo_bytes_per_epoch"), "epoch_s": r["time/epoch_s"],
            "route": r.get("comm/halo_route"), "plan_bytes": r.get("comm/halo_bytes_between_hosts_per_epoch")}


def count(args) -> int:
    from graphdist.data import load_graph
    from partitioners import partition
    from partitioners.hostsplit import rows_between_hosts
    from partitioners.quality import edge_imbalance, node_imbalance
    rows = []
    for spec in (s for s in args.specs.split(";") if s):
        g = load_graph(spec)
        flat = None
        for name, hosts in (("flat", 1), ("hosts", args.hosts)):
            t0 = time.perf_counter()
            a = partition(g, args.k, method=args.method, balance=args.balance, hosts=hosts).numpy()
            sec = time.perf_counter() - t0
            moved, plain = rows_between_hosts(g, a, args.k, args.hosts)
            flat = flat or (moved, plain)
            row = {"spec": spec, "partition": name, "method": args.method, "balance": args.balance,
                   "moved_rows_between_hosts": moved, "plain_rows_between_hosts": plain,
                   "moved_ratio": moved / flat[0], "plain_ratio": plain / flat[1],
                   "node_imbalance": node_imbalance(g, a, args.k), "edge_imbalance": edge_imbalance(g, a, args.k),
                   "partition_s": sec}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--specs", default=SPECS)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--method", default="metis")
    ap.add_argument("--halo", default="mvc")
    ap.add_argument("--route", default="direct", help="comma-separated train-gcn --halo-route values (direct,hosts)")
    ap.add_argument("--epochs", default="5,15")
    ap.add_argument("--work", default="runs/hier_hosts")
    ap.add_argument("--balance", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--count", action="store_true", help="count rows between hosts only (no test bed)")
    args = ap.parse_args()
    if args.count:
        return count(args)
    e1, e2 = (int(x) for x in args.epochs.split(","))
    routes = [r for r in args.route.split(",") if r]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    t0 = time.time()
    print(f"load: {os.getloadavg()}", flush=True)
    with Testbed(args.hosts) as tb:
        for si, spec in enumerate(s for s in args.specs.split(";") if s):
            for name, extra in (("flat", []), ("hosts", ["--hosts", str(args.hosts)])):
                part = work / f"s{si}-{name}"
                if not (part / "meta.json").exists():
                    bal = ["--balance", args.balance] if args.balance else []
                    subprocess.run(GD + ["partition", spec, "--parts", str(args.k), "--method", args.method, *bal,
                                         "--out", str(part), *extra], check=True, env=env(), stdout=subprocess.DEVNULL)
                rows_between, cut_between, moved_x, plain_x = host_rows(spec, part, args.k, args.hosts)
                for route in routes:
                    tag = f"s{si}-{name}" + ("" if route == "direct" else f"-{route}") + f"-{args.halo}"
                    runs = {e: train(tb, spec, part, args, e, work / f"{tag}-e{e}.json", route) for e in (e1, e2)}
                    per_epoch = (runs[e2]["tx_bytes"] - runs[e1]["tx_bytes"]) / (e2 - e1)
                    meta = json.loads((part / "meta.json").read_text())
                    row = {"spec": spec, "partition": name, "route": runs[e2]["route"], "halo": args.halo, "k": args.k,
                           "hosts": args.hosts, "method": args.method,
                           "inter_host_bytes_per_epoch": per_epoch, "inter_host_halo_rows": rows_between,
                           "inter_host_edge_cut": cut_between, "inter_host_moved_rows_per_layer": moved_x,
                           "inter_host_plain_rows_per_layer": plain_x,
                           "halo_rows_all_parts": meta["quality"]["comm_volume"],
                           "plan_halo_bytes_between_hosts_per_epoch": runs[e2]["plan_bytes"],
                           "final_loss": runs[e2]["losses"][-1], "losses": runs[e2]["losses"],
                           "halo_bytes_per_epoch_all_ranks": runs[e2]["halo_bytes_per_epoch"],
                           "tx_bytes": {e: runs[e]["tx_bytes"] for e in runs}, "load": os.getloadavg()[0]}
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "losses"}), flush=True)
    print(f"done in {time.time() - t0:.0f} s; load {os.getloadavg()}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("\n| graph | halo | partition | route | bytes crossing hosts / epoch | ratio | halo bytes between hosts "
          "(plan) | rows between hosts / layer, mvc | plain | halo rows, all parts | final loss |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    per_spec = 2 * len(routes)
    for i in range(0, len(rows), per_spec):
        f = rows[i]
        for r in rows[i:i + per_spec]:
            plan = r["plan_halo_bytes_between_hosts_per_epoch"]
            print(f"| {r['spec'].split(',')[0]} | {r['halo']} | {r['partition']} | {r['route']} | "
                  f"{r['inter_host_bytes_per_epoch']:,.0f} | "
                  f"{r['inter_host_bytes_per_epoch'] / f['inter_host_bytes_per_epoch']:.2f} | "
                  f"{'-' if plan is None else f'{plan:,}'} | "
                  f"{r['inter_host_moved_rows_per_layer']:,} | {r['inter_host_plain_rows_per_layer']:,} | "
                  f"{r['halo_rows_all_parts']:,} | {r['final_loss']:.8f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
