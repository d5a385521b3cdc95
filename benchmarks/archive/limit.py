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

    OMP_NUM_THREADS=1 python benchmarks/archive/limit.py DIR [--reorder blocks] [--epochs 3] [--json FILE]

DIR is a k = 1 artifact (``graphdist partition SPEC --parts 1 --method block --out DIR``).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness  # noqa: E402


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--reorder", default="blocks")
    ap.add_argument("--cols", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    return ap


def copy_rate(repeats: int) -> float:
    """Bytes per second of a streaming copy of 512 MiB (read + write)."""
    import torch
    src = torch.ones(1 << 27)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / harness.median_s(lambda: dst.copy_(src), repeats)


def gather_rate(adj, n: int, c: int, repeats: int) -> float:
    """Entries x columns per second of ``index_select`` of every entry's input row, block by block."""
    import torch
    x = torch.randn(n, c)
    cols = adj.own.A.col_indices().to(torch.int64)
    nnz, blk = adj.own.nnz, 1 << 16
    buf = torch.empty(blk, c)

    def gather():
        for e0 in range(0, nnz, blk):
            idx = cols[e0:e0 + blk]
            torch.index_select(x, 0, idx, out=buf[:idx.numel()])
    return nnz * c / harness.median_s(gather, repeats)


def product_rate(adj, n: int, c: int, repeats: int) -> float:
    """Entries x columns per second of graphdist's product ``A_own @ x``."""
    import torch
    x = torch.randn(n, c)
    return adj.own.nnz * c / harness.median_s(lambda: adj.own.mm(x), repeats)


def epoch_entry_cols(lg, nnz: int) -> int:
    """The entry-columns one 2 x 64 epoch multiplies (forward, backward where needed, evaluation)."""
    from graphdist.gnn.models import layer_widths
    widths = 0
    for i, lay in enumerate(layer_widths(int(lg.x.shape[1]), 64, int(lg.num_classes), 2, active=False)):
        widths += lay["train_width"] * (2 if lay["needs_input_grad"] else 1)  # forward, and backward if needed
        if not (i == 0 and lay["eval_reuse"]):
            widths += lay["eval_width"]
    return nnz * widths


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import time

    import torch
    torch.set_num_threads(1)
    from graphdist.exchange.spmm import SparseAdj
    from graphdist.gnn.config import GCNConfig
    from graphdist.partition.parts import load_part
    out = {"artifact": str(args.dir), "reorder": args.reorder, "cols": args.cols}
    t0 = time.perf_counter()
    lg = load_part(args.dir, 0)
    lg = lg.reordered(args.reorder, max(int(lg.x.shape[1]), 64))  # as the trainer at 2 x 64
    out["reorder_s"] = time.perf_counter() - t0
    adj = SparseAdj.for_model(lg, "gcn")
    n, nnz, c = lg.num_owned, adj.own.nnz, args.cols
    out["copy_bytes_per_s"] = copy_rate(args.repeats)
    out["index_select_entries_cols_per_s"] = gather_rate(adj, n, c, args.repeats)
    out["product_entries_cols_per_s"] = product_rate(adj, n, c, args.repeats)
    out["product_over_index_select"] = out["product_entries_cols_per_s"] / out["index_select_entries_cols_per_s"]
    del adj
    cfg = GCNConfig(partition=str(args.dir), layers=2, hidden=64, epochs=args.epochs, progress=False,
                    summary=False, reorder=args.reorder)
    out["epoch_s"] = harness.train_gcn(cfg, [load_part(args.dir, 0)])["time/epoch_s"]
    out["epoch_entry_cols"] = epoch_entry_cols(lg, nnz)
    out["epoch_products_s"] = out["epoch_entry_cols"] / out["product_entries_cols_per_s"]
    out["epoch_over_products"] = out["epoch_s"] / out["epoch_products_s"]
    for k, v in out.items():
        print(f"{k:>34}: {v:.4g}" if isinstance(v, float) else f"{k:>34}: {v}")
    harness.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
