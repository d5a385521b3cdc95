"""Where a ``train-gcn`` epoch goes: ``cProfile`` of rank 0 over whole epochs (training and
evaluation) on k ranks, one thread each, the time grouped by what it does:

    products   the sparse products (``addmm`` of a CSR operator, forward and backward)
    linears    the dense products of the linears (``linear``, ``matmul``) in the forward
    dropout    the keyed dropout (mask bits, compare, scaled multiply), ReLU fused in
    exchange   waiting for halo rows (``Pending.wait``) and posting them (gather, all-to-all)
    backward   autograd's engine itself and the native backward kernels it runs (the linears'
               weight and input gradients, ReLU/dropout, cross-entropy): cProfile sees them as
               one C call; the sparse products' backward is counted under products
    optimizer  Adam's step and the gradient all-reduce
    other      everything else (loss, metrics, bookkeeping)

    OMP_NUM_THREADS=1 python benchmarks/epoch_profile.py DIR [--epochs 2] [--flags "--reorder community"]
        [--json FILE]

DIR is a partition artifact; k is its number of parts. The first epoch is left out (warm-up).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GROUPS = (
    ("products", ("addmm",)),
    ("exchange", ("wait", "all_to_all", "_start", "index_select", "post")),
    ("dropout", ("_dropout_into", "bits_into", "id_hashes", "mix32", "addcmul", "relu_", "ge", "_hashes",
                 "bitwise", "keyed", "_ReluDropout")),
    ("linears", ("linear", "matmul")),
    ("backward", ("run_backward",)),
    ("optimizer", ("adam", "step", "all_reduce", "_single_tensor", "_multi_tensor")),
)


def _group(name: str) -> str:
    low = name.lower()
    for g, keys in GROUPS:
        if any(k.lower() in low for k in keys):
            return g
    return "other"


def _rank(rank, ws, art, epochs, flags):
    import cProfile
    import pstats

    from graphdist.gnn.config import GCNConfig
    from graphdist.gnn.trainer import fit
    from graphdist.partition.parts import load_part
    from graphdist.runtime import init_distributed
    import torch
    torch.set_num_threads(1)
    ctx = init_distributed("cpu")
    kw = dict(flags)
    cfg = GCNConfig(partition=art, layers=2, hidden=64, epochs=1, progress=False, summary=False, **kw)
    lg = load_part(art, rank)
    seen = {}

    def cb(epoch, hist):  # profile epochs 2.. only: start after the first
        if epoch == 1 and rank == 0:
            seen["prof"] = cProfile.Profile()
            seen["prof"].enable()
        return False
    cfg = GCNConfig(**{**cfg.__dict__, "epochs": epochs + 1})
    rep = fit(cfg, [lg], {}, ctx, callbacks=[cb])
    if rank != 0:
        return None
    prof = seen["prof"]
    prof.disable()
    st = pstats.Stats(prof)
    groups: dict = {}
    total = 0.0
    top = []
    for (file, line, name), (cc, nc, tt, ct, callers) in st.stats.items():
        label = name if file == "~" else f"{Path(file).stem}.{name}"
        g = _group(label)
        groups[g] = groups.get(g, 0.0) + tt
        total += tt
        top.append((tt / epochs, label, g))
    top.sort(reverse=True)
    return {"epochs": epochs, "epoch_s": rep["time/epoch_s"], "profiled_s": total,
            "top": [{"s_per_epoch": t, "function": f, "group": g} for t, f, g in top[:20]],
            "shares": {g: v / total for g, v in sorted(groups.items(), key=lambda kv: -kv[1])},
            "seconds_per_epoch": {g: v / epochs for g, v in groups.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--flags", default="", help="GCNConfig fields as k=v,k=v (e.g. reorder=community)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    from graphdist.partition.artifact import read_meta
    from graphdist.testing import run_ranks
    k = int(read_meta(args.dir)["k"])
    flags = [tuple(f.split("=", 1)) for f in args.flags.split(",") if f]
    out = run_ranks(_rank, k, args=(args.dir, args.epochs, flags), timeout=7200)[0]
    out.update(artifact=args.dir, k=k, flags=args.flags)
    print(f"k = {k}, median epoch {out['epoch_s']:.2f} s; rank 0's profiled time by group:")
    for g, v in out["shares"].items():
        print(f"  {g:<10} {100 * v:5.1f}%  {out['seconds_per_epoch'][g]:8.2f} s/epoch")
    print("the 12 functions with the most time of their own (s per epoch, group):")
    for t in out["top"][:12]:
        print(f"  {t['s_per_epoch']:8.3f}  {t['function']:<48} {t['group']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
