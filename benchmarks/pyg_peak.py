"""Peak memory of PyG ``GCNConv`` in one process on the graph of a one-part artifact, to set
beside ``train-gcn --partition DIR`` (k = 1) on the same graph and model (issue 17).

    OMP_NUM_THREADS=1 python benchmarks/pyg_peak.py --partition DIR [--layers 2] [--hidden 64]
        [--epochs 2] [--json out.json]

PyG runs the way its docs give for a large graph: ``GCNConv(cached=True)`` on a torch.sparse CSR
``adj_t`` (an ``edge_index`` forward would materialise E x hidden messages), ReLU, dropout 0.5,
Adam 0.01, cross-entropy on the train nodes; an epoch is forward, backward, Adam step and an
evaluation forward, as train-gcn's. The peak is this process's peak RSS (``VmHWM``), which
includes loading the part, so the figure compares with train-gcn's ``mem/peak_bytes``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partition", required=True, help="artifact with one part (graphdist partition ... --parts 1)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from torch_geometric.nn import GCNConv

    from graphdist.partition.parts import load_part
    lg = load_part(args.partition, 0)
    if lg.world_size != 1:
        raise SystemExit(f"{args.partition}: has {lg.world_size} parts; give a one-part artifact")
    n = lg.num_owned
    adj_t = torch.sparse_csr_tensor(lg.indptr, lg.indices.to(torch.int64), torch.ones(lg.indices.numel()), size=(n, n))
    x, y, train = lg.x.clone(), lg.y.clone(), lg.train_mask.clone()
    n_classes = int(y.max()) + 1
    del lg
    dims = [x.shape[1]] + [args.hidden] * (args.layers - 1) + [n_classes]
    torch.manual_seed(0)
    convs = torch.nn.ModuleList(GCNConv(a, b, cached=True) for a, b in zip(dims[:-1], dims[1:]))
    opt = torch.optim.Adam(convs.parameters(), lr=0.01)

    def forward(training: bool):
        h = x
        for i, cv in enumerate(convs):
            h = F.dropout(h, 0.5, training)
            h = cv(h, adj_t)
            if i < len(convs) - 1:
                h = F.relu(h)
        return h

    times, losses = [], []
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        convs.train()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(forward(True)[train], y[train])
        loss.backward()
        opt.step()
        convs.eval()
        with torch.no_grad():
            acc = float((forward(False).argmax(1) == y).float().mean())
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    from graphdist.runtime import peak_rss_bytes
    peak = peak_rss_bytes()
    out = {"nodes": n, "edges": int(adj_t.values().numel()), "layers": args.layers, "hidden": args.hidden,
           "pyg/peak_bytes": peak, "pyg/epoch_s": times, "losses": losses, "acc": acc}
    print(f"PyG GCNConv {args.layers}x{args.hidden} on {n:,} nodes / {out['edges']:,} edges: peak RSS "
          f"{peak / 2**20:,.0f} MiB, epochs {', '.join(f'{t:.1f}' for t in times)} s")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
