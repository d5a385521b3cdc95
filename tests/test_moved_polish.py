"""Fewer moved rows (issue 20 item 5): the exact-cover polish and the METIS-without-hubs start.

The reference is a brute-force minimum vertex cover of every ordered part pair's cut edges
(all subsets of the pair's endpoints, smallest first), independent of the matching and König
code in :mod:`partitioners.cover`."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from graphdist.data.graph import Graph
from partitioners import partition, quality
from partitioners.common import in_csr, make_weights
from partitioners.moved import moved_key, polish_moved
from partitioners.refine import VolumeRefiner


def brute_cover(g, a, k) -> int:
    """Sum over ordered pairs (s, r) of the smallest set of (source, r) and (destination, s)
    rows covering every cut edge s -> r, by enumeration."""
    indptr, src = in_csr(g)
    dst = np.repeat(np.arange(g.num_nodes), np.diff(indptr))
    total = 0
    for s in range(k):
        for r in range(k):
            if s == r:
                continue
            edges = [(int(u), int(v)) for u, v in zip(src, dst) if a[u] == s and a[v] == r]
            ends = sorted({("u", u) for u, _ in edges} | {("v", v) for _, v in edges})
            for size in range(len(ends) + 1):
                if any(all(("u", u) in c or ("v", v) in c for u, v in edges)
                       for c in map(set, itertools.combinations(ends, size))):
                    total += size
                    break
    return total


def tiny(seed: int, n: int = 12, m: int = 26) -> Graph:
    rng = np.random.default_rng(seed)
    return Graph.from_edges(rng.integers(0, n, m), rng.integers(0, n, m), n, symmetrize=False)


def test_brute_cover_by_hand():
    # 0 -> 2, 0 -> 3, 1 -> 2 across parts {0, 1} | {2, 3}: cover {0 raw, 2 pre} = 2 rows
    # (the plain halo sends 0 and 1: also 2); add 1 -> 3 and the pair needs 2 still (0, 1 raw)
    g = Graph.from_edges(np.array([0, 0, 1]), np.array([2, 3, 2]), 4, symmetrize=False)
    a = np.array([0, 0, 1, 1])
    assert brute_cover(g, a, 2) == 2 == moved_key(g, a, 2)[0]
    star = Graph.from_edges(np.array([0, 0, 0]), np.array([1, 2, 3]), 4, symmetrize=False)
    assert brute_cover(star, np.array([0, 1, 1, 1]), 2) == 1  # one raw row of the hub


@pytest.mark.parametrize("seed", range(4))
def test_polish_ends_in_an_exact_local_optimum_within_the_caps(seed):
    g = tiny(seed)
    k = 3
    w = make_weights(g, k, 0.5, "both")
    r = VolumeRefiner(g, k, w)
    a = np.random.default_rng(seed).integers(0, k, g.num_nodes)
    r.rebalance(a)
    caps = np.asarray(w.caps)[:, None] + 1e-9
    assert (r.loads(a) <= caps).all()
    before = brute_cover(g, a, k)
    b = polish_moved(g, a, k, w, tries=10**6, batch=10**6, min_bound_gain=-np.inf)
    after = brute_cover(g, b, k)
    assert after <= before and after == moved_key(g, b, k)[0]
    assert (r.loads(b) <= caps).all()
    # no single move that keeps the caps lowers the brute-force cover any more
    for v in range(g.num_nodes):
        for q in range(k):
            if q == b[v]:
                continue
            c = b.copy()
            c[v] = q
            if (r.loads(c) <= caps).all():
                assert brute_cover(g, c, k) >= after, (v, q)


def test_polish_never_worse_and_respects_the_try_budget(monkeypatch):
    import partitioners.cover as pc
    rng = np.random.default_rng(7)
    n, k = 300, 4
    g = Graph.from_edges(rng.integers(0, n, 1200), rng.integers(0, n, 1200), n)
    w = make_weights(g, k, 0.03, "both")
    a = partition(g, k, method="auto", polish=0, seeds=1).numpy()
    calls = []
    real = pc.matching_size
    monkeypatch.setattr(pc, "matching_size", lambda *x: calls.append(1) or real(*x))
    b = polish_moved(g, a, k, w, tries=25)
    assert len(calls) <= 25 + 1  # the start's matching, then one per try
    assert moved_key(g, b, k)[0] <= moved_key(g, a, k)[0]
    r = VolumeRefiner(g, k, w)
    assert (r.loads(b) <= np.asarray(w.caps)[:, None] + 1e-9).all()


def test_auto_polish_and_seeds_keep_both_balances():
    rng = np.random.default_rng(3)
    n, k = 400, 4
    g = Graph.from_edges(rng.integers(0, n, 2000), rng.integers(0, n, 2000), n)
    plain = quality(g, partition(g, k, polish=0, seeds=1), k=k)
    full = quality(g, partition(g, k), k=k)
    for q in (plain, full):
        assert q["node_imbalance"] <= 0.03 + 1e-9 and q["edge_imbalance"] <= 0.03 + 1e-9
    same = quality(g, partition(g, k), k=k)
    assert same == full  # deterministic


def cliques_and_hub(k: int, size: int) -> tuple[Graph, int]:
    src, dst = [], []
    for c in range(k):
        nodes = range(c * size, (c + 1) * size)
        src += [u for u in nodes for v in nodes if u != v]
        dst += [v for u in nodes for v in nodes if u != v]
    hub = k * size
    src += [hub] * hub + list(range(hub))
    dst += list(range(hub)) + [hub] * hub
    return Graph.from_edges(np.array(src), np.array(dst), hub + 1, symmetrize=False), hub


def test_hubsplit_leaves_the_hub_out_of_metis_and_cuts_only_at_it():
    pytest.importorskip("pymetis")
    from partitioners import metis
    from partitioners.hubsplit import hubsplit_partition
    if metis.metis_backend() == "none":
        pytest.skip("multi-constraint METIS needs a METIS library that passes the width check")
    k, size = 3, 8
    g, hub = cliques_and_hub(k, size)
    w = make_weights(g, k, 0.03, "both")
    a = hubsplit_partition(g, k, w, frac=1 / g.num_nodes + 1e-9, imbalance=0.01, seed=0)
    assert a.min() >= 0 and a.max() < k
    groups = [set(a[c * size:(c + 1) * size].tolist()) for c in range(k)]
    assert all(len(s) == 1 for s in groups) and len(set.union(*groups)) == k  # one clique per part
    # every cut edge touches the hub: one raw row and one partial sum per other part
    assert moved_key(g, a, k)[0] == brute_cover(g, a, k) == 2 * (k - 1)
    assert quality(g, a, k=k)["comm_volume"] == 2 * size + 2  # the plain halo pays per clique node
