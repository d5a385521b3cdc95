"""Ranks cannot drift apart silently (``graphdist.gnn.pyg.sync``), on 2 ranks:

* ``reset_parameters()`` after ``distribute``, each rank seeded differently, leaves every rank
  with the same weights (rank 0's), for the whole model and for one layer;
* weights changed by hand on one rank, or a ``load_state_dict`` of other weights on one rank,
  stop the next ``sync_grads`` with one line naming the parameter;
* ``gd.seed`` gives each rank its own dropout stream, the same run to run.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import GCNConv, SAGEConv

import graphdist.gnn.pyg as gd
from graphdist.data import load_graph
from graphdist.errors import ConfigError
from graphdist.partition.layout import build_layout
from graphdist.testing import run_ranks

SPEC = "sbm:nodes=120,classes=3,avg_degree=5,homophily=0.8,features=6,seed=2"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(6, 8), SAGEConv(8, 3)
        self.lin = nn.Linear(3, 3)

    def reset_parameters(self):
        self.conv1.reset_parameters()
        self.conv2.reset_parameters()
        self.lin.reset_parameters()

    def forward(self, x, edge_index):
        return self.lin(self.conv2(F.relu(self.conv1(x, edge_index)), edge_index))


def _weights(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _step(model, part):
    loss = gd.cross_entropy(model(part.x, part.edge_index), part.y, part.train_mask)
    loss.backward()
    gd.sync_grads(model)


def _job(rank, ws):
    g = load_graph(SPEC)
    part = gd.Part.from_local_graph(build_layout(g, torch.arange(g.num_nodes) % ws, rank, ws))
    out = {}
    torch.manual_seed(100 + rank)  # every rank its own generator
    model = gd.distribute(Net(), part)
    out["after_distribute"] = _weights(model)
    torch.manual_seed(200 + rank)
    model.reset_parameters()
    out["after_reset"] = _weights(model)
    torch.manual_seed(300 + rank)
    model.conv2.reset_parameters()  # one layer alone
    out["after_layer_reset"] = _weights(model)
    _step(model, part)  # the check after a reset passes
    out["name"] = type(model).__name__
    # desynchronised by hand on rank 1: the next step's check (every 3 steps) stops
    m2 = gd.distribute(Net(), part, check_every=3)
    _step(m2, part)
    with torch.no_grad():
        if rank == 1:
            m2.conv2.lin_l.weight[0, 0] += 1e-3
    msgs = []
    for _ in range(3):
        try:
            _step(m2, part)
        except ConfigError as e:
            msgs.append(str(e))
            break
    out["hand"] = msgs
    # another state_dict loaded on rank 1 only: stopped on the next step
    m3 = gd.distribute(Net(), part, check_every=0)
    _step(m3, part)
    sd = {k: v + (0.5 if rank == 1 and k == "lin.bias" else 0.0) for k, v in m3.state_dict().items()}
    m3.load_state_dict(sd)
    try:
        _step(m3, part)
        out["load"] = None
    except ConfigError as e:
        out["load"] = str(e)
    # gd.seed: another stream per rank, the same on a second call
    gd.seed(7)
    a = F.dropout(torch.ones(64), 0.5)
    gd.seed(7)
    b = F.dropout(torch.ones(64), 0.5)
    out["drop"] = (a, b)
    return out


def test_reset_rebroadcasts_and_desync_is_stopped_in_one_line():
    r0, r1 = run_ranks(_job, 2, timeout=240)
    for key in ("after_distribute", "after_reset", "after_layer_reset"):
        assert torch.equal(r0[key], r1[key]), key
    assert not torch.equal(r0["after_distribute"], r0["after_reset"])  # the reset drew new weights
    assert not torch.equal(r0["after_reset"], r0["after_layer_reset"])
    assert r0["name"] == "Net"  # the class keeps its name
    for r in (r0, r1):
        (msg,) = r["hand"]
        assert "conv2.lin_l.weight differs between rank 0 and rank 1" in msg and "\n" not in msg, msg
        assert "at step 3 (check after 3 steps)" in msg, msg  # steps 2 and 3: the 3rd step checks
        assert "lin.bias differs" in r["load"] and "after load_state_dict" in r["load"], r["load"]
        assert "\n" not in r["load"]
    a0, b0 = r0["drop"]
    a1, _ = r1["drop"]
    assert torch.equal(a0, b0)  # repeats
    assert not torch.equal(a0, a1)  # other masks on the other rank


def test_check_weights_at_k1_and_bad_check_every():
    g = load_graph(SPEC)
    part = gd.Part.from_local_graph(build_layout(g, torch.zeros(g.num_nodes, dtype=torch.int64), 0, 1))
    model = gd.distribute(Net(), part)
    _step(model, part)  # one rank: nothing to compare, no error
    gd.check_weights(model)
    import pytest
    with pytest.raises(ConfigError, match="check_every must be an integer >= 0"):
        gd.distribute(Net(), part, check_every=-1)
