"""``graphdist.gnn.pyg``: what is refused (one line naming the layer), call errors, fallbacks,
and where a part comes from (a spec, an artifact, a Graph) on 2 ranks."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import (APPNP, GATConv, GCNConv, GPSConv, GraphNorm, LayerNorm, MessagePassing, SAGEConv,
                                SGConv, TAGConv)
from torch_geometric.nn.aggr import SumAggregation

import graphdist.gnn.pyg as gd
from graphdist.errors import ConfigError
from graphdist.partition.layout import build_layout
from graphdist.testing import run_ranks

SPEC = "sbm:nodes=300,classes=3,avg_degree=6,homophily=0.8,features=8,seed=1"


class Unlisted(MessagePassing):
    def forward(self, x, edge_index):
        return self.propagate(edge_index, x=x)


class MyGCN(GCNConv):
    """A subclass may read further than its parent: not trusted by inheritance."""


class Seq(nn.Module):
    def __init__(self, *mods):
        super().__init__()
        self.mods = nn.ModuleList(mods)


@pytest.fixture(scope="module")
def part():
    from graphdist.data import load_graph
    g = load_graph(SPEC)
    return gd.Part.from_local_graph(build_layout(g, torch.zeros(g.num_nodes, dtype=torch.int64), 0, 1))


REFUSED = {
    "gps": (lambda: Seq(GPSConv(8, GCNConv(8, 8), heads=2)), "layer mods.0 (GPSConv) is not local: it mixes"),
    "lstm": (lambda: SAGEConv(8, 8, aggr="lstm"), "LSTMAggregation, which depends on the order"),
    "flow": (lambda: GCNConv(8, 8, flow="target_to_source"), "flow='target_to_source'"),
    "unlisted": (lambda: Seq(Unlisted()), "layer mods.0 (Unlisted) is not in graphdist's list"),
    "subclass": (lambda: MyGCN(8, 8), "register_local(MyGCN)"),
    "attention": (lambda: Seq(GCNConv(8, 8), nn.MultiheadAttention(8, 2)), "(MultiheadAttention) is not local"),
    "graph_norm": (lambda: Seq(GCNConv(8, 8), GraphNorm(8)), "(GraphNorm) is not local"),
    "layer_norm_graph": (lambda: Seq(GCNConv(8, 8), LayerNorm(8, mode="graph")), "mode='graph'"),
    "readout": (lambda: Seq(GCNConv(8, 8), SumAggregation()), "(SumAggregation) aggregates over nodes outside"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_non_local_layers_are_refused_in_one_line(part, case):
    make, words = REFUSED[case]
    model = make()
    with pytest.raises(ConfigError) as e:
        gd.distribute(model, part)
    msg = str(e.value)
    assert words in msg and "\n" not in msg, msg
    assert not any(isinstance(m, gd.DistConv) for m in model.modules())  # nothing half-wrapped


class TwoHops(MessagePassing):
    """A user's layer that propagates twice in one call."""

    def forward(self, x, edge_index):
        return self.propagate(edge_index, x=self.propagate(edge_index, x=x))


def test_registered_layer_propagating_twice_is_stopped_or_runs_per_hop(part):
    gd.register_local(TwoHops)  # call="full": the halo rows are there once
    conv = gd.distribute(TwoHops(), part)
    with pytest.raises(ConfigError) as e:
        conv(part.x, part.edge_index)
    msg = str(e.value)
    assert "layer <model> (TwoHops) propagates more than once in one call" in msg and "\n" not in msg, msg
    assert "register_local(TwoHops, call='hops')" in msg, msg
    gd.register_local(TwoHops, call="hops")
    try:
        got = gd.distribute(TwoHops(), part)(part.x, part.edge_index)
    finally:
        del gd.RULES[TwoHops]
    assert torch.allclose(got, TwoHops()(part.x, part.edge_index))
    for model in (TAGConv(8, 8, K=3), Seq(SGConv(8, 8, K=2)), Seq(nn.Linear(8, 8), APPNP(K=5, alpha=0.1))):
        gd.distribute(model, part)  # multi-hop layers are accepted (parity: tests/test_pyg_hops.py)


