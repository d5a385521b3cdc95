"""Layers that propagate several times in one call (``call="hops"``: the halo is exchanged before
each propagate) and layers that normalise inside ``forward`` (``gcn_norm`` / ``get_laplacian``
with the whole graph's degrees), wrapped by ``distribute`` on k ranks == the same PyG model in
one process on the whole graph: logits, loss and every parameter's gradient within 1e-5, for
k = 1, 2, 4 on random and METIS parts of the directed graph of ``test_pyg_parity`` (self-loops,
an isolated node), dropout off.

APPNP, TAGConv(K=3), SGConv, SSGConv, ChebConv (sym, rw, and no normalisation: the default
``lambda_max`` is the whole graph's), ARMAConv, MixHopConv and GatedGraphConv each sit behind or
before another layer, so their halo rows are hidden activations. DNAConv, registered without
arguments, normalises with ``gcn_norm`` inside ``forward`` and must be exact; MixHopConv
registered without arguments keeps its rule. Under ``halo="mvc"`` the layers whose hop is a
fixed linear map (APPNP, SGConv, SSGConv, MixHopConv: ``D^-1/2 (A+I) D^-1/2``; GatedGraphConv:
a sum) pre-aggregate every hop and must give the same numbers.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import (APPNP, ARMAConv, ChebConv, DNAConv, GatedGraphConv, MixHopConv, SGConv, SSGConv,
                                TAGConv)

import graphdist.gnn.pyg as gd
from graphdist.partition.layout import build_layout
from graphdist.testing import run_ranks
from tests.test_gcn_parity import assignment
from tests.test_pyg_parity import C, FEAT, HID, METHODS, N, _rel_err, make_graph

gd.register_local(DNAConv)  # no arguments: it calls gcn_norm itself
gd.register_local(MixHopConv)  # already listed: keeps call="hops"


class Two(nn.Module):
    def __init__(self, c1, c2, lin=None):
        super().__init__()
        self.c1, self.c2, self.lin = c1, c2, lin

    def forward(self, x, edge_index):
        h = self.c2(F.relu(self.c1(x, edge_index)), edge_index)
        return self.lin(h) if self.lin is not None else h


class APPNPNet(nn.Module):
    """PyG's citation benchmark APPNP: MLP, then K propagation steps."""

    def __init__(self, **kw):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(FEAT, HID), nn.Linear(HID, C)
        self.prop = APPNP(K=5, alpha=0.1, **kw)

    def forward(self, x, edge_index):
        return self.prop(self.lin2(F.relu(self.lin1(x))), edge_index)


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GatedGraphConv(HID, num_layers=3)
        self.lin = nn.Linear(HID, C)

    def forward(self, x, edge_index):
        return self.lin(F.relu(self.conv(x, edge_index)))


class DNA(nn.Module):
    """PyG's DNA example: every layer attends over the stack of the earlier layers' rows."""

    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(FEAT, HID), nn.Linear(HID, C)
        self.convs = nn.ModuleList([DNAConv(HID, heads=2, groups=1) for _ in range(2)])

    def forward(self, x, edge_index):
        h = F.relu(self.lin1(x))
        xs = [h]
        for conv in self.convs:
            xs.append(F.relu(conv(torch.stack(xs, 1), edge_index)))
        return self.lin2(xs[-1])


BUILDERS = {
    "appnp": APPNPNet,
    "appnp_no_loops": lambda: APPNPNet(add_self_loops=False),
    "tag3": lambda: Two(TAGConv(FEAT, HID, K=3), TAGConv(HID, C, K=2)),
    "sgc": lambda: Two(SGConv(FEAT, HID, K=2), SGConv(HID, C, K=2)),
    "ssg": lambda: Two(SSGConv(FEAT, HID, alpha=0.1, K=3), SSGConv(HID, C, alpha=0.1, K=2)),
    "cheb_sym": lambda: Two(ChebConv(FEAT, HID, K=3), ChebConv(HID, C, K=2)),
    "cheb_rw": lambda: Two(ChebConv(FEAT, HID, K=2, normalization="rw"), ChebConv(HID, C, K=3, normalization="rw")),
    "cheb_none": lambda: Two(ChebConv(FEAT, HID, K=3, normalization=None), ChebConv(HID, C, K=2, normalization=None)),
    "arma": lambda: Two(ARMAConv(FEAT, HID, num_stacks=2, num_layers=2), ARMAConv(HID, C, num_stacks=1, num_layers=3)),
    "mixhop": lambda: Two(MixHopConv(FEAT, HID, powers=[0, 1, 2]), MixHopConv(3 * HID, C, powers=[1, 2]),
                          nn.Linear(2 * C, C)),
    "gated": Gated,
    "dna": DNA,
}


