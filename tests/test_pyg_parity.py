"""PyG layers wrapped by ``graphdist.gnn.pyg.distribute`` on k ranks == the same PyG model run in
one process on the whole graph: logits, the loss and every parameter's gradient (1e-5 relative),
for k = 1, 2, 4 on random and METIS parts, dropout off. A gradient is compared relative to its
largest entry; some exact gradients are zero (an attention key bias shifts every score of a node
alike, a bias before a batch norm), and where the reference's is below 1e-5 of the model's
largest gradient entry, both must be (what float32 leaves of a zero is rounding noise).

Every listed layer (GCNConv with each normalisation, GCN2Conv, GATConv, GATv2Conv and
TransformerConv with edge attributes, GINConv with a batch norm inside, GINEConv, SAGEConv mean
and max with a batch norm between layers, GraphConv, TAGConv(K=1), a user layer declared with
``register_local``, and two of PyG's own models: GIN with batch norms, GraphSAGE with jumping
knowledge) runs two layers deep or more, so later layers' halo rows are hidden activations and
their gradients travel home. ``halo="mvc"`` on the layers with a linear
aggregation must give the same numbers and say so in ``summary``; the others fall back to plain.
``bits=8`` must stay close and move fewer bytes. The graph is directed, has self-loops and an
isolated node. One ``run_ranks`` job per k runs every case of both partitions.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import (GATConv, GATv2Conv, GCN2Conv, GCNConv, GINConv, GINEConv, GraphConv, MessagePassing,
                                SAGEConv, TAGConv, TransformerConv)
from torch_geometric.nn.models import GIN, GraphSAGE

import graphdist.gnn.pyg as gd
from graphdist.data import Graph
from graphdist.partition.layout import build_layout
from graphdist.testing import run_ranks
from tests.test_gcn_parity import assignment  # the same random / METIS parts

N, FEAT, HID, C, EDIM = 240, 8, 16, 4, 3
METHODS = ("random", "metis")


class MeanConv(MessagePassing):
    """A user's own layer: mean of in-neighbours' rows through a linear map, plus a root term."""

    def __init__(self, f_in, f_out):
        super().__init__(aggr="mean")
        self.lin = nn.Linear(f_in, f_out)
        self.root = nn.Linear(f_in, f_out, bias=False)

    def forward(self, x, edge_index):
        return self.lin(self.propagate(edge_index, x=x)) + self.root(x)


gd.register_local(MeanConv)


class Two(nn.Module):
    """conv -> (batch norm) -> relu -> conv; ``edge=True`` passes edge attributes to both."""

    def __init__(self, c1, c2, edge=False, norm=False):
        super().__init__()
        self.c1, self.c2, self.edge = c1, c2, edge
        self.norm = nn.BatchNorm1d(HID) if norm else None

    def forward(self, x, edge_index, edge_attr=None):
        kw = {"edge_attr": edge_attr} if self.edge else {}
        h = self.c1(x, edge_index, **kw)
        h = F.relu(self.norm(h) if self.norm is not None else h)
        return self.c2(h, edge_index, **kw)


class GCN2(nn.Module):
    """GCNII: linear in, two GCN2Conv layers with the initial residual x_0, linear out."""

    def __init__(self):
        super().__init__()
        self.lin0, self.lin1 = nn.Linear(FEAT, HID), nn.Linear(HID, C)
        self.convs = nn.ModuleList([GCN2Conv(HID, alpha=0.1, theta=0.5, layer=i + 1) for i in range(2)])

    def forward(self, x, edge_index, edge_attr=None):
        x0 = h = F.relu(self.lin0(x))
        for conv in self.convs:
            h = F.relu(conv(h, x0, edge_index))
        return self.lin1(h)


class Wrapped(nn.Module):
    """One of PyG's own models (``torch_geometric.nn.models``) with the test's call signature."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, edge_index, edge_attr=None):
        return self.model(x, edge_index)


def mlp(a, b, norm):
    norms = [nn.BatchNorm1d(HID)] if norm else []
    layers = [nn.Linear(a, HID)] + norms + [nn.ReLU(), nn.Linear(HID, b)]
    return nn.Sequential(*layers)