def test_sparse_adjacency_and_other_edges_are_refused_in_one_line(part):
    from torch_geometric.nn import ChebConv
    n = part.num_owned
    adj = torch.sparse_coo_tensor(part.edge_index.flip(0), torch.ones(part.edge_index.shape[1]), (n, n))
    with pytest.raises(ConfigError, match=r"sparse adjacency \(T.ToSparseTensor"):
        gd.distribute(GCNConv(8, 4), part)(part.x, adj)
    with pytest.raises(ConfigError, match=r"layer <model> \(ChebConv\) calls get_laplacian on other edges"):
        gd.distribute(ChebConv(8, 4, K=2), part)(part.x, part.edge_index[:, 1:])
    with pytest.raises(ConfigError, match=r"\(APPNP\) calls gcn_norm with edge weights"):
        gd.distribute(APPNP(K=2, alpha=0.1), part)(part.x, part.edge_index, torch.ones(part.edge_index.shape[1]))


def test_node_layer_norm_and_registered_layers_are_accepted(part):
    model = gd.distribute(Seq(GCNConv(8, 8), LayerNorm(8, mode="node")), part)
    assert isinstance(model.mods[0], GCNConv) and isinstance(model.mods[0], gd.DistConv)
    assert type(model.mods[0]).__name__ == "DistGCNConv"
    with pytest.raises(ConfigError, match="already distributed"):
        gd.distribute(model, part)


def test_call_errors_and_fallbacks(part):
    gcn = gd.distribute(GCNConv(8, 4), part)
    with pytest.raises(ConfigError, match=r"owned rows x \[300, F\]"):
        gcn(part.x[:10], part.edge_index)
    with pytest.raises(ConfigError, match="needs part.edge_index"):  # normalised by the part's degrees
        gcn(part.x, part.edge_index[:, :-5])
    with pytest.raises(ConfigError, match="normalises with edge weights"):
        gcn(part.x, part.edge_index, torch.ones(part.edge_index.shape[1]))
    # a layer that does not normalise by degree takes any subset of the part's edges
    sub = part.edge_index[:, ::2]
    gat = GATConv(8, 4)
    want = gat(part.x, sub)
    assert torch.allclose(gd.distribute(gat, part)(part.x, sub), want)
    # mvc with edge weights: that call runs plain, and the summary says so
    torch.manual_seed(0)
    ref = GCNConv(8, 4, normalize=False)
    w = torch.rand(part.edge_index.shape[1])
    want = ref(part.x, part.edge_index, w)
    conv = gd.distribute(ref, part, halo="mvc")
    assert gd.summary(conv)[""]["halo"] == "mvc"
    assert torch.allclose(conv(part.x, part.edge_index, w), want, atol=1e-6)
    assert gd.summary(conv)[""] == {"layer": "GCNConv", "halo": "plain", "bits": 32, "call": "full",
                                      "exchanges": 0}
    with pytest.raises(ConfigError, match="halo must be one of plain, mvc"):
        gd.distribute(GCNConv(8, 4), part, halo="auto")
    with pytest.raises(ConfigError, match="bits=8 quantises the halo exchange, but a 1-part job has none"):
        gd.distribute(GCNConv(8, 4), part, bits=8)


def _load_job(rank, ws, artifact):
    import graphdist.gnn.pyg as gd
    from graphdist.data import load_graph
    out = {}
    graph = load_graph(SPEC)
    for name, source in (("spec", SPEC), ("artifact", artifact), ("graph", graph), ("pyg", graph.to_pyg())):
        part = gd.load_part(source, method="metis")
        torch.manual_seed(0)
        conv = gd.distribute(GCNConv(part.num_features, 3), part)
        logits = part.gather(conv(part.x, part.edge_index))
        acc = gd.accuracy(logits[part.node_ids], part.y, part.train_mask)
        out[name] = (part.node_ids.numpy(), logits.detach().numpy(), acc, part.info.get("source"))
    idx = torch.tensor([5, 0, 299, 17, 150])  # a split given as global ids: this rank's rows, in order
    out["local_index"] = part.node_ids[part.local_index(idx)].tolist()
    return out


