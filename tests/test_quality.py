"""Partition-quality metrics: hand-counted tiny graphs and a brute-force reference."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from graphdist.data.graph import Graph
from graphdist.errors import USER_ERRORS
from partitioners import (QUALITY_KEYS, PartitionError, bytes_per_layer, comm_volume, edge_cut,
                          edge_cut_fraction, edge_imbalance, max_recv, max_send, moved_rows,
                          node_imbalance, quality, recv_per_part, replication_factor, send_matrix,
                          send_per_part)
from partitioners.cover import halo_cover


def directed(edges, n):
    e = np.asarray(edges, dtype=np.int64)
    return Graph.from_edges(e[:, 0], e[:, 1], n, symmetrize=False)


def test_hand_counted_directed_graph():
    # 0->1, 0->2, 1->2, 2->3, 3->0 ; parts {0,1} | {2,3}
    g = directed([(0, 1), (0, 2), (1, 2), (2, 3), (3, 0)], 4)
    a = torch.tensor([0, 0, 1, 1])
    # cut edges: 0->2, 1->2 (into part 1) and 3->0 (into part 0)
    assert edge_cut(g, a) == 3
    assert edge_cut_fraction(g, a) == pytest.approx(3 / 5)
    # part 1 receives rows {0, 1}; part 0 receives row {3}
    assert comm_volume(g, a) == 3
    np.testing.assert_array_equal(send_matrix(g, a), [[0, 2], [1, 0]])
    np.testing.assert_array_equal(recv_per_part(g, a), [1, 2])
    np.testing.assert_array_equal(send_per_part(g, a), [2, 1])
    assert max_recv(g, a) == 2 and max_send(g, a) == 2
    assert node_imbalance(g, a) == 0.0
    # in-degrees 1,1,2,1 -> part loads 2 and 3, mean 2.5
    assert edge_imbalance(g, a) == pytest.approx(3 / 2.5 - 1)
    assert replication_factor(g, a) == pytest.approx(7 / 4)
    assert bytes_per_layer(g, a, 16) == 3 * 16 * 4
    # pre/post aggregation: 0 -> 2 and 1 -> 2 become one partial sum for node 2; 3 -> 0 stays
    assert moved_rows(g, a) == 2
    q = quality(g, a, feature_dim=16)
    assert q["moved_rows"] == 2 and q["moved_max_recv"] == 1
    assert set(q) == set(QUALITY_KEYS) | {"bytes_per_layer"}
    assert q["comm_volume"] == 3 and q["edge_cut"] == 3 and q["bytes_per_layer"] == 192
    assert set(quality(g, a)) == set(QUALITY_KEYS)


def test_a_source_is_counted_once_per_receiving_part():
    # star 0 -> 1,2,3 with the leaves in part 1 and 0 in part 0: one halo row, three cut edges
    g = directed([(0, 1), (0, 2), (0, 3)], 4)
    a = torch.tensor([0, 1, 1, 1])
    assert edge_cut(g, a) == 3
    assert comm_volume(g, a) == 1 and moved_rows(g, a) == 1
    # leaves in parts 1, 2, 3: the row goes to three parts
    a3 = torch.tensor([0, 1, 2, 3])
    assert comm_volume(g, a3) == 3 and moved_rows(g, a3) == 3
    np.testing.assert_array_equal(send_matrix(g, a3)[0], [0, 1, 1, 1])
    assert max_send(g, a3) == 3 and max_recv(g, a3) == 1


def test_direction_matters():
    # 0 -> 1 only: the owner of 1 needs row 0, the owner of 0 needs nothing
    g = directed([(0, 1)], 2)
    a = torch.tensor([0, 1])
    np.testing.assert_array_equal(send_matrix(g, a), [[0, 1], [0, 0]])
    np.testing.assert_array_equal(recv_per_part(g, a), [0, 1])


def test_undirected_path_into_two_halves():
    # 0-1-2-3-4-5 split 3|3: one undirected cut edge -> 2 directed cut edges, 2 halo rows
    g = Graph.from_edges(np.arange(5), np.arange(1, 6), 6)
    a = torch.tensor([0, 0, 0, 1, 1, 1])
    q = quality(g, a)
    assert q["edge_cut"] == 2 and q["comm_volume"] == 2
    assert q["node_imbalance"] == 0.0
    # in-degrees 1,2,2,2,2,1: both parts carry 5 edges
    assert q["edge_imbalance"] == pytest.approx(0.0)


def _max_matching(edges) -> int:
    """Kuhn's augmenting paths on a list of (left, right) edges (reference only)."""
    adj: dict = {}
    for u, v in edges:
        adj.setdefault(u, []).append(v)
    match: dict = {}

    def augment(u, seen):
        for v in adj[u]:
            if v not in seen:
                seen.add(v)
                if v not in match or augment(match[v], seen):
                    match[v] = u
                    return True
        return False
    return sum(augment(u, set()) for u in adj)


