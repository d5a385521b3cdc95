"""Distributed GCN/SAGE == single-process PyG on the same weights, for k in {1, 2, 4} with
random and METIS partitions, in both halo modes (plain, mvc pre/post aggregation) at 32 bits:
logits, weight gradients (1e-5 relative) and 20 epochs of losses. With dropout on, k ranks give
the losses of one rank (masks keyed by global node id).

One ``run_ranks`` job per k evaluates every (partition, model, halo mode) case, to keep the
file fast.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from graphdist.data import Graph
from graphdist.partition.layout import build_layout
from graphdist.gnn.models import GNN
from graphdist.testing import run_ranks

N, FEAT, HID, C = 80, 12, 16, 4
MODELS = ("gcn", "sage")
METHODS = ("random", "metis")
HALOS = ("plain", "mvc")


def make_graph(seed: int = 0) -> Graph:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, N, (320,), generator=g)
    dst = torch.randint(0, N, (320,), generator=g)
    x = torch.randn(N, FEAT, generator=g)
    y = torch.randint(0, C, (N,), generator=g)
    perm = torch.randperm(N, generator=g)
    train = torch.zeros(N, dtype=torch.bool)
    train[perm[:30]] = True
    val = torch.zeros(N, dtype=torch.bool)
    val[perm[30:50]] = True
    test = torch.zeros(N, dtype=torch.bool)
    test[perm[50:]] = True
    # one node with no edges at all (handled like PyG: it only sees itself); Graph.from_edges
    # drops repeated edges, so both models see the same simple graph
    keep = (src != 7) & (dst != 7)
    src, dst = torch.cat([src[keep], torch.tensor([1])]), torch.cat([dst[keep], torch.tensor([2])])
    return Graph.from_edges(src, dst, N, x=x, y=y, train_mask=train, val_mask=val, test_mask=test)


def assignment(graph: Graph, k: int, method: str) -> torch.Tensor:
    if k == 1:
        return torch.zeros(graph.num_nodes, dtype=torch.int64)
    if method == "random":
        return torch.randint(0, k, (graph.num_nodes,), generator=torch.Generator().manual_seed(k))
    from graphdist.partition.setup import partition_in_process
    return partition_in_process(graph, k, "metis", 0)


def init_state(kind: str, layers: int = 3) -> dict:
    torch.manual_seed(123)
    return GNN(kind, FEAT, HID, C, layers, dropout=0.0).state_dict()


# ------------------------------------------------------------------ PyG reference
def pyg_model(kind: str, state: dict, layers: int = 3):
    from torch_geometric.nn import GCNConv, SAGEConv
    dims = [FEAT] + [HID] * (layers - 1) + [C]
    convs = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        if kind == "gcn":
            conv = GCNConv(a, b)
            conv.lin.weight.data.copy_(state[f"convs.{i}.weight"])
            conv.bias.data.copy_(state[f"convs.{i}.bias"])
        else:
            conv = SAGEConv(a, b, aggr="mean", root_weight=True)
            conv.lin_l.weight.data.copy_(state[f"convs.{i}.weight_l"])
            conv.lin_l.bias.data.copy_(state[f"convs.{i}.bias"])
            conv.lin_r.weight.data.copy_(state[f"convs.{i}.weight_r"])
        convs.append(conv)
    return torch.nn.ModuleList(convs)


def pyg_forward(convs, x, edge_index):
    h = x
    for i, conv in enumerate(convs):
        h = conv(h, edge_index)
        if i < len(convs) - 1:
            h = F.relu(h)
    return h


def pyg_reference(graph, kind: str, state: dict):
    """Single-process PyG logits (detached) and the gradients of the training loss."""
    convs = pyg_model(kind, state)
    ref = pyg_forward(convs, graph.x, graph.edge_index)
    F.cross_entropy(ref[graph.train_mask], graph.y[graph.train_mask]).backward()
    return ref.detach(), pyg_grads(kind, convs)


def pyg_grads(kind, convs):
    out = {}
    for i, conv in enumerate(convs):
        if kind == "gcn":
            out[f"convs.{i}.weight"] = conv.lin.weight.grad
            out[f"convs.{i}.bias"] = conv.bias.grad
        else:
            out[f"convs.{i}.weight_l"] = conv.lin_l.weight.grad
            out[f"convs.{i}.bias"] = conv.lin_l.bias.grad
            out[f"convs.{i}.weight_r"] = conv.lin_r.weight.grad
    return out


def pyg_train_losses(kind, graph, state, epochs=20, layers=2, batch_norm=False):
    convs = pyg_model(kind, state, layers)
    norms = torch.nn.ModuleList(torch.nn.BatchNorm1d(HID) for _ in range(layers - 1)) if batch_norm else None
    rest = list(convs[1:].parameters()) + (list(norms.parameters()) if norms is not None else [])
    opt = torch.optim.Adam([{"params": convs[0].parameters(), "weight_decay": 5e-4},
                            {"params": rest, "weight_decay": 0.0}], lr=0.01)
    losses = []
    ei = graph.edge_index
    for _ in range(epochs):
        opt.zero_grad()
        h = graph.x
        for i, conv in enumerate(convs):
            h = conv(h, ei)
            if i < len(convs) - 1:
                h = F.relu(norms[i](h) if norms is not None else h)
        loss = F.cross_entropy(h[graph.train_mask], graph.y[graph.train_mask])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


# ------------------------------------------------------------------ distributed side
def _dist_case(rank, ws, graph, a, kind, state, halo):
    from graphdist.exchange.exchanger import HaloExchanger
    from graphdist.exchange.spmm import SparseAdj
    lg = build_layout(graph, a, rank, ws).reordered("rcm")
    model = GNN(kind, FEAT, HID, C, 3, dropout=0.0)
    model.load_state_dict(state)
    adj = SparseAdj.for_model(lg, kind, halo=halo)
    ex = HaloExchanger.from_local_graph(lg, halo=halo)
    out = model(lg.x, adj, ex)
    n_train = float(graph.train_mask.sum())
    loss = F.cross_entropy(out[lg.train_mask], lg.y[lg.train_mask], reduction="sum") / n_train
    loss.backward()
    from graphdist import comm
    comm.all_reduce_grads(model.parameters())
    # numpy, not tensors: tensors through the result queue would be shared by file descriptor
    return lg.owned.numpy(), out.detach().numpy(), {k: p.grad.numpy() for k, p in model.named_parameters()}


def _dist_train(rank, ws, graph, a, kind, batch_norm=False, dropout=0.0, halo="mvc", label_rate=0.0, **extra):
    import torch.distributed as dist

    from graphdist.runtime import DistContext, init_distributed
    from graphdist.gnn.trainer import GCNConfig, fit
    lg = build_layout(graph, a, rank, ws)
    cfg = GCNConfig(spec="test", model=kind, layers=2, hidden=HID, dropout=dropout, epochs=20, seed=5,
                    progress=False, batch_norm=batch_norm, halo=halo, label_rate=label_rate, **extra)
    ctx = init_distributed("cpu") if dist.is_initialized() else DistContext(0, 1, 0, "none", torch.device("cpu"))
    return fit(cfg, lg, {}, ctx)["losses"]


def _exchange_check(rank, ws, graph, a, halo):
    """The exchange through the product path (``SparseAdj.propagate``): with h = global node ids
    and the mean adjacency, every owned row gets the mean id of its in-neighbours, and the
    gradient of sum(out * w) reaches each owned row as sum_v w_v / deg_v over its out-edges."""
    from graphdist.exchange.exchanger import HaloExchanger
    from graphdist.exchange.spmm import SparseAdj
    lg = build_layout(graph, a, rank, ws)
    adj = SparseAdj.for_model(lg, "sage", halo=halo)
    ex = HaloExchanger.from_local_graph(lg, halo=halo)
    h = lg.owned.double()[:, None].repeat(1, 3).float().requires_grad_()
    out = adj.propagate(h, ex)
    src, dst = graph.edge_index
    deg = torch.bincount(dst, minlength=N).clamp(min=1).double()
    want = torch.zeros(N, dtype=torch.float64).index_add_(0, dst, src.double()) / deg
    ok_fwd = torch.allclose(out[:, 0].double(), want[lg.owned], rtol=1e-6)
    w = (lg.owned % 5 + 1).float()[:, None]
    (out * w).sum().backward()
    wg = (torch.arange(N) % 5 + 1).double() / deg
    want_g = torch.zeros(N, dtype=torch.float64).index_add_(0, src, wg[dst])
    return ok_fwd and torch.allclose(h.grad[:, 0].double(), want_g[lg.owned], rtol=1e-6)


def _rank_job(rank, ws, graph, assignments, states, train_states):
    res = {"exchange_ok": all(_exchange_check(rank, ws, graph, a, halo) for a in assignments.values()
                              for halo in HALOS)}
    for method, a in assignments.items():
        for kind in MODELS:
            for halo in HALOS:
                res[(method, kind, halo)] = _dist_case(rank, ws, graph, a, kind, states[kind], halo)
    res["train"] = {(kind, halo): _dist_train(rank, ws, graph, assignments[method], kind, halo=halo)
                    for kind in MODELS for halo, method in zip(HALOS, METHODS[::-1])}
    res["train_mvc_random"] = _dist_train(rank, ws, graph, assignments["random"], "gcn", halo="mvc")
    res["train_bn"] = _dist_train(rank, ws, graph, assignments["random"], "gcn", batch_norm=True)
    res["train_dropout"] = {kind: _dist_train(rank, ws, graph, assignments["random"], kind, dropout=0.5)
                            for kind in MODELS}
    res["train_label"] = _dist_train(rank, ws, graph, assignments["metis"], "gcn", dropout=0.5, label_rate=0.5)
    return res


def _rel_close(a, b, tol=1e-5):
    return float((a - b).abs().max()) <= tol * max(float(b.abs().max()), 1e-6)


@pytest.fixture(scope="module")
def graph():
    return make_graph()


@pytest.mark.parametrize("k", [1, 2, 4])
def test_parity_with_pyg(graph, k):
    assignments = {m: assignment(graph, k, m) for m in METHODS}
    for a in assignments.values():
        assert int(a.max()) == k - 1  # every part non-empty
    states = {kind: init_state(kind) for kind in MODELS}
    if k == 1:  # no process group needed: the exchange is the identity
        results = [_rank_job(0, 1, graph, assignments, states, None)]
    else:
        results = run_ranks(_rank_job, k, args=(graph, assignments, states, None), timeout=180)
    assert all(r["exchange_ok"] for r in results)
    for kind in MODELS:
        ref, ref_grads = pyg_reference(graph, kind, states[kind])
        for method in METHODS:
            for halo in HALOS:
                logits = torch.zeros_like(ref)
                for r in range(k):
                    owned, out, grads = results[r][(method, kind, halo)]
                    logits[torch.from_numpy(owned)] = torch.from_numpy(out)
                    for name, g in grads.items():  # every rank holds the full all-reduced gradient
                        assert _rel_close(torch.from_numpy(g), ref_grads[name]), (kind, method, halo, r, name)
                assert _rel_close(logits, ref.detach()), (kind, method, halo)
        # 20 epochs of training (dropout 0): same losses as the PyG loop on the same init
        torch.manual_seed(5)
        st = GNN(kind, FEAT, HID, C, 2, dropout=0.0).state_dict()
        want = pyg_train_losses(kind, graph, st)
        runs = [results[r]["train"][(kind, halo)] for r in range(k) for halo in HALOS]
        if kind == "gcn":
            runs += [results[r]["train_mvc_random"] for r in range(k)]
        for got in runs:
            assert len(got) == 20
            for g_, w_ in zip(got, want):
                assert abs(g_ - w_) <= 1e-5 * abs(w_), (kind, got, want)
    # batch norm with global statistics == BatchNorm1d over the whole graph
    torch.manual_seed(5)
    st = GNN("gcn", FEAT, HID, C, 2, dropout=0.0).state_dict()
    want = pyg_train_losses("gcn", graph, st, batch_norm=True)
    for r in range(k):
        got = results[r]["train_bn"]
        assert max(abs(g_ - w_) / abs(w_) for g_, w_ in zip(got, want)) <= 1e-5, (r, got, want)
    # dropout 0.5: k ranks draw the masks one process draws, so the losses are one process's
    for kind in MODELS:
        want = _dist_train(0, 1, graph, torch.zeros(N, dtype=torch.int64), kind, dropout=0.5)
        assert want[0] != results[0]["train"][(kind, "mvc")][0]  # dropout is really on
        for r in range(k):
            got = results[r]["train_dropout"][kind]
            assert max(abs(g_ - w_) / abs(w_) for g_, w_ in zip(got, want)) <= 1e-5, (kind, r, got, want)
    # masked label embedding: the labelled share is drawn by global id, so k ranks = 1 rank too
    want = _dist_train(0, 1, graph, torch.zeros(N, dtype=torch.int64), "gcn", dropout=0.5, label_rate=0.5)
    assert want != _dist_train(0, 1, graph, torch.zeros(N, dtype=torch.int64), "gcn", dropout=0.5)
    for r in range(k):
        got = results[r]["train_label"]
        assert max(abs(g_ - w_) / abs(w_) for g_, w_ in zip(got, want)) <= 1e-5, (r, got, want)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny graphs: extra intra-op threads only add synchronisation on a busy machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
