"""What a PyG user's script met at k = 2 (issue 48.7), each now one line where it can be seen:

* a layer carrying a loss of its own (``SuperGATConv.get_attention_loss``) is refused, also by
  ``register_local`` (on a part that loss is each rank's mean, summed k times by sync_grads);
* a class registered with ``gcn_norm`` but without a ``normalize`` attribute is refused when it
  is distributed, not by an AttributeError in training;
* the edge-weight refusal names ``normalize=False`` only for a layer that has that switch;
* ``T.GDC`` applied to a part, or edges it made from a part's tensors, stop in one line;
* every rank seeded alike (or not at all) with dropout in the model: a warning, once;
* a split drawn on each part (k times the nodes): a warning, once.
"""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch import nn
from torch_geometric.data import Data
from torch_geometric.nn import ChebConv, GCNConv, MessagePassing, SuperGATConv

import graphdist.gnn.pyg as gd
from graphdist.data import load_graph
from graphdist.errors import ConfigError
from graphdist.partition.layout import build_layout
from graphdist.testing import run_ranks

SPEC = "sbm:nodes=200,classes=3,avg_degree=6,homophily=0.8,features=6,seed=4"


def _part(rank=0, ws=1):
    g = load_graph(SPEC)
    return gd.Part.from_local_graph(build_layout(g, torch.arange(g.num_nodes) % ws, rank, ws))


@pytest.fixture(scope="module")
def part():
    return _part()


def test_a_layer_with_a_loss_of_its_own_is_refused_also_when_registered(part):
    with pytest.raises(ConfigError) as e:
        gd.register_local(SuperGATConv)
    msg = str(e.value)
    assert msg.startswith("register_local: SuperGATConv is not local: it carries a loss of its own "
                          "(SuperGATConv.get_attention_loss())") and "k times its weight" in msg and "\n" not in msg
    assert SuperGATConv not in gd.RULES
    with pytest.raises(ConfigError) as e:
        gd.distribute(SuperGATConv(6, 3), part)
    assert "carries a loss of its own" in str(e.value) and "register_local" not in str(e.value), str(e.value)


class WeightedConv(MessagePassing):
    """Takes edge weights, normalises nothing itself, has no `normalize` switch."""

    def __init__(self):
        super().__init__(aggr="add")

    def forward(self, x, edge_index, edge_weight=None):
        return self.propagate(edge_index, x=x, edge_weight=edge_weight)

    def message(self, x_j, edge_weight):
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j


def test_gcn_norm_registration_without_a_normalize_attribute_is_refused_when_distributed(part):
    gd.register_local(WeightedConv, gcn_norm=lambda conv: (False, True) if conv.normalize else None)
    try:
        with pytest.raises(ConfigError) as e:
            gd.distribute(nn.Sequential(WeightedConv()), part)
    finally:
        del gd.RULES[WeightedConv]
    msg = str(e.value)
    assert msg.startswith("layer 0 (WeightedConv) is registered with gcn_norm but has no `normalize` attribute")
    assert "\n" not in msg


def test_the_edge_weight_refusal_names_normalize_false_only_where_the_layer_has_it(part):
    w = torch.ones(part.edge_index.shape[1])
    with pytest.raises(ConfigError) as e:
        gd.distribute(ChebConv(6, 3, K=2), part)(part.x, part.edge_index, w)
    assert "(ChebConv) calls get_laplacian with edge weights" in str(e.value)
    assert "normalize" not in str(e.value), str(e.value)  # ChebConv has no such switch
    with pytest.raises(ConfigError, match=r"\(APPNP\) calls gcn_norm with edge weights.*pass normalize=False"):
        from torch_geometric.nn import APPNP
        gd.distribute(APPNP(K=2, alpha=0.1), part)(part.x, part.edge_index, w)


def test_a_transform_applied_to_a_part_is_refused_in_one_line(part):
    with pytest.raises(ConfigError) as e:
        T.GDC()(part)
    msg = str(e.value)
    assert msg.startswith("a PyG transform applied to a part (T.GDC,") and "\n" not in msg, msg


def _gdc_job(rank, ws):
    part = _part(rank, ws)
    n = part.num_owned + part.num_halo  # the part's tensors taken for a graph of its columns
    d = T.GDC()(Data(x=torch.cat([part.x, part.x.new_zeros(part.num_halo, 6)]), edge_index=part.edge_index,
                     num_nodes=n))
    conv = gd.distribute(GCNConv(6, 3, normalize=False), part)
    try:
        conv(part.x, d.edge_index, d.edge_attr)
    except ConfigError as e:
        return str(e)
    return None


def test_edges_a_transform_made_from_a_parts_tensors_stop_in_one_line_on_every_rank():
    for msg in run_ranks(_gdc_job, 2, timeout=120):
        assert msg is not None and msg.startswith("layer <model> (GCNConv): edge_index has "), msg
        assert "outside this part's local ids" in msg and "T.GDC" in msg and "\n" not in msg, msg


