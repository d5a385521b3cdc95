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

import sys
import time
from pathlib import Path

import harness


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
    s = harness.median_s(lambda: adj.own.mm(x), repeats)
    streamed = nnz * 8 + (n + 1) * 4 + 2 * n * cols * 4
    return {"artifact": str(art), "order": order, "order_s": order_s, "owned_rows": n, "entries": nnz, "bytes_streamed": streamed,
            "seconds": s, "entries_cols_per_s": nnz * cols / s}


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--cols", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--orders", default="rcm", help="owned-row orders to measure, side by side (--reorder)")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import torch
    torch.set_num_threads(1)
    rows = []
    print(harness.table_head(["artifact", "order", "order s", "rows", "entries", "MB streamed", "s",
                              "entries x cols / s"], [False, False] + [True] * 6), flush=True)
    for d in args.dirs:
        for order in harness.csv(args.orders):
            r = measure(d, args.cols, args.repeats, order)
            rows.append(r)
            print(harness.table_row([d.name, order, f"{r['order_s']:.1f}", r["owned_rows"], r["entries"],
                                     f"{r['bytes_streamed'] / 1e6:.1f}", f"{r['seconds']:.3f}",
                                     f"{r['entries_cols_per_s']:.3e}"]), flush=True)
    harness.write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
