"""Graph-wide versions of per-rank PyG idioms, at k = 2 against one process on the whole graph:
``gd.random_split`` draws PyG's citation-benchmark random split (``torch.manual_seed(seed)``,
``randperm`` per class, then the shuffled rest) by global id; ``gd.normalize_features`` is
``T.NormalizeFeatures`` of the whole graph although the minimum feature sits on one part only."""
from __future__ import annotations

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data

import graphdist.gnn.pyg as gd
from graphdist.data import Graph
from graphdist.errors import ConfigError
from graphdist.partition.layout import build_layout
from graphdist.testing import run_ranks

N, C = 300, 4


def make_graph() -> Graph:
    g = torch.Generator().manual_seed(5)
    src, dst = torch.randint(0, N, (900,), generator=g), torch.randint(0, N, (900,), generator=g)
    x = torch.rand(N, 6, generator=g) * 3
    x[17, 2] = -4.0  # the whole graph's minimum, on one part only
    y = torch.randint(0, C, (N,), generator=g)
    y[::37] = -1  # unlabelled
    return Graph.from_edges(src, dst, N, symmetrize=True, x=x, y=y)


def planetoid_split(y, per_class, num_val, num_test, seed):
    """PyG's ``random_planetoid_splits`` procedure, on the global generator."""
    torch.manual_seed(seed)
    per = []
    for c in range(C):
        idx = (y == c).nonzero().view(-1)
        per.append(idx[torch.randperm(idx.numel())])
    rest = torch.cat([i[per_class:] for i in per])
    rest = rest[torch.randperm(rest.numel())]
    masks = []
    for ids in (torch.cat([i[:per_class] for i in per]), rest[:num_val], rest[num_val:num_val + num_test]):
        m = torch.zeros(N, dtype=torch.bool)
        m[ids] = True
        masks.append(m)
    return masks


def _job(rank, ws, graph, assign):
    part = gd.Part.from_local_graph(build_layout(graph, assign, rank, ws))
    masks = gd.random_split(part, 10, 50, 100, seed=3)
    assert part.train_mask is masks[0]
    return part.node_ids, masks, gd.normalize_features(part.x)


@pytest.mark.parametrize("k", [1, 2])
def test_random_split_and_normalize_features_are_graph_wide(k):
    graph = make_graph()
    assign = torch.arange(N) % k
    res = [_job(0, 1, graph, assign)] if k == 1 else run_ranks(_job, k, args=(graph, assign), timeout=120)
    want = planetoid_split(graph.y, 10, 50, 100, 3)
    want_x = T.NormalizeFeatures()(Data(x=graph.x.clone())).x
    got = [torch.zeros(N, dtype=torch.bool) for _ in range(3)]
    x = torch.full_like(graph.x, float("nan"))
    for ids, masks, xs in res:
        for g, m in zip(got, masks):
            g[ids] = m
        x[ids] = xs
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    assert [int(m.sum()) for m in got] == [10 * C, 50, 100]
    assert not (got[0] & got[1]).any() and not (got[1] & got[2]).any() and not (graph.y[got[0] | got[2]] < 0).any()
    assert torch.allclose(x, want_x, atol=1e-7)


def test_random_split_refuses_too_many_in_one_line():
    graph = make_graph()
    part = gd.Part.from_local_graph(build_layout(graph, torch.zeros(N, dtype=torch.int64), 0, 1))
    with pytest.raises(ConfigError, match=r"num_val \+ num_test = 1500 but only \d+ labelled nodes are left"):
        gd.random_split(part, 20, 500, 1000)
