"""The sparse product's rate against the size of what it touches: for each artifact given, part
0's normalised GCN adjacency (owned block, as the trainer builds it) times a dense block of
``--cols`` columns, the median of ``--repeats`` products after one warm-up, in one thread.

    OMP_NUM_THREADS=1 python benchmarks/spmm_rate.py DIR [DIR ...] [--cols 64] [--repeats 7]
        [--orders blocks,rcm,community] [--json FILE]

Prints, per artifact: owned rows, stored entries, the bytes one product streams (the CSR plus
the input and output blocks), seconds per product and the rate in entries x columns per second.
A rate that falls as the part grows is the memory hierarchy, not the algorithm: the work is
linear in the entries, the time per entry is not once the blocks leave the cache.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def measure(art: Path, cols: int, repeats: int, order: str = "rcm") -> dict:
    import torch

    from graphdist.partition.parts import load_part
    from graphdist.exchange.spmm import SparseAdj
    t0 = time.perf_counter()
    lg = load_part(art, 0).reordered(order, cols)
    order_s = time.perf_counter() - t0
    adj = SparseAdj.for_model(lg, "gcn")
    n, nnz = lg.num_owned, adj.own.nnz
    x = torch.randn(n, cols)
    adj.own.mm(x)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        adj.own.mm(x)
        times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    streamed = nnz * 8 + (n + 1) * 4 + 2 * n * cols * 4
    return {"artifact": str(art), "order": order, "order_s": order_s, "owned_rows": n, "entries": nnz, "bytes_streamed": streamed,
            "seconds": s, "entries_cols_per_s": nnz * cols / s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--cols", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--orders", default="rcm", help="owned-row orders to measure, side by side (--reorder)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    rows = []
    print(f"{'artifact':<24} {'order':<10} {'order s':>8} {'rows':>10} {'entries':>12} {'MB streamed':>12} {'s':>8} "
          f"{'entries x cols / s':>19}")
    for d in args.dirs:
        for order in args.orders.split(","):
            r = measure(d, args.cols, args.repeats, order)
            rows.append(r)
            print(f"{d.name:<24} {order:<10} {r['order_s']:>8.1f} {r['owned_rows']:>10,} {r['entries']:>12,} "
                  f"{r['bytes_streamed'] / 1e6:>12.1f} {r['seconds']:>8.3f} {r['entries_cols_per_s']:>19.3e}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