def brute_force(src, dst, n, a, k):
    halo = [set() for _ in range(k)]
    pairs: dict = {}
    for j, i in zip(src, dst):
        if a[j] != a[i]:
            pairs.setdefault((a[j], a[i]), set()).add((j, i))
    moved = {p: _max_matching(sorted(e)) for p, e in pairs.items()}
    moved_recv = [sum(m for (s, r), m in moved.items() if r == q) for q in range(k)]
    cut = 0
    for j, i in zip(src, dst):
        if a[j] != a[i]:
            cut += 1
            halo[a[i]].add(j)
    send = np.zeros((k, k), dtype=np.int64)
    for q in range(k):
        for j in halo[q]:
            send[a[j], q] += 1
    indeg = np.zeros(n)
    for i in dst:
        indeg[i] += 1
    nodes = np.bincount(a, minlength=k)
    edges = np.array([sum(indeg[v] for v in range(n) if a[v] == p) for p in range(k)])
    vol = sum(len(h) for h in halo)
    return {
        "edge_cut": cut, "edge_cut_fraction": cut / len(src), "comm_volume": vol,
        "max_recv": max(len(h) for h in halo), "max_send": int(send.sum(1).max()),
        "node_imbalance": nodes.max() / (n / k) - 1, "edge_imbalance": edges.max() / (len(src) / k) - 1,
        "replication_factor": (n + vol) / n, "bytes_per_layer": vol * 7 * 4,
        "moved_rows": sum(moved.values()), "moved_max_recv": max(moved_recv),
    }, send


@pytest.mark.parametrize("seed", range(8))
def test_matches_brute_force_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    m = int(rng.integers(n, 5 * n))
    k = int(rng.integers(1, 7))
    g = Graph.from_edges(rng.integers(0, n, m), rng.integers(0, n, m), n,
                         symmetrize=bool(seed % 2), self_loops=bool(seed % 3 == 0))
    a = rng.integers(0, k, n)
    a[:k] = np.arange(k)  # every part used, so k = max id + 1
    src, dst = g.edge_index.numpy()
    ref, send = brute_force(src, dst, n, a, k)
    got = quality(g, torch.from_numpy(a), feature_dim=7)
    assert set(got) == set(ref)
    for key, v in ref.items():
        assert got[key] == pytest.approx(v), key
    np.testing.assert_array_equal(send_matrix(g, a), send)
    # the cover behind moved_rows: it covers every cut edge, and never needs more rows than
    # the plain halo or the partial sums alone would
    c = halo_cover(g, a, k)
    assert c.moved_rows == ref["moved_rows"]
    assert (c.raw_cover[c.row] | c.pre_cover[c.col]).all()
    assert c.moved_rows <= min(c.raw_node.size, c.pre_node.size)


def test_cover_by_hand():
    # part 0 = {0, 4, 5}, part 1 = {1, 2, 3}; 0 -> 1, 2, 3 (a source with three targets) and
    # 4 -> 1, 5 -> 1 (a target with two more sources): send row 0 raw, one partial sum for 1
    g = directed([(0, 1), (0, 2), (0, 3), (4, 1), (5, 1)], 6)
    a = np.array([0, 1, 1, 1, 0, 0])
    c = halo_cover(g, a, 2)
    assert c.moved_rows == 2 and comm_volume(g, a) == 3
    assert c.raw_node[c.raw_cover].tolist() == [0] and c.pre_node[c.pre_cover].tolist() == [1]
    assert sorted(zip(c.src[c.edge_pre].tolist(), c.dst[c.edge_pre].tolist())) == [(4, 1), (5, 1)]
    np.testing.assert_array_equal(c.moved_per_receiver(a, 2), [0, 2])


def test_explicit_k_counts_empty_parts():
    g = Graph.from_edges(np.arange(3), np.arange(1, 4), 4)
    a = torch.tensor([0, 0, 1, 1])
    assert node_imbalance(g, a) == 0.0
    q = quality(g, a, k=4)  # two empty parts: the largest holds 2 of a mean of 1
    assert q["node_imbalance"] == pytest.approx(1.0)
    assert send_matrix(g, a, k=4).shape == (4, 4)


@pytest.mark.parametrize("assignment, match", [
    ([0, 1, 0], "3 entries but the graph has 4 nodes"),
    ([0, -1, 0, 1], "negative"),
])
def test_bad_assignment(assignment, match):
    g = Graph.from_edges(np.arange(3), np.arange(1, 4), 4)
    with pytest.raises(PartitionError, match=match) as ei:
        quality(g, torch.tensor(assignment))
    assert isinstance(ei.value, USER_ERRORS)  # the CLI prints it as one line, exit 2


def test_ids_at_or_above_k_are_rejected():
    g = Graph.from_edges(np.arange(3), np.arange(1, 4), 4)
    with pytest.raises(PartitionError, match="part id 2 >= k=2"):
        quality(g, torch.tensor([0, 1, 2, 0]), k=2)


def test_dense_and_sorted_paths_agree(monkeypatch):
    import importlib
    pq = importlib.import_module("partitioners.quality")  # the module, not the function
    rng = np.random.default_rng(3)
    n, k = 500, 8
    g = Graph.from_edges(rng.integers(0, n, 3000), rng.integers(0, n, 3000), n)
    a = rng.integers(0, k, n)
    dense = quality(g, a)
    monkeypatch.setattr(pq, "DENSE_PAIR_CELLS", 0)  # force the np.unique path
    assert quality(g, a) == dense
