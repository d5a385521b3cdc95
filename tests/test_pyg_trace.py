"""A distributed PyG model under ``torch.jit.trace`` (what ``SummaryWriter.add_graph`` runs, PyG's
``examples/tensorboard_logging.py``), at k = 2: the trace is made (``torch.jit.trace``'s own
check, which traces twice and compares, passes), every halo exchange is one
``graphdist::halo_exchange`` node (as many as the layers' exchanges in ``gd.summary``), the traced
module's logits equal the model's and the same PyG model's in one process on the whole graph
(within 1e-5), for ``halo="plain"`` and ``"mvc"``, with layers whose part constants come from
collectives (ChebConv's ``lambda_max`` and Laplacian, GCN's global degrees); ``add_graph`` writes
its event file.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import APPNP, ChebConv, GCNConv

import graphdist.gnn.pyg as gd
from graphdist.partition.layout import build_layout
from graphdist.testing import run_ranks
from tests.test_gcn_parity import assignment
from tests.test_pyg_parity import C, FEAT, HID, _rel_err, make_graph


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(FEAT, HID), ChebConv(HID, C, K=2)
        self.prop = APPNP(K=2, alpha=0.1)

    def forward(self, x, edge_index):
        h = F.relu(self.conv1(x, edge_index))
        return F.log_softmax(self.prop(self.conv2(h, edge_index), edge_index), dim=1)


def build() -> Net:
    torch.manual_seed(5)
    return Net().eval()


def _job(rank, ws, graph, a, logdir):
    torch.set_num_threads(1)
    part = gd.Part.from_local_graph(build_layout(graph, a, rank, ws))
    res = {"owned": part.node_ids}
    for halo in ("plain", "mvc"):
        model = gd.distribute(build(), part, halo=halo)
        with torch.no_grad():
            eager = model(part.x, part.edge_index)
            exchanges = sum(v["exchanges"] for v in gd.summary(model).values())
            traced = torch.jit.trace(model, (part.x, part.edge_index))
            again = traced(part.x, part.edge_index)
        nodes = [n.kind() for n in traced.inlined_graph.nodes()].count("graphdist::halo_exchange")
        res[halo] = {"eager": eager, "traced": again, "nodes": nodes, "exchanges": exchanges,
                     "modes": {v["halo"] for v in gd.summary(model).values()}}
        if halo == "plain":
            from torch.utils.tensorboard import SummaryWriter
            with SummaryWriter(f"{logdir}/rank{rank}") as writer:
                writer.add_graph(model, [part.x, part.edge_index])
    return res


def test_traced_model_matches_the_model_and_one_process(tmp_path):
    graph = make_graph()
    with torch.no_grad():
        ref = build()(graph.x, graph.edge_index)
    results = run_ranks(_job, 2, args=(graph, assignment(graph, 2, "random"), str(tmp_path)), timeout=120)
    for halo in ("plain", "mvc"):
        logits = torch.full_like(ref, float("nan"))
        for r, res in enumerate(results):
            got = res[halo]
            assert got["exchanges"] == 1 + 1 + 2 and got["nodes"] == got["exchanges"], (halo, r, got)
            assert _rel_err(got["traced"], got["eager"]) <= 1e-6, (halo, r)
            logits[res["owned"]] = got["traced"]
        assert results[0]["mvc"]["modes"] == {"mvc", "plain"}  # GCNConv and APPNP pre-aggregate, Cheb plain
        assert not torch.isnan(logits).any()
        assert _rel_err(logits, ref) <= 1e-5, halo
    for r in range(2):
        assert list((tmp_path / f"rank{r}").glob("events.out.tfevents.*")), r
