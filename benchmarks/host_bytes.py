"""Rows crossing hosts per layer: host-aware partition (``--hosts H``) through the two-level route
against flat METIS through the direct exchange, on several graphs and K, counted from the very
plans a run builds (no test bed, no training).

    python benchmarks/host_bytes.py --specs "SPEC;SPEC" [--parts 4,8] [--hosts 2] [--method metis] [--json FILE]

Per spec and K: the flat partition (``partition(g, K, method=M)``) and the host-aware one
(``hosts=H``); the layouts every part file of their artifacts would hold (``write_parts``:
the host-aware artifact's mvc cover across hosts per sending part and receiving host); for
``plain`` and ``mvc``, the send lists of every rank (:func:`graphdist.exchange.route.send_keys`)
and the route plan of ranks host-major on H hosts (:func:`graphdist.exchange.route.build_routes`,
what ``train-gcn --halo-route`` builds): message rows sent to ranks of other hosts per forward
exchange, direct and through the route. ``ratio`` is host-aware + hosts route over flat +
direct in the same halo mode, the figure ``BENCHMARKS.md`` holds against the 0.7x target; a
train-gcn run's ``comm/halo_bytes_between_hosts_per_epoch`` is these rows times the row bytes
of each exchange of an epoch (``benchmarks/hier_hosts.py`` checks it against the test-bed
interface counters).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import harness  # noqa: E402


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--specs", required=True, help="dataset specs separated by ';'")
    ap.add_argument("--parts", default="4,8")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--method", default="metis")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def crossing(g, a, k: int, hosts: int, cover_hosts: int) -> dict:
    """``{(halo, route): rows sent to other hosts per forward exchange}`` of assignment ``a``."""
    import torch

    from graphdist.exchange.route import build_routes, send_keys
    from graphdist.partition.layout import build_layouts
    plans = build_layouts(g, torch.as_tensor(a), k, hosts=cover_hosts)
    host_of = [r // (k // hosts) for r in range(k)]
    out = {}
    for halo in ("plain", "mvc"):
        keys = [send_keys(p, halo) for p in plans]
        for route in ("direct", "hosts"):
            r = build_routes([x[0] for x in keys], [x[1] for x in keys], host_of, routed=route == "hosts")
            out[(halo, route)] = sum(x.cross_send for x in r)
    return out


def main() -> int:
    args = build_parser().parse_args()
    from graphdist.data import load_graph
    from partitioners import partition
    from partitioners.quality import edge_imbalance, node_imbalance
    rows = []
    for spec in (s for s in args.specs.split(";") if s):
        g = load_graph(spec)
        for k in (int(x) for x in args.parts.split(",")):
            got = {}
            for name, hosts in (("flat", 1), ("hosts", args.hosts)):
                t0 = time.perf_counter()
                a = partition(g, k, method=args.method, seed=args.seed, hosts=hosts).numpy()
                sec = time.perf_counter() - t0
                got[name] = crossing(g, a, k, args.hosts, hosts)
                got[name + "_balance"] = (node_imbalance(g, a, k), edge_imbalance(g, a, k), sec)
            for halo in ("plain", "mvc"):
                base = got["flat"][(halo, "direct")]
                row = {"spec": spec, "k": k, "hosts": args.hosts, "method": args.method, "halo": halo,
                       "flat_direct": base, "flat_hosts": got["flat"][(halo, "hosts")],
                       "hosts_direct": got["hosts"][(halo, "direct")], "hosts_hosts": got["hosts"][(halo, "hosts")],
                       "ratio": got["hosts"][(halo, "hosts")] / max(base, 1),
                       "flat_route_ratio": got["flat"][(halo, "hosts")] / max(base, 1),
                       "imbalance_nodes_edges": got["hosts_balance"][:2], "partition_s": got["hosts_balance"][2]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("\n| graph | K | halo | flat, direct | flat, hosts route | host-aware, direct | host-aware, hosts route "
          "| ratio | host-aware imbalance (nodes / in-edges) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        ni, ei = r["imbalance_nodes_edges"]
        print(f"| {r['spec'].split(',features')[0]} | {r['k']} | {r['halo']} | {r['flat_direct']:,} | "
              f"{r['flat_hosts']:,} | {r['hosts_direct']:,} | {r['hosts_hosts']:,} | **{r['ratio']:.2f}** | "
              f"{ni:.1%} / {ei:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