def test_load_part_from_spec_artifact_graph_and_pyg_data(tmp_path):
    from graphdist.data import load_graph
    from graphdist.partition.tools import PartitionConfig, partition_to_artifact
    art = tmp_path / "parts"
    partition_to_artifact(PartitionConfig(spec=SPEC, parts=2, method="metis", out=str(art)))
    res = run_ranks(_load_job, 2, args=(str(art),), timeout=240)
    g = load_graph(SPEC)
    torch.manual_seed(0)
    want = GCNConv(g.num_features, 3)(g.x, g.edge_index).detach()
    acc = float((want.argmax(1) == g.y)[g.train_mask].double().mean())
    for name in ("spec", "artifact", "graph", "pyg"):  # "pyg": a PyG Data of the whole graph
        ids = torch.cat([torch.from_numpy(r[name][0]) for r in res])
        assert torch.equal(ids.sort().values, torch.arange(g.num_nodes))  # the parts partition the nodes
        assert min(len(r[name][0]) for r in res) > 0
        for r in res:
            assert torch.allclose(torch.from_numpy(r[name][1]), want, atol=1e-5), name
            assert abs(r[name][2] - acc) < 1e-9
    assert res[0]["artifact"][3] == str(art) and res[0]["spec"][3] == "in-process"
    for r in res:
        owned = set(r["pyg"][0].tolist())
        assert r["local_index"] == [i for i in (5, 0, 299, 17, 150) if i in owned]
    assert sum(len(r["local_index"]) for r in res) == 5


def test_part_reads_as_a_pyg_data_and_nll_loss_is_global(part):
    assert part.to("cpu") is part and part["train_mask"] is part.train_mask and part["nothing"] is None
    assert [k for k, _ in part("train_mask", "nothing", "test_mask")] == ["train_mask", "test_mask"]
    with pytest.raises(ConfigError, match="part.to.meta.: the part is on cpu"):
        part.to("meta")
    torch.manual_seed(0)
    logp = torch.randn(part.num_owned, 3).log_softmax(-1).requires_grad_()
    loss = gd.nll_loss(logp, part.y, part.train_mask)
    want = F.nll_loss(logp[part.train_mask], part.y[part.train_mask])
    assert torch.allclose(loss, want)
    g = torch.autograd.grad(loss, logp)[0]
    assert torch.allclose(g, torch.autograd.grad(want, logp)[0])
    from torch_geometric.data import Data
    with pytest.raises(ConfigError, match="gd.load_part: the PyG Data has edge_attr, which a part does not carry"):
        gd.load_part(Data(x=part.x, edge_index=part.edge_index, edge_attr=torch.ones(part.edge_index.shape[1])))


def _bad_source(rank, ws, d):
    import graphdist.gnn.pyg as gd
    from graphdist.errors import GraphdistError
    try:
        gd.load_part(d)
    except GraphdistError as e:
        return str(e)
    return None


def test_load_part_refuses_a_directory_without_an_artifact(tmp_path):
    (msg,) = run_ranks(_bad_source, 1, args=(str(tmp_path),), timeout=120)
    assert msg and str(tmp_path) in msg and "\n" not in msg, msg


def test_cross_entropy_value_is_global_and_gradient_local(part):
    torch.manual_seed(0)
    logits = torch.randn(part.num_owned, 3, requires_grad=True)
    loss = gd.cross_entropy(logits, part.y, part.train_mask)
    want = F.cross_entropy(logits[part.train_mask], part.y[part.train_mask])
    assert torch.allclose(loss, want)
    loss.backward()
    g1 = logits.grad.clone()
    logits.grad = None
    want.backward()
    assert torch.allclose(g1, logits.grad)
