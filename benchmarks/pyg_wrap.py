"""What ``graphdist.gnn.pyg.distribute`` costs at k = 1: a PyG model wrapped vs the same model run
plainly, and graphdist's built-in GCN vs PyG's GCNConv wrapped, epochs interleaved in one process.

    python benchmarks/pyg_wrap.py [--spec SPEC] [--models gcn,sage,gat] [--hidden 64]
        [--epochs 10] [--warmup 2] [--threads 1] [--json out.json]

An epoch is forward (dropout 0.5), cross-entropy on the training nodes, backward, Adam step,
then an evaluation forward pass. Variants, all from the same initial weights:

    plain        the PyG model, edge_index of the whole graph (GCNConv with cached=False, its default)
    wrapped      gd.distribute(model, part) on the one part of a 1-rank job (halo="plain")
    wrapped-mvc  the same with halo="mvc" (GCN's aggregation then runs on graphdist's SpMM)
    builtin      graphdist.gnn.models.GNN("gcn") with SparseAdj, as train-gcn runs it (gcn only)

Medians of CPU time (process_time: other jobs on the machine disturb it less) and wall time;
the variants take turns epoch by epoch, in a rotating order. Target: wrapped <= 1.1x plain.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

DEFAULT_SPEC = "sbm:nodes=50000,classes=8,avg_degree=20,homophily=0.7,features=64,seed=0"


class Net(torch.nn.Module):
    """Two PyG layers, dropout before each (Kipf's layout), ReLU between."""

    def __init__(self, kind: str, f_in: int, hidden: int, classes: int):
        super().__init__()
        from torch_geometric.nn import GATConv, GCNConv, SAGEConv
        if kind == "gcn":
            self.c1, self.c2 = GCNConv(f_in, hidden), GCNConv(hidden, classes)
        elif kind == "sage":
            self.c1, self.c2 = SAGEConv(f_in, hidden), SAGEConv(hidden, classes)
        elif kind == "gat":
            self.c1, self.c2 = GATConv(f_in, hidden // 4, heads=4), GATConv(hidden, classes)
        else:
            raise SystemExit(f"--models: unknown model {kind!r} (gcn, sage, gat)")

    def forward(self, x, edge_index):
        h = F.relu(self.c1(F.dropout(x, 0.5, self.training), edge_index))
        return self.c2(F.dropout(h, 0.5, self.training), edge_index)


def pyg_step(model, x, edge_index, y, tm):
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def step():
        model.train()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x, edge_index)[tm], y[tm]).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            model(x, edge_index).argmax(1)
    return step


def wrapped_step(model, part):
    import graphdist.gnn.pyg as gd
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def step():
        model.train()
        opt.zero_grad(set_to_none=True)
        gd.cross_entropy(model(part.x, part.edge_index), part.y, part.train_mask).backward()
        gd.sync_grads(model)
        opt.step()
        model.eval()
        with torch.no_grad():
            model(part.x, part.edge_index).argmax(1)
    return step


def builtin_step(part, f_in, hidden, classes):
    from graphdist.gnn.models import GNN
    from graphdist.exchange.spmm import SparseAdj
    torch.manual_seed(0)
    model = GNN("gcn", f_in, hidden, classes, 2, 0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    adj = SparseAdj.for_model(part.graph, "gcn")
    lg, epoch = part.graph, [0]

    def step():
        epoch[0] += 1
        model.train()
        opt.zero_grad(set_to_none=True)
        out = model(lg.x, adj, None, ids=lg.owned, step=epoch[0])
        F.cross_entropy(out[lg.train_mask], lg.y[lg.train_mask]).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            model(lg.x, adj, None).argmax(1)
    return step


def measure(steps: dict, epochs: int, warmup: int) -> dict:
    times = {k: ([], []) for k in steps}
    names = list(steps)
    for e in range(warmup + epochs):
        for i in range(len(names)):
            name = names[(e + i) % len(names)]
            c0, w0 = time.process_time(), time.perf_counter()
            steps[name]()
            c1, w1 = time.process_time(), time.perf_counter()
            if e >= warmup:
                times[name][0].append(c1 - c0)
                times[name][1].append(w1 - w0)
    return {k: {"cpu_ms": 1e3 * statistics.median(c), "wall_ms": 1e3 * statistics.median(w)}
            for k, (c, w) in times.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default=DEFAULT_SPEC)
    p.add_argument("--models", default="gcn,sage,gat")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    import graphdist.gnn.pyg as gd
    from graphdist.data import load_graph
    from graphdist.partition.layout import build_layout
    g = load_graph(args.spec)
    part = gd.Part.from_local_graph(build_layout(g, torch.zeros(g.num_nodes, dtype=torch.int64), 0, 1))
    f_in, c = g.num_features, g.num_classes
    res = {"spec": args.spec, "nodes": g.num_nodes, "edges": g.num_edges, "hidden": args.hidden,
           "threads": args.threads, "epochs": args.epochs, "models": {}}
    print(f"{args.spec}: {g.num_nodes:,} nodes, {g.num_edges:,} edges, hidden {args.hidden}, "
          f"{args.threads} thread(s), median of {args.epochs} epochs", flush=True)
    ei = g.edge_index
    for kind in args.models.split(","):
        steps = {}
        for variant in ("plain", "wrapped", "wrapped-mvc"):
            if variant == "wrapped-mvc" and kind == "gat":
                continue  # attention is not a fixed linear map: it would run plain
            torch.manual_seed(0)
            model = Net(kind, f_in, args.hidden, c)
            if variant == "plain":
                steps[variant] = pyg_step(model, g.x, ei, g.y, g.train_mask)
            else:
                gd.distribute(model, part, halo="mvc" if variant == "wrapped-mvc" else "plain")
                steps[variant] = wrapped_step(model, part)
        if kind == "gcn":
            steps["builtin"] = builtin_step(part, f_in, args.hidden, c)
        r = measure(steps, args.epochs, args.warmup)
        base = r["plain"]
        for v, t in r.items():
            t["cpu_ratio_vs_plain"] = t["cpu_ms"] / base["cpu_ms"]
            t["wall_ratio_vs_plain"] = t["wall_ms"] / base["wall_ms"]
            print(f"  {kind:5s} {v:12s} {t['cpu_ms']:9.1f} CPU ms {t['wall_ms']:9.1f} wall ms   "
                  f"x{t['cpu_ratio_vs_plain']:.3f} CPU  x{t['wall_ratio_vs_plain']:.3f} wall vs plain", flush=True)
        if "builtin" in r:
            for v in ("wrapped", "wrapped-mvc"):
                x = r["builtin"]["cpu_ms"] / r[v]["cpu_ms"]
                print(f"  gcn   builtin / {v}: x{x:.3f} CPU", flush=True)
        res["models"][kind] = r
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