class DropNet(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p, self.conv = p, GCNConv(6, 3)

    def forward(self, x, edge_index):
        return self.conv(F.dropout(x, self.p, self.training), edge_index)


class Said(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _said():
    from graphdist.log import get_logger
    h = Said()
    get_logger().addHandler(h)
    return h


def _seed_job(rank, ws, how, p):
    h = _said()
    if how == "alike":
        torch.manual_seed(7)
    elif how == "gd.seed":
        gd.seed(7)
    part = _part(rank, ws)
    model = gd.distribute(DropNet(p), part)
    for _ in range(3):
        model.zero_grad()
        gd.cross_entropy(model(part.x, part.edge_index), part.y, part.train_mask).backward()
        gd.sync_grads(model)
    return h.lines


@pytest.mark.parametrize("how,p,warned", [("alike", 0.5, True), ("none", 0.5, True), ("gd.seed", 0.5, False),
                                          ("alike", 0.0, False)])
def test_ranks_seeded_alike_with_dropout_are_told_once(how, p, warned):
    lines = run_ranks(_seed_job, 2, args=(how, p), timeout=120)
    assert lines[1] == []  # rank 0 says it
    if warned:
        assert len(lines[0]) == 1 and lines[0][0].startswith("warning: every rank's torch generator drew the same "
                                                             "numbers up to step 1"), lines[0]
        assert "gd.seed(s)" in lines[0][0]
    else:
        assert lines[0] == [], lines[0]


def _split_job(rank, ws, how):
    h = _said()
    part = _part(rank, ws)
    gd.seed(1)
    n = part.num_owned
    if how == "per class":  # PyG's random_planetoid_splits on a part: 2 per class, then 20 and 30 of the rest
        per = [(part.y == c).nonzero().view(-1) for c in range(3)]
        per = [i[torch.randperm(i.numel())] for i in per]
        rest = torch.cat([i[2:] for i in per])
        rest = rest[torch.randperm(rest.numel())]
        ids = (torch.cat([i[:2] for i in per]), rest[:20], rest[20:50])
    elif how == "fixed sizes":  # T.RandomNodeSplit(split="train_rest", num_val=20, num_test=30) on a part
        perm = torch.randperm(n)
        ids = (perm[50:], perm[:20], perm[20:50])
    if how in ("per class", "fixed sizes"):
        masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
        for m, i in zip(masks, ids):
            m[i] = True
    elif how == "gd.random_split":
        masks = gd.random_split(part, 2, 20, 30, seed=1)
    else:  # the dataset's own split
        masks = (part.train_mask, part.val_mask, part.test_mask)
    model = gd.distribute(GCNConv(6, 3), part)
    out = model(part.x, part.edge_index)
    gd.cross_entropy(out, part.y, masks[0]).backward()
    accs = [gd.accuracy(out, part.y, m) for m in masks]
    counts = [int(gd.all_sum(m.sum())) for m in masks]
    return h.lines, counts, accs


@pytest.mark.parametrize("how", ["per class", "fixed sizes", "gd.random_split", "dataset"])
def test_a_split_drawn_on_each_part_is_told_once(how):
    res = run_ranks(_split_job, 2, args=(how,), timeout=120)
    lines = res[0][0]
    assert res[1][0] == []
    start = "warning: a mask given to gd.cross_entropy / gd.accuracy selects "
    if how == "per class":
        assert res[0][1] == [12, 40, 60]  # k = 2 times the split's 2 x 3 classes / 20 / 30
        assert lines == [start + "2 of each class on each of the 2 ranks: a split drawn on each part "
                         "(T.RandomNodeSplit, PyG's random_planetoid_splits) draws per rank, 2 times the nodes; "
                         "draw it once over the whole graph with gd.random_split(part, ...)"], lines
    elif how == "fixed sizes":
        assert res[0][1][1:] == [40, 60]
        assert len(lines) == 1 and lines[0].startswith(start + "as many nodes on each of the 2 ranks, in two masks "
                                                        "(50 and 20 on each): "), lines  # train (the rest), val
    else:
        assert lines == [], lines


def test_a_mask_of_the_whole_graphs_size_is_refused_in_one_line(part):
    """PyG's random_planetoid_splits on a part makes masks of size data.num_nodes, the graph's."""
    out = gd.distribute(GCNConv(6, 3), part)(part.x, part.edge_index)
    big = torch.zeros(part.num_owned + 7, dtype=torch.bool)
    for fn in (gd.cross_entropy, gd.nll_loss, gd.accuracy):
        with pytest.raises(ConfigError) as e:
            fn(out, part.y, big)
        msg = str(e.value)
        assert f"the mask has {part.num_owned + 7} entries, this rank's part {part.num_owned} owned rows" in msg
        assert msg.startswith(f"gd.{fn.__name__}: ") and "gd.random_split" in msg and "\n" not in msg
