"""Test accuracy of PyG models trained on k ranks with ``graphdist.gnn.pyg`` vs the same PyG model
trained in one process on the whole graph, over several seeds.

    python benchmarks/pyg_accuracy.py [--cases gat:Cora,gcn2:Cora,gin:CiteSeer] [--seeds 5] [--k 2]
        [--root ../shared/datasets/planetoid] [--method metis] [--train-gcn | --only-train-gcn]
        [--json out.json]

Models (PyG's own example settings, shortened where noted; features row-normalised; public split;
test accuracy at the epoch of best validation accuracy):

    gat   GATConv 8 heads x 8 hidden, dropout 0.6 (features and attention), Adam lr 0.005,
          weight decay 5e-4, 200 epochs (PyG examples/gat.py)
    gcn2  GCNII: Linear, 8 GCN2Conv layers (alpha 0.1, theta 0.5, 64 hidden), Linear; dropout 0.6;
          Adam lr 0.01, weight decay 0.01 on the convolutions and 5e-4 on the linears; 300 epochs
          (PyG examples/gcn2_cora.py has 64 layers and 1000 epochs)
    gin   2 GINConv layers with a 2-layer MLP (64 hidden) each, dropout 0.5, Adam lr 0.01,
          weight decay 5e-4, 200 epochs

The k-rank runs train the very same model through ``gd.distribute`` (``torch.distributed``
through ``graphdist.testing.run_ranks``, gloo); dropout masks come from each rank's generator,
so the runs are not the one-process runs repeated, only the same model and settings. A case whose
dataset is absent under ``--root`` is skipped with a line saying so.

``--train-gcn`` adds a third column: ``graphdist train-gcn --model KIND`` at k ranks (its own
training loop, :func:`graphdist.gnn.trainer.fit`, on the same METIS parts), with the flags of
:data:`TRAIN_GCN` (the same settings as far as the CLI has them: its GAT has no attention
dropout, one ``--weight-decay`` for all parameters). Its dropout is keyed by global node id, so
its k-rank runs equal its one-process runs (``tests/test_pyg_cli.py``); the comparison is with
the PyG model trained in one process.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout (children too)

SETTINGS = {"gat": dict(epochs=200, lr=0.005), "gcn2": dict(epochs=300, lr=0.01), "gin": dict(epochs=200, lr=0.01)}

TRAIN_GCN = {  # train-gcn flags for the same models
    "gat": dict(model="gat", layers=2, hidden=8, dropout=0.6, lr=0.005, weight_decay=5e-4, epochs=200,
                weight_decay_all=True),
    "gcn2": dict(model="gcn2", layers=8, hidden=64, dropout=0.6, lr=0.01, weight_decay=0.01, epochs=300,
                 weight_decay_all=False),  # 0.01 on the convolutions, none on the linears (PyG: 5e-4)
    "gin": dict(model="gin", layers=2, hidden=64, dropout=0.5, lr=0.01, weight_decay=5e-4, epochs=200,
                weight_decay_all=True),
}


def build(kind: str, f_in: int, classes: int) -> torch.nn.Module:
    from torch import nn
    from torch_geometric.nn import GATConv, GCN2Conv, GINConv

    class GAT(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = GATConv(f_in, 8, heads=8, dropout=0.6)
            self.c2 = GATConv(64, classes, heads=1, concat=False, dropout=0.6)

        def forward(self, x, ei):
            x = F.elu(self.c1(F.dropout(x, 0.6, self.training), ei))
            return self.c2(F.dropout(x, 0.6, self.training), ei)

    class GCNII(nn.Module):
        def __init__(self, layers=8, hidden=64):
            super().__init__()
            self.lins = nn.ModuleList([nn.Linear(f_in, hidden), nn.Linear(hidden, classes)])
            self.convs = nn.ModuleList(GCN2Conv(hidden, 0.1, 0.5, i + 1) for i in range(layers))

        def forward(self, x, ei):
            x = x0 = F.relu(self.lins[0](F.dropout(x, 0.6, self.training)))
            for conv in self.convs:
                x = F.relu(conv(F.dropout(x, 0.6, self.training), x0, ei))
            return self.lins[1](F.dropout(x, 0.6, self.training))

    class GIN(nn.Module):
        def __init__(self, hidden=64):
            super().__init__()
            mlp = lambda a, b: nn.Sequential(nn.Linear(a, hidden), nn.ReLU(), nn.Linear(hidden, b))  # noqa: E731
            self.c1, self.c2 = GINConv(mlp(f_in, hidden)), GINConv(mlp(hidden, classes))

        def forward(self, x, ei):
            x = F.relu(self.c1(F.dropout(x, 0.5, self.training), ei))
            return self.c2(F.dropout(x, 0.5, self.training), ei)

    return {"gat": GAT, "gcn2": GCNII, "gin": GIN}[kind]()


def optimizer(kind: str, model):
    lr = SETTINGS[kind]["lr"]
    if kind == "gcn2":
        return torch.optim.Adam([{"params": model.convs.parameters(), "weight_decay": 0.01},
                                 {"params": model.lins.parameters(), "weight_decay": 5e-4}], lr=lr)
    return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=5e-4)


def fit(kind, model, x, ei, y, masks, loss_fn, acc_fn, after_backward=lambda: None) -> float:
    """Train; test accuracy at the epoch of best validation accuracy."""
    opt = optimizer(kind, model)
    best, test_at = -1.0, 0.0
    for _ in range(SETTINGS[kind]["epochs"]):
        model.train()
        opt.zero_grad()
        loss_fn(model(x, ei), y, masks[0]).backward()
        after_backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            out = model(x, ei)
        val, test = acc_fn(out, y, masks[1]), acc_fn(out, y, masks[2])
        if val > best:
            best, test_at = val, test
    return test_at


def _acc(out, y, m) -> float:
    return float((out.argmax(1) == y)[m].double().mean())


def single(kind: str, graph, seed: int) -> float:
    x = graph.x / graph.x.sum(1, keepdim=True).clamp(min=1)
    torch.manual_seed(seed)
    model = build(kind, graph.num_features, graph.num_classes)
    masks = (graph.train_mask, graph.val_mask, graph.test_mask)
    return fit(kind, model, x, graph.edge_index, graph.y, masks,
               lambda o, y, m: F.cross_entropy(o[m], y[m]), _acc)


def _rank_job(rank, ws, kind, graph, seeds, method):
    import graphdist.gnn.pyg as gd
    torch.set_num_threads(1)
    part = gd.load_part(graph, method=method)
    x = part.x / part.x.sum(1, keepdim=True).clamp(min=1)
    masks = (part.train_mask, part.val_mask, part.test_mask)
    out = []
    for seed in seeds:
        torch.manual_seed(seed)
        model = gd.distribute(build(kind, part.num_features, part.num_classes), part)
        torch.manual_seed(1000 * seed + rank)
        out.append(fit(kind, model, x, part.edge_index, part.y, masks, gd.cross_entropy, gd.accuracy,
                       lambda: gd.sync_grads(model)))
    return out


def _train_gcn_job(rank, ws, kind, graph, seeds, method):
    from graphdist.gnn.config import GCNConfig
    from graphdist.gnn.trainer import fit
    from graphdist.partition.setup import load_local
    from graphdist.runtime import init_distributed
    torch.set_num_threads(1)
    ctx = init_distributed("cpu")
    base = dict(spec=graph.name or "graph", method=method, row_normalize=True, progress=False, device="cpu",
                **TRAIN_GCN[kind])
    lg, info = load_local(GCNConfig(**base), rank, ws, graph)  # partition seed 0, as load_part
    return [fit(GCNConfig(**base, seed=seed), lg, info, ctx)["test_acc"] for seed in seeds]


def _stats(v: list[float]) -> dict:
    return {"mean": statistics.mean(v), "std": statistics.stdev(v) if len(v) > 1 else 0.0,
            "min": min(v), "max": max(v), "runs": v}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="gat:Cora,gcn2:Cora,gin:CiteSeer")
    p.add_argument("--root", default="../shared/datasets/planetoid")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--method", default="metis")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--train-gcn", action="store_true", help="also train `train-gcn --model KIND` at k ranks")
    p.add_argument("--only-train-gcn", action="store_true", help="only the train-gcn column")
    p.add_argument("--json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from graphdist.data import load_graph
    from graphdist.testing import run_ranks
    res = {"k": args.k, "seeds": args.seeds, "method": args.method, "cases": {}}
    for case in args.cases.split(","):
        kind, name = case.split(":")
        if kind not in SETTINGS:
            raise SystemExit(f"--cases: unknown model {kind!r} (choose from {', '.join(SETTINGS)})")
        if not (Path(args.root) / name / "raw").is_dir():
            print(f"{case}: skipped, {Path(args.root) / name / 'raw'} is absent", flush=True)
            continue
        graph = load_graph(f"planetoid:{args.root}/{name}")
        seeds = list(range(args.seeds))
        r, parts, t2 = {"seconds": {}}, [], time.perf_counter()
        if not args.only_train_gcn:
            t0 = time.perf_counter()
            one = [single(kind, graph, s) for s in seeds]
            t1 = time.perf_counter()
            dist = run_ranks(_rank_job, args.k, args=(kind, graph, seeds, args.method), timeout=3600)[0]
            t2 = time.perf_counter()
            r.update({"one_process": _stats(one), f"k{args.k}": _stats(dist),
                      "seconds": {"one_process": t1 - t0, f"k{args.k}": t2 - t1}})
            a, b = r["one_process"], r[f"k{args.k}"]
            parts.append(f"one process {100 * a['mean']:.2f}% (std {100 * a['std']:.2f}), k={args.k} "
                     f"{100 * b['mean']:.2f}% (std {100 * b['std']:.2f}), difference "
                     f"{100 * (b['mean'] - a['mean']):+.2f} points; {t1 - t0:.0f} s / {t2 - t1:.0f} s")
        if args.train_gcn or args.only_train_gcn:
            cli = run_ranks(_train_gcn_job, args.k, args=(kind, graph, seeds, args.method), timeout=3600)[0]
            r[f"train_gcn_k{args.k}"] = c = _stats(cli)
            r["seconds"][f"train_gcn_k{args.k}"] = time.perf_counter() - t2
            parts.append(f"train-gcn --model {kind} k={args.k} {100 * c['mean']:.2f}% (std {100 * c['std']:.2f}), "
                         f"runs {' '.join(f'{100 * v:.1f}' for v in cli)}")
        res["cases"][case] = r
        print(f"{case}: " + "; ".join(parts), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
