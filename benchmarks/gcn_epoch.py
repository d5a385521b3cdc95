"""Epoch time: graphdist at k=1 vs PyG GCNConv (torch.sparse adjacency), same graph, model and
weights, in one process; then graphdist at k=2 vs k=1.

    python benchmarks/gcn_epoch.py [--spec SPEC] [--hidden 64] [--layers 2] [--epochs 20]
        [--threads 1] [--ks 2] [--json out.json]

An epoch is a full-batch training step: forward, cross-entropy on the train nodes, backward,
Adam step (dropout 0.5 in both). The two single-process models alternate epoch by epoch so
a busy machine slows both alike; medians are reported. Target: graphdist / PyG <= 1.05 on CPU.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

DEFAULT_SPEC = "sbm:nodes=50000,classes=8,avg_degree=20,homophily=0.7,features=64,seed=0"


def _epoch(step) -> float:
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0


def graphdist_step(graph, lg, model, opt):
    from graphdist.halo.spmm import SparseAdj
    adj = SparseAdj.for_model(lg, "gcn")
    tm, y, x = lg.train_mask, lg.y, lg.x

    def step():
        opt.zero_grad(set_to_none=True)
        out = model(x, adj)
        F.cross_entropy(out[tm], y[tm]).backward()
        opt.step()
    return step


def pyg_step(graph, convs, opt, dropout):
    from torch_geometric.utils import to_torch_csr_tensor
    adj_t = to_torch_csr_tensor(graph.edge_index.flip(0), size=(graph.num_nodes, graph.num_nodes))
    tm, y, x = graph.train_mask, graph.y, graph.x

    def step():
        opt.zero_grad(set_to_none=True)
        h = x
        for i, conv in enumerate(convs):
            h = F.dropout(h, dropout, True)
            h = conv(h, adj_t)
            if i < len(convs) - 1:
                h = F.relu(h)
        F.cross_entropy(h[tm], y[tm]).backward()
        opt.step()
    return step


def pyg_convs(state, dims):
    from torch_geometric.nn import GCNConv
    convs = torch.nn.ModuleList()
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        c = GCNConv(a, b, cached=True)
        c.lin.weight.data.copy_(state[f"convs.{i}.weight"])
        c.bias.data.copy_(state[f"convs.{i}.bias"])
        convs.append(c)
    return convs


def _k_job(rank, world, spec, hidden, layers, epochs, warmup, threads):
    import torch.distributed as dist

    from graphdist import comm
    from graphdist.data import load_graph
    from graphdist.halo.setup import partition_in_process
    from graphdist.halo import build_plan
    from graphdist.gnn.models import GNN
    from graphdist.halo.spmm import SparseAdj
    torch.set_num_threads(threads)
    g = load_graph(spec)
    lg = build_plan(g, partition_in_process(g, world, "metis", 0), rank, world)
    adj = SparseAdj.for_model(lg, "gcn")
    ex = comm.HaloExchanger.from_local_graph(lg)
    torch.manual_seed(0)
    model = GNN("gcn", g.num_features, hidden, g.num_classes, layers, 0.5)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    n_train = float(g.train_mask.sum())
    times = []
    for e in range(warmup + epochs):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = model(lg.x, adj, ex)
        (F.cross_entropy(out[lg.train_mask], lg.y[lg.train_mask], reduction="sum") / n_train).backward()
        comm.all_reduce_grads(model.parameters())
        opt.step()
        dist.barrier()
        if e >= warmup:
            times.append(time.perf_counter() - t0)
    return {"epoch_s": statistics.median(times), "halo_rows": lg.num_halo}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", default=DEFAULT_SPEC)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--ks", default="2", help="world sizes to compare with k=1 ('' = none)")
    p.add_argument("--json")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from graphdist.data import load_graph
    from graphdist.halo import build_plan
    from graphdist.gnn.models import GNN
    g = load_graph(args.spec)
    lg = build_plan(g, torch.zeros(g.num_nodes, dtype=torch.int64), 0, 1)
    torch.manual_seed(0)
    model = GNN("gcn", g.num_features, args.hidden, g.num_classes, args.layers, 0.5)
    dims = [g.num_features] + [args.hidden] * (args.layers - 1) + [g.num_classes]
    convs = pyg_convs(model.state_dict(), dims)
    gd = graphdist_step(g, lg, model, torch.optim.Adam(model.parameters(), lr=0.01))
    pg = pyg_step(g, convs, torch.optim.Adam(convs.parameters(), lr=0.01), 0.5)
    tg, tp = [], []
    for e in range(args.warmup + args.epochs):
        a, b = (_epoch(gd), _epoch(pg)) if e % 2 == 0 else tuple(reversed((_epoch(pg), _epoch(gd))))
        if e >= args.warmup:
            tg.append(a)
            tp.append(b)
    mg, mp = statistics.median(tg), statistics.median(tp)
    res = {"spec": args.spec, "nodes": g.num_nodes, "edges": g.num_edges, "hidden": args.hidden,
           "layers": args.layers, "threads": args.threads, "graphdist_k1_epoch_s": mg, "pyg_epoch_s": mp,
           "ratio_graphdist_over_pyg": mg / mp}
    print(f"{args.spec}: {g.num_nodes:,} nodes, {g.num_edges:,} edges, {args.layers}x{args.hidden}, "
          f"{args.threads} thread(s)")
    print(f"graphdist k=1  {1e3 * mg:8.1f} ms/epoch")
    print(f"PyG GCNConv    {1e3 * mp:8.1f} ms/epoch   (torch.sparse CSR adj_t, cached normalisation)")
    print(f"ratio graphdist/PyG = {mg / mp:.3f}  (target <= 1.05)")
    from graphdist.testing import run_ranks
    for k in (int(v) for v in args.ks.split(",") if v):
        r = run_ranks(_k_job, k, args=(args.spec, args.hidden, args.layers, args.epochs, args.warmup, args.threads),
                      timeout=3600)
        ek = max(x["epoch_s"] for x in r)
        res[f"graphdist_k{k}_epoch_s"] = ek
        res[f"speedup_k{k}_over_k1"] = mg / ek
        res[f"halo_rows_k{k}"] = sum(x["halo_rows"] for x in r)
        print(f"graphdist k={k}  {1e3 * ek:8.1f} ms/epoch   speedup over k=1: {mg / ek:.2f}x "
              f"({res[f'halo_rows_k{k}']:,} halo rows, {args.threads} thread(s) per rank)")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
