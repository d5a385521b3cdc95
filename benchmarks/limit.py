"""graphdist's sparse product and epoch against the machine's limits, in one process and run:

1. a streaming copy (``dst.copy_(src)`` of a buffer far above the last-level cache): bytes/s;
2. ``index_select`` of the product's gather shape: for every stored entry of the owned block
   one 64-wide input row (the entries' column ids in the part's row order), into a fixed
   buffer block by block (no output of the gather's full size): entries x columns per second;
3. graphdist's product ``A_own @ x`` (64 columns, ``CSRPair.mm``, as the trainer runs it):
   entries x columns per second, and as a fraction of 2;
4. a whole ``train-gcn`` epoch at k = 1 (``fit`` on the same part: 2 x 64, dropout 0.5, the
   evaluation pass included), and that epoch as a multiple of its sparse products (the
   entry-columns an epoch multiplies, at the rate of 3).

    OMP_NUM_THREADS=1 python benchmarks/limit.py DIR [--reorder blocks] [--epochs 3] [--json FILE]

DIR is a k = 1 artifact (``graphdist partition SPEC --parts 1 --method block --out DIR``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _median(f, reps: int) -> float:
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--reorder", default="blocks")
    ap.add_argument("--cols", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    from graphdist.gnn.config import GCNConfig
    from graphdist.gnn.trainer import fit
    from graphdist.partition.parts import load_part
    from graphdist.exchange.spmm import SparseAdj
    from graphdist.runtime import init_distributed
    out = {"artifact": str(args.dir), "reorder": args.reorder, "cols": args.cols}
    t0 = time.perf_counter()
    lg = load_part(args.dir, 0)
    lg = lg.reordered(args.reorder, max(int(lg.x.shape[1]), 64))  # as the trainer at 2 x 64
    out["reorder_s"] = time.perf_counter() - t0
    adj = SparseAdj.for_model(lg, "gcn")
    n, nnz, c = lg.num_owned, adj.own.nnz, args.cols
    # 1. streaming copy of 512 MiB
    src = torch.ones(1 << 27)
    dst = torch.empty_like(src)
    s = _median(lambda: dst.copy_(src), args.repeats)
    out["copy_bytes_per_s"] = 2 * src.numel() * 4 / s  # read + write
    del src, dst
    # 2. index_select of the gather: every entry's input row, block by block
    x = torch.randn(n, c)
    cols = adj.own.A.col_indices().to(torch.int64)
    blk = 1 << 16
    buf = torch.empty(blk, c)

    def gather():
        for e0 in range(0, nnz, blk):
            idx = cols[e0:e0 + blk]
            torch.index_select(x, 0, idx, out=buf[:idx.numel()])
    s = _median(gather, args.repeats)
    out["index_select_entries_cols_per_s"] = nnz * c / s
    del cols, buf
    # 3. graphdist's product
    s = _median(lambda: adj.own.mm(x), args.repeats)
    out["product_entries_cols_per_s"] = nnz * c / s
    out["product_over_index_select"] = out["product_entries_cols_per_s"] / out["index_select_entries_cols_per_s"]
    del x, adj
    # 4. a whole epoch (the trainer on the same part, reordered the same way)
    ctx = init_distributed("cpu")
    cfg = GCNConfig(partition=str(args.dir), layers=2, hidden=64, epochs=args.epochs, progress=False,
                    summary=False, reorder=args.reorder)
    rep = fit(cfg, [load_part(args.dir, 0)], {}, ctx)
    out["epoch_s"] = rep["time/epoch_s"]
    f_in, n_cls = int(lg.x.shape[1]), int(lg.num_classes)
    from graphdist.gnn.models import layer_widths
    widths = 0
    for i, lay in enumerate(layer_widths(f_in, 64, n_cls, 2, active=False)):
        widths += lay["train_width"] * (2 if lay["needs_input_grad"] else 1)  # forward, and backward if needed
        if not (i == 0 and lay["eval_reuse"]):
            widths += lay["eval_width"]
    out["epoch_entry_cols"] = nnz * widths
    out["epoch_products_s"] = nnz * widths / out["product_entries_cols_per_s"]
    out["epoch_over_products"] = out["epoch_s"] / out["epoch_products_s"]
    for k, v in out.items():
        print(f"{k:>34}: {v:.4g}" if isinstance(v, float) else f"{k:>34}: {v}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