MVC = {"appnp": "mvc", "sgc": "mvc", "ssg": "mvc", "mixhop": "mvc", "gated": "mvc", "tag3": "plain",
       "cheb_sym": "plain"}
"""Models also run with halo="mvc", and the mode their multi-hop layers must report (each hop
pre-aggregated where it is D^-1/2 (A+I) D^-1/2 or a sum; the others exchange plain)."""


def build(kind: str) -> nn.Module:
    torch.manual_seed(11)
    return BUILDERS[kind]()


def _case(part, kind, halo):
    model = gd.distribute(build(kind), part, halo=halo)
    out = model(part.x, part.edge_index)
    loss = gd.cross_entropy(out, part.y, part.train_mask)
    loss.backward()
    gd.sync_grads(model)
    gd.traffic(model, reset=True)
    with torch.no_grad():
        model(part.x, part.edge_index)  # forward only: rows sent per exchange x exchanges
    return {"owned": part.node_ids.numpy(), "out": out.detach().numpy(), "loss": float(loss.detach()),
            "grads": {n: p.grad.numpy() for n, p in model.named_parameters()}, "summary": gd.summary(model),
            "traffic": gd.traffic(model)["rows"], "send": int(part.exchanger.send_idx.numel())}


def _rank_job(rank, ws, graph, assignments):
    torch.set_num_threads(1)
    res = {}
    for method, a in assignments.items():
        part = gd.Part.from_local_graph(build_layout(graph, a, rank, ws))
        for kind in BUILDERS:
            res[(method, kind)] = _case(part, kind, "plain")
        for kind in MVC:
            res[(method, kind + "_mvc")] = _case(part, kind, "mvc")
    return res


def reference(graph, kind):
    model = build(kind)
    out = model(graph.x, graph.edge_index)
    tm = graph.train_mask
    loss = F.cross_entropy(out[tm], graph.y[tm])
    loss.backward()
    return {"out": out.detach(), "loss": float(loss.detach()), "grads": {n: p.grad for n, p in model.named_parameters()}}


@pytest.fixture(scope="module")
def graph():
    return make_graph()


@pytest.fixture(scope="module")
def refs(graph):
    return {kind: reference(graph, kind) for kind in BUILDERS}


@pytest.mark.parametrize("k", [1, 2, 4])
def test_multi_hop_layers_match_whole_graph_pyg(graph, refs, k):
    assignments = {m: assignment(graph, k, m) for m in METHODS}
    results = [_rank_job(0, 1, graph, assignments)] if k == 1 else \
        run_ranks(_rank_job, k, args=(graph, assignments), timeout=300)
    assert gd.RULES[MixHopConv].call == "hops"
    for method in METHODS:
        for kind in list(BUILDERS) + [m + "_mvc" for m in MVC]:
            ref, where = refs[kind.replace("_mvc", "")], (method, kind, k)
            logits = torch.full_like(ref["out"], float("nan"))
            for r in range(k):
                got = results[r][(method, kind)]
                logits[torch.from_numpy(got["owned"])] = torch.from_numpy(got["out"])
                assert abs(got["loss"] - ref["loss"]) <= 1e-5 * abs(ref["loss"]), where
                top = max(float(g.abs().max()) for g in ref["grads"].values())
                for name, g in got["grads"].items():
                    want = ref["grads"][name]
                    if float(want.abs().max()) < 1e-5 * top:
                        assert float(abs(g).max()) <= 1e-5 * top, (where, r, name)
                        continue
                    err = _rel_err(g, want)
                    assert err <= 1e-5, (where, r, name, err)
                want = MVC[kind[:-4]] if kind.endswith("_mvc") else "plain"
                assert {v["halo"] for v in got["summary"].values()} == {want}, (where, got["summary"])
            assert not torch.isnan(logits).any(), where
            err = _rel_err(logits, ref["out"])
            assert err <= 1e-5, (where, err)
    if k > 1:  # one exchange per propagate: a forward of APPNP(K=5) sends the halo rows 5 times
        for method in METHODS:
            for r in range(k):
                got = results[r][(method, "appnp")]
                assert got["send"] > 0 and got["traffic"] == 5 * got["send"], (method, r, got["traffic"], got["send"])
                assert got["summary"]["prop"]["exchanges"] == 5 and got["summary"]["prop"]["call"] == "hops"
                got = results[r][(method, "tag3")]  # TAGConv K=3 then K=2
                assert got["traffic"] == 5 * got["send"], (method, r)
                assert [v["exchanges"] for v in got["summary"].values()] == [3, 2]


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