BUILDERS = {
    "gcn": lambda: Two(GCNConv(FEAT, HID), GCNConv(HID, C)),
    "gcn_improved": lambda: Two(GCNConv(FEAT, HID, improved=True), GCNConv(HID, C, improved=True)),
    "gcn_no_loops": lambda: Two(GCNConv(FEAT, HID, add_self_loops=False), GCNConv(HID, C, add_self_loops=False)),
    "gcn_no_norm": lambda: Two(GCNConv(FEAT, HID, normalize=False), GCNConv(HID, C, normalize=False)),
    "gcn2": GCN2,
    "gat": lambda: Two(GATConv(FEAT, HID // 2, heads=2), GATConv(HID, C)),
    "gatv2_edge": lambda: Two(GATv2Conv(FEAT, HID // 2, heads=2, edge_dim=EDIM), GATv2Conv(HID, C, edge_dim=EDIM),
                              edge=True),
    "transformer_edge": lambda: Two(TransformerConv(FEAT, HID // 2, heads=2, edge_dim=EDIM, beta=True),
                                    TransformerConv(HID, C, edge_dim=EDIM), edge=True),
    "gin_bn": lambda: Two(GINConv(mlp(FEAT, HID, True), train_eps=True), GINConv(mlp(HID, C, False))),
    "gine_edge": lambda: Two(GINEConv(mlp(FEAT, HID, False), edge_dim=EDIM),
                             GINEConv(mlp(HID, C, False), edge_dim=EDIM), edge=True),
    "sage_mean_bn": lambda: Two(SAGEConv(FEAT, HID), SAGEConv(HID, C), norm=True),
    "sage_max": lambda: Two(SAGEConv(FEAT, HID, aggr="max"), SAGEConv(HID, C, aggr="max")),
    "graphconv": lambda: Two(GraphConv(FEAT, HID), GraphConv(HID, C)),
    "tag1": lambda: Two(TAGConv(FEAT, HID, K=1), TAGConv(HID, C, K=1)),
    "user_mean": lambda: Two(MeanConv(FEAT, HID), MeanConv(HID, C)),
    "pyg_gin_model": lambda: Wrapped(GIN(FEAT, HID, 2, C, norm="batch_norm")),
    "pyg_sage_jk_model": lambda: Wrapped(GraphSAGE(FEAT, HID, 3, C, jk="cat")),
}
MVC = {"gcn": "mvc", "gcn_no_norm": "mvc", "gcn2": "mvc", "gin_bn": "mvc", "sage_mean_bn": "mvc",
       "graphconv": "mvc", "gat": "plain", "gcn_improved": "plain"}
"""Models also run with halo="mvc", and the mode their conv layers must report."""
BITS = (("gat", "plain"), ("gcn", "mvc"))
"""(model, halo) run at 8 bits."""


def build(kind: str) -> nn.Module:
    torch.manual_seed(7)
    return BUILDERS[kind]()


def edge_features(src_ids, dst_ids) -> torch.Tensor:
    """Edge attributes as a function of the global ids of an edge's ends (same on any part)."""
    s, d = src_ids.double(), dst_ids.double()
    return torch.stack([torch.sin(0.37 * s + 0.11 * d), torch.cos(0.05 * s - 0.3 * d),
                        ((7 * src_ids + 3 * dst_ids) % 11).double() / 11], 1).float()


def make_graph() -> Graph:
    g = torch.Generator().manual_seed(3)
    src, dst = torch.randint(0, N, (1100,), generator=g), torch.randint(0, N, (1100,), generator=g)
    keep = (src != 5) & (dst != 5)  # node 5: no edges at all
    loops = torch.arange(0, N, 13)
    src, dst = torch.cat([src[keep], loops]), torch.cat([dst[keep], loops])
    x = torch.randn(N, FEAT, generator=g)
    y = torch.randint(0, C, (N,), generator=g)
    train = torch.rand(N, generator=g) < 0.4
    return Graph.from_edges(src, dst, N, symmetrize=False, self_loops=True, x=x, y=y, train_mask=train)


# ------------------------------------------------------------------ one rank
def _case(part, kind, halo="plain", bits=32):
    model = gd.distribute(build(kind), part, halo=halo, bits=bits)
    ea = edge_features(*part.global_edge_index())
    out = model(part.x, part.edge_index, ea)
    loss = gd.cross_entropy(out, part.y, part.train_mask)
    loss.backward()
    gd.sync_grads(model)
    return {"owned": part.node_ids.numpy(), "out": out.detach().numpy(), "loss": float(loss.detach()),
            "grads": {n: p.grad.numpy() for n, p in model.named_parameters()},
            "buffers": {n: b.numpy() for n, b in model.named_buffers()},
            "acc": gd.accuracy(out, part.y, part.train_mask), "summary": gd.summary(model),
            "traffic": gd.traffic(model)["bytes"], "keys": sorted(model.state_dict())}


def _rank_job(rank, ws, graph, assignments):
    torch.set_num_threads(1)
    res = {}
    for method, a in assignments.items():
        part = gd.Part.from_local_graph(build_layout(graph, a, rank, ws))
        for kind in BUILDERS:
            res[(method, kind, "plain", 32)] = _case(part, kind)
        for kind in MVC:
            res[(method, kind, "mvc", 32)] = _case(part, kind, "mvc")
        if ws > 1:
            for kind, halo in BITS:
                res[(method, kind, halo, 8)] = _case(part, kind, halo, 8)
        key = gd.key32(5, 1, 0)
        res[(method, "dropout")] = (part.node_ids.numpy(), gd.keyed_dropout(part.x, 0.5, part.node_ids, key).numpy())
        res[(method, "gather")] = part.gather(part.x * 2).numpy()
    return res


# ------------------------------------------------------------------ the reference
def reference(graph: Graph, kind: str) -> dict:
    model = build(kind)
    src, dst = graph.edge_index
    out = model(graph.x, graph.edge_index, edge_features(src, dst))
    tm = graph.train_mask
    loss = F.cross_entropy(out[tm], graph.y[tm])
    loss.backward()
    return {"out": out.detach(), "loss": float(loss.detach()),
            "grads": {n: p.grad for n, p in model.named_parameters()},
            "buffers": dict(model.named_buffers()), "acc": float((out.argmax(1) == graph.y)[tm].double().mean()),
            "keys": sorted(model.state_dict())}


def _rel_err(a, b, floor: float = 1e-6) -> float:
    """``max |a - b|`` relative to ``max |b|`` (at least ``floor``)."""
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    return float((a - b).abs().max()) / max(float(b.abs().max()), floor)


@pytest.fixture(scope="module")
def graph():
    return make_graph()


@pytest.fixture(scope="module")
def refs(graph):
    return {kind: reference(graph, kind) for kind in BUILDERS}


@pytest.mark.parametrize("k", [1, 2, 4])
def test_layers_match_whole_graph_pyg(graph, refs, k):
    assignments = {m: assignment(graph, k, m) for m in METHODS}
    for a in assignments.values():
        assert int(a.max()) == k - 1  # every part non-empty
    results = [_rank_job(0, 1, graph, assignments)] if k == 1 else \
        run_ranks(_rank_job, k, args=(graph, assignments), timeout=300)
    for method in METHODS:
        cases = [(kind, "plain", 32) for kind in BUILDERS] + [(kind, "mvc", 32) for kind in MVC]
        for kind, halo, bits in cases + ([(kd, h, 8) for kd, h in BITS] if k > 1 else []):
            ref, where = refs[kind], (method, kind, halo, bits, k)
            logits = torch.full_like(ref["out"], float("nan"))
            for r in range(k):
                got = results[r][(method, kind, halo, bits)]
                logits[torch.from_numpy(got["owned"])] = torch.from_numpy(got["out"])
                if bits < 32:
                    continue
                assert got["keys"] == ref["keys"], where  # state_dict unchanged by distribute
                assert abs(got["loss"] - ref["loss"]) <= 1e-5 * abs(ref["loss"]), where
                assert abs(got["acc"] - ref["acc"]) < 1e-9, where
                assert set(got["grads"]) == set(ref["grads"]), where
                top = max(float(g.abs().max()) for g in ref["grads"].values())
                for name, g in got["grads"].items():  # every rank holds the summed gradient
                    want = ref["grads"][name]
                    if float(want.abs().max()) < 1e-5 * top:  # an exact zero: rounding noise on both sides
                        assert float(abs(g).max()) <= 1e-5 * top, (where, r, name)
                        continue
                    err = _rel_err(g, want)
                    assert err <= 1e-5, (where, r, name, err)
                for name, b in got["buffers"].items():  # batch-norm running statistics
                    assert _rel_err(b, ref["buffers"][name]) <= 1e-5, (where, r, name)
                want = MVC[kind] if halo == "mvc" else "plain"
                assert {v["halo"] for v in got["summary"].values()} == {want}, (where, got["summary"])
            assert not torch.isnan(logits).any(), where  # the parts cover the graph
            err = _rel_err(logits, ref["out"])
            if bits == 32:
                assert err <= 1e-5, (where, err)
            else:  # 8-bit rows in flight: close, not exact, and fewer bytes than 32-bit rows
                assert 0 < err <= 5e-2, (where, err)
                for r in range(k):
                    full = results[r][(method, kind, halo, 32)]["traffic"]
                    assert results[r][(method, kind, halo, 8)]["traffic"] < 0.5 * full, (where, r)
        # keyed dropout: a rank draws, for its rows, the mask one process draws
        want = gd.keyed_dropout(graph.x, 0.5, torch.arange(N), gd.key32(5, 1, 0))
        for r in range(k):
            ids, rows = results[r][(method, "dropout")]
            assert torch.equal(torch.from_numpy(rows), want[torch.from_numpy(ids)])
            assert torch.equal(torch.from_numpy(results[r][(method, "gather")]), graph.x * 2)
    if k > 1:  # the exchange really moved rows
        assert all(results[r][("metis", "gat", "plain", 32)]["traffic"] > 0 for r in range(k))


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
