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

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import harness

SPECS = ("sbm:nodes=20000,classes=8,avg_degree=20,homophily=0.7,features=32,seed=0;"
         "edgelist:snap/facebook_combined.txt,features=degree,labels=random:4")


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


def train(tb, spec: str, part: Path, args, epochs: int, out: Path, route: str = "direct") -> dict:
    nproc = args.k // args.hosts
    cmd = harness.graphdist_cmd(
        "train-gcn", spec, "--partition", str(part), "--epochs", str(epochs), "--halo", args.halo,
        "--halo-route", route,
        "--nnodes", str(args.hosts), "--nproc", str(nproc), "--rdzv-endpoint", "h0:29500", "--no-progress")
    r, tx = harness.on_hosts(tb, cmd, out)
    return {"tx_bytes": sum(tx), "losses": r["losses"],
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
    harness.write_json(args.json, rows)
    return 0


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--specs", default=SPECS)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--method", default="metis")
    ap.add_argument("--halo", default="mvc")
    ap.add_argument("--route", default="direct", help="comma-separated train-gcn --halo-route values (direct,hosts)")
    ap.add_argument("--epochs", default="5,15")
    ap.add_argument("--work", default="runs/hier_hosts")
    ap.add_argument("--balance", default=None)
    ap.add_argument("--count", action="store_true", help="count rows between hosts only (no test bed)")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.count:
        return count(args)
    from graphdist.testbed import Testbed
    e1, e2 = harness.csv(args.epochs, int)
    routes = harness.csv(args.route)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    t0 = time.time()
    print(f"load: {os.getloadavg()}", flush=True)
    with Testbed(args.hosts) as tb:
        for si, spec in enumerate(s for s in args.specs.split(";") if s):
            for name, extra in (("flat", []), ("hosts", ["--hosts", str(args.hosts)])):
                bal = ["--balance", args.balance] if args.balance else []
                part = harness.partition_once(spec, work / f"s{si}-{name}", "--parts", str(args.k), "--method",
                                              args.method, *bal, *extra, env=harness.testbed_env())
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
                           "tx_bytes": {e: runs[e]["tx_bytes"] for e in runs}, "load": harness.load()}
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "losses"}), flush=True)
    print(f"done in {time.time() - t0:.0f} s; load {os.getloadavg()}", flush=True)
    harness.write_json(args.json, rows)
    per_spec, cells = 2 * len(routes), []
    for i in range(0, len(rows), per_spec):
        f = rows[i]
        cells += [[r["spec"].split(",")[0], r["halo"], r["partition"], r["route"], round(r["inter_host_bytes_per_epoch"]),
                   f"{r['inter_host_bytes_per_epoch'] / f['inter_host_bytes_per_epoch']:.2f}",
                   r["plan_halo_bytes_between_hosts_per_epoch"], r["inter_host_moved_rows_per_layer"],
                   r["inter_host_plain_rows_per_layer"], r["halo_rows_all_parts"], f"{r['final_loss']:.8f}"]
                  for r in rows[i:i + per_spec]]
    print("\n" + harness.table(["graph", "halo", "partition", "route", "bytes crossing hosts / epoch", "ratio",
                                "halo bytes between hosts (plan)", "rows between hosts / layer, mvc", "plain",
                                "halo rows, all parts", "final loss"], cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
