"""Host-aware partition (``partition(..., hosts=H)``, ``graphdist partition --hosts H``): host groups
first, then parts inside each that the rows crossing hosts reach few of; parts numbered host-major."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from graphdist.cli import main
from graphdist.data.graph import Graph
from graphdist.partition.artifact import read_artifact
from partitioners import PartitionError, partition
from partitioners.hier import host_groups, induced

CLIQUES = [list(range(4 * c, 4 * c + 4)) for c in range(4)]
# four 4-cliques; cliques 0-1 and 2-3 joined by three edges each (a host's worth of traffic),
# 1-2 and 0-3 by one each: the best 8|8 host split is {0,1 | 2,3} with 2 cut edges (on paper:
# {0,2 | 1,3} cuts 3+3+1+1 = 8, {0,3 | 1,2} cuts 3+3 = 6)
BRIDGES = [(0, 4), (1, 5), (2, 6), (8, 12), (9, 13), (10, 14), (7, 11), (3, 15)]


def two_level() -> Graph:
    src, dst = [], []
    for c in CLIQUES:
        for u, v in itertools.combinations(c, 2):
            src.append(u)
            dst.append(v)
    for u, v in BRIDGES:
        src.append(u)
        dst.append(v)
    return Graph.from_edges(np.array(src), np.array(dst), 16)


def undirected_pairs(g: Graph) -> np.ndarray:
    indptr, indices = g.indptr.numpy(), g.indices.numpy().astype(np.int64)
    dst = np.repeat(np.arange(g.num_nodes), np.diff(indptr))
    keep = indices < dst
    return np.stack([indices[keep], dst[keep]])


def cut(g: Graph, groups: np.ndarray) -> int:
    s, d = undirected_pairs(g)
    return int((groups[s] != groups[d]).sum())


def brute_min_bisection(g: Graph) -> int:
    n = g.num_nodes
    best = None
    for half in itertools.combinations(range(1, n), n // 2 - 1):  # node 0 on side 0: each split once
        side = np.ones(n, dtype=np.int64)
        side[[0, *half]] = 0
        c = cut(g, side)
        best = c if best is None else min(best, c)
    return best


@pytest.mark.parametrize("method", ["metis", "auto"])
def test_host_split_is_the_minimum_bisection_and_parts_are_host_major(method):
    g = two_level()
    assert brute_min_bisection(g) == 2
    a = partition(g, 4, method=method, hosts=2, imbalance=0.0).numpy()
    hosts = host_groups(a, 4, 2)
    assert cut(g, hosts) == 2  # the brute-force optimum between hosts
    # host-major: parts 0, 1 on one host, 2, 3 on the other, each part one clique
    parts = sorted(sorted(np.flatnonzero(a == p).tolist()) for p in range(4))
    assert parts == CLIQUES
    assert {frozenset(np.flatnonzero(hosts == h).tolist()) for h in range(2)} == \
        {frozenset(CLIQUES[0] + CLIQUES[1]), frozenset(CLIQUES[2] + CLIQUES[3])}
    flat = partition(g, 4, method=method, imbalance=0.0).numpy()
    assert cut(g, hosts) <= cut(g, host_groups(flat, 4, 2))


def planted(seed: int = 0) -> Graph:
    """4 blocks of 100 nodes; blocks 0-1 and 2-3 close (a host each), the rest far."""
    rng = np.random.default_rng(seed)
    block = np.repeat(np.arange(4), 100)
    p = np.array([[0.15, 0.03, 0.001, 0.001], [0.03, 0.15, 0.001, 0.001],
                  [0.001, 0.001, 0.15, 0.03], [0.001, 0.001, 0.03, 0.15]])
    u, v = np.triu_indices(400, 1)
    keep = rng.random(u.shape[0]) < p[block[u], block[v]]
    return Graph.from_edges(u[keep], v[keep], 400)


@pytest.mark.parametrize("method", ["metis", "ldg"])
def test_fewer_edges_cross_hosts_than_flat(method):
    g = planted()
    a = partition(g, 4, method=method, hosts=2, seed=1).numpy()
    flat = partition(g, 4, method=method, seed=1).numpy()
    assert cut(g, host_groups(a, 4, 2)) <= cut(g, host_groups(flat, 4, 2))
    assert np.bincount(a, minlength=4).max() <= 1.03 * 100 + 1  # balanced within the budget
    # each host group is split on its own induced subgraph: its edges are the group's edges
    nodes, sub = induced(g, host_groups(a, 4, 2), 0)
    s, d = undirected_pairs(g)
    inside = np.isin(s, nodes) & np.isin(d, nodes)
    assert sub.num_edges == 2 * int(inside.sum()) and sub.num_nodes == nodes.shape[0]


def test_hosts_equal_parts_and_one_host():
    g = two_level()
    top = partition(g, 2, method="metis", hosts=2, imbalance=0.0).numpy()
    assert cut(g, top) == 2
    assert np.array_equal(partition(g, 4, method="metis", hosts=1).numpy(), partition(g, 4, method="metis").numpy())


@pytest.mark.parametrize("k, hosts, match", [(6, 4, "not a multiple of --hosts 4"), (4, 0, "positive")])
def test_bad_hosts(k, hosts, match):
    with pytest.raises(PartitionError, match=match):
        partition(two_level(), k, method="metis", hosts=hosts)


def test_cli_hosts(tmp_path, capsys):
    spec = "sbm:nodes=400,classes=4,avg_degree=6,features=3,seed=5"
    out = tmp_path / "h"
    assert main(["partition", spec, "--parts", "4", "--hosts", "2", "--method", "metis", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 host groups of 2" in printed
    meta, a = read_artifact(out)
    assert meta["params"]["hosts"] == 2 and sorted(set(a.tolist())) == [0, 1, 2, 3]
    from partitioners.hostsplit import rows_between_hosts
    from graphdist.data import load_graph
    moved, plain = rows_between_hosts(load_graph(spec), a, 4, 2, routed=True)
    d_moved, d_plain = rows_between_hosts(load_graph(spec), a, 4, 2)
    assert (f"between hosts  {moved:,} rows moved (mvc), {plain:,} plain, per layer with --halo-route hosts "
            f"({d_moved:,} and {d_plain:,} with the direct route)") in printed
    assert main(["partition", spec, "--parts", "6", "--hosts", "4", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--parts 6 is not a multiple of --hosts 4" in err[0]


def test_flat_parts_grouped_onto_hosts_by_brute_force():
    from partitioners.hier import _count_groupings, _groupings, group_parts, host_cut
    assert _count_groupings(4, 2) == len(list(_groupings(4, 2))) == 3
    assert _count_groupings(6, 3) == len(list(_groupings(6, 3))) == 15
    assert _count_groupings(8, 2) == len(list(_groupings(8, 2))) == 35
    g = two_level()
    # the cliques numbered so that the identity grouping {0,1},{2,3} pairs the far cliques 0 and 2
    flat = np.empty(16, dtype=np.int64)
    for part, clique in enumerate([0, 2, 1, 3]):
        flat[CLIQUES[clique]] = part
    assert host_cut(g, host_groups(flat, 4, 2)) == 2 * 8  # directed: 8 undirected edges
    regrouped = group_parts(g, flat, 4, 2)
    assert host_cut(g, host_groups(regrouped, 4, 2)) == 2 * 2  # the minimum bisection's 2 edges
    assert sorted(sorted(np.flatnonzero(regrouped == p).tolist()) for p in range(4)) == CLIQUES


# two hosts' worth of nodes, each a 4-cycle (0-1-2-3, 4-5-6-7), joined by 0-4, 0-6, 2-4, 2-6: the
# cut-minimal split of a cycle into pairs ({0,1},{2,3}) sends row 0 to both parts on the other host
# (its neighbours 4 and 6 apart), the pairs {0,2},{1,3} and {4,6},{5,7} send every crossing row once
CYCLES = [(0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4), (0, 4), (0, 6), (2, 4), (2, 6)]


def rows_between_hosts_brute(edges, a: np.ndarray, per: int) -> tuple[int, int]:
    """(rows moved between hosts with pre/post aggregation, plain halo rows between hosts) per
    layer, by brute force: per ordered pair of parts on different hosts, the plain rows are the
    distinct sources of its cut edges, the moved rows the smallest set of sources and
    destinations that touches every cut edge (tried subset by subset)."""
    directed = [(u, v) for u, v in edges] + [(v, u) for u, v in edges]
    moved = plain = 0
    k = int(a.max()) + 1
    for s in range(k):
        for r in range(k):
            if s // per == r // per:
                continue
            cut = [(u, v) for u, v in directed if a[u] == s and a[v] == r]
            ends = sorted({("u", u) for u, _ in cut} | {("v", v) for _, v in cut})
            plain += len({u for u, _ in cut})
            best = len(ends)
            for size in range(len(ends) + 1):
                if any(all(("u", u) in c or ("v", v) in c for u, v in cut)
                       for c in map(set, itertools.combinations(ends, size))):
                    best = size
                    break
            moved += best
    return moved, plain


def routed_rows_between_hosts_brute(edges, a: np.ndarray, per: int) -> tuple[int, int]:
    """The same through ``--halo-route hosts`` on a host-aware artifact, by brute force: plain,
    the distinct (source, other host) pairs; mvc, per (sending part, other host) the smallest set
    of sources and (destination) partial sums that touches every cut edge."""
    directed = [(u, v) for u, v in edges] + [(v, u) for u, v in edges]
    moved = plain = 0
    k = int(a.max()) + 1
    for s in range(k):
        for h in range(k // per):
            if s // per == h:
                continue
            cut = [(u, v) for u, v in directed if a[u] == s and a[v] // per == h]
            ends = sorted({("u", u) for u, _ in cut} | {("v", v) for _, v in cut})
            plain += len({u for u, _ in cut})
            moved += next(size for size in range(len(ends) + 1)
                          if any(all(("u", u) in c or ("v", v) in c for u, v in cut)
                                 for c in map(set, itertools.combinations(ends, size))))
    return moved, plain


def test_host_aware_moves_the_fewest_rows_between_hosts():
    from partitioners.hostsplit import rows_between_hosts
    g = Graph.from_edges(np.array([u for u, _ in CYCLES]), np.array([v for _, v in CYCLES]), 8)
    # every host-major assignment of 2 nodes per part, by brute force: the fewest rows between hosts
    best = None

    def assignments(left: tuple, part: int):
        for pair in itertools.combinations(left, 2):
            rest = tuple(x for x in left if x not in pair)
            for tail in (assignments(rest, part + 1) if rest else [{}]):
                yield {**{x: part for x in pair}, **tail}
    for d in assignments(tuple(range(8)), 0):  # 28 * 15 * 6 = 2,520
        x = np.array([d[i] for i in range(8)])
        key = routed_rows_between_hosts_brute(CYCLES, x, 2) + rows_between_hosts_brute(CYCLES, x, 2)
        assert rows_between_hosts(g, x, 4, 2, routed=True) + rows_between_hosts(g, x, 4, 2) == key
        best = key if best is None else min(best, key)
    assert best == (4, 4, 4, 4)  # rows 0, 2, 4, 6 cross once each, through the route or not
    a = partition(g, 4, method="metis", hosts=2, imbalance=0.0).numpy()
    assert np.bincount(a, minlength=4).tolist() == [2, 2, 2, 2]
    # the count the partitioner minimises (through the route first, then direct) agrees
    assert routed_rows_between_hosts_brute(CYCLES, a, 2) + rows_between_hosts_brute(CYCLES, a, 2) == best
    # host-major: the crossing rows' nodes share a part on each host
    assert {frozenset(np.flatnonzero(a == p).tolist()) for p in range(4)} == \
        {frozenset(s) for s in ({0, 2}, {1, 3}, {4, 6}, {5, 7})}
    assert set(host_groups(a, 4, 2)[[0, 2]]) != set(host_groups(a, 4, 2)[[4, 6]])
    flat = partition(g, 4, method="metis", imbalance=0.0).numpy()
    assert rows_between_hosts_brute(CYCLES, flat, 2) >= best


def test_groups_too_large_for_the_cross_net_split_are_split_by_the_method(monkeypatch):
    import partitioners.hostsplit as hs
    g = planted()
    monkeypatch.setattr(hs, "MAX_PINS", 0)  # every group "too large": METIS on its induced subgraph
    a = partition(g, 4, method="metis", hosts=2, seed=1).numpy()
    assert np.bincount(a, minlength=4).max() <= 1.03 * 100 + 1
    assert cut(g, host_groups(a, 4, 2)) <= cut(g, host_groups(partition(g, 4, method="metis", seed=1).numpy(), 4, 2))
    with pytest.raises(ValueError, match="above 0"):
        hs.cross_split(g, host_groups(a, 4, 2), 0, 2, np.ones(200, dtype=np.int64), imbalance=0.03, seed=0)


# host 0: parts 0 = {0, 1} (no edges), 1 = {2, 3}; host 1: parts 2 = {4, 5}, 3 = {6, 7}. Part 1
# sends into part 2 along 2-5, 3-4, 3-5 (a matching of 2: both 2 and 3 raw) and into part 3 along
# 2-7, 3-7 (one partial sum for 7, cheaper than 2 raw rows): per part pair 3 rows leave part 1,
# and through the route 2 and 3 cross to host 1 anyway, so the sum for 7 is one row too many.
# Per (sending part, receiving host) the cover is {2, 3}: 2 rows. Host 1 sends 4-3, 5-2, 5-3 (a
# cover of 2) and 7-2, 7-3 (one raw row 7): 3 either way.
SHARE = [(2, 5), (3, 4), (3, 5), (2, 7), (3, 7)]
SHARE_PARTS = np.array([0, 0, 1, 1, 2, 2, 3, 3])


def test_a_cover_per_rank_and_host_lets_mvc_share_the_crossing():
    from graphdist.exchange.route import build_routes, send_keys
    from graphdist.partition.layout import build_layouts
    from partitioners.cover import halo_cover
    from partitioners.hostsplit import rows_between_hosts
    g = Graph.from_edges(np.array([u for u, _ in SHARE]), np.array([v for _, v in SHARE]), 8)
    pairs, hosts = halo_cover(g, SHARE_PARTS, 4), halo_cover(g, SHARE_PARTS, 4, hosts=2)
    assert sorted(pairs.pre_node[pairs.pre_cover].tolist()) == [7]  # one sum for 7 from part 1
    assert sorted(hosts.pre_node[hosts.pre_cover].tolist()) == []
    raw = lambda c: sorted(zip(c.raw_node[c.raw_cover].tolist(), c.raw_part[c.raw_cover].tolist()))  # noqa: E731
    assert raw(hosts) == [(2, 2), (2, 3), (3, 2), (3, 3), (4, 1), (5, 1), (7, 1)]  # 2, 3 raw to both parts
    assert rows_between_hosts(g, SHARE_PARTS, 4, 2, routed=True) == (5, 5)
    assert routed_rows_between_hosts_brute(SHARE, SHARE_PARTS, 2) == (5, 5)
    crossing = {}
    for h in (1, 2):  # the layouts as an artifact stores them, and what the route moves across
        plans = build_layouts(g, torch.as_tensor(SHARE_PARTS), 4, hosts=h)
        keys = [send_keys(p, "mvc") for p in plans]
        for routed in (False, True):
            r = build_routes([x[0] for x in keys], [x[1] for x in keys], [0, 0, 1, 1], routed=routed)
            crossing[(h, routed)] = sum(x.cross_send for x in r)
    # per pair: 6 rows cross either way; per rank and host: 5 through the route (7 direct: 2 and 3
    # go raw to both ranks of host 1)
    assert crossing == {(1, False): 6, (1, True): 6, (2, False): 7, (2, True): 5}


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_a_cover_per_rank_and_host_computes_the_same_product(model):
    """mvc layouts whose cover across hosts is per (sending part, receiving host): every
    rank's A @ [h ; halo] equals the dense product, and fewer rows cross through the route."""
    from graphdist.exchange.route import build_routes, send_keys
    from graphdist.partition.layout import build_layouts
    from tests.test_halo import _simulated
    gen = torch.Generator().manual_seed(3)
    n = 80
    g = Graph.from_edges(torch.randint(0, n, (400,), generator=gen), torch.randint(0, n, (400,), generator=gen), n)
    a = torch.randint(0, 4, (n,), generator=gen)
    (whole,) = build_layouts(g, torch.zeros(n, dtype=torch.long), 1)
    rows, cols, vals = whole.edges(model)
    dense = torch.zeros(n, n, dtype=torch.float64)
    dense[rows, cols] = vals
    h = torch.randn(n, 5, generator=gen)
    want = (dense @ h.double()).float()
    moved = {}
    for hosts in (1, 2):
        plans = build_layouts(g, a, 4, hosts=hosts)
        for p, out in zip(plans, _simulated(plans, model, "mvc", h)):
            assert torch.allclose(out, want[p.owned], atol=1e-5), (model, hosts, p.rank)
        keys = [send_keys(p, "mvc") for p in plans]
        moved[hosts] = sum(r.cross_send for r in build_routes([x[0] for x in keys], [x[1] for x in keys], [0, 0, 1, 1]))
    from partitioners.hostsplit import rows_between_hosts
    assert moved[2] == rows_between_hosts(g, a.numpy(), 4, 2, routed=True)[0] < moved[1]


# 12 nodes, 24 edges (a seeded search for a graph where the two objectives part): over its 462
# bisections (brute force below) the fewest edges cut is 6, and every such bisection leaves 10
# nodes with a neighbour across, 10 rows through the hosts route; the fewest rows is 8 (8 edges cut)
PARTED = [(0, 4), (0, 5), (0, 9), (1, 2), (2, 3), (2, 4), (2, 5), (2, 10), (3, 4), (3, 6), (3, 7), (4, 5),
          (5, 8), (5, 11), (6, 8), (6, 10), (6, 11), (7, 8), (7, 10), (8, 9), (8, 10), (9, 10), (9, 11), (10, 11)]


def test_the_route_split_finds_the_fewest_rows_where_the_fewest_edges_do_not():
    from partitioners import hier
    from partitioners.hostsplit import route_split, rows_between_hosts
    g = Graph.from_edges(np.array([u for u, _ in PARTED]), np.array([v for _, v in PARTED]), 12)

    def rows(side):  # a node's row crosses to the other host iff it has a neighbour there
        return len({x for u, v in PARTED if side[u] != side[v] for x in (u, v)})
    splits = []
    for half in itertools.combinations(range(1, 12), 5):
        side = np.ones(12, dtype=np.int64)
        side[[0, *half]] = 0
        splits.append((cut(g, side), rows(side)))
    fewest_cut = min(c for c, _ in splits)
    assert (fewest_cut, min(r for c, r in splits if c == fewest_cut), min(r for _, r in splits)) == (6, 10, 8)
    side = route_split(g, 2, np.ones(12, dtype=np.int64), imbalance=0.0, seed=0)
    assert np.bincount(side, minlength=2).tolist() == [6, 6]
    assert rows(side) == 8 == rows_between_hosts(g, side, 2, 2, routed=True)[1]
    # a candidate of the searching methods' host split, not of the streaming ones
    kw = dict(flat=partition, imbalance=0.0, seed=0, balance="nodes", node_weights=None, options={})
    assert any(rows(s) == 8 for s in hier._host_splits(g, 2, method="metis", **kw))
    assert len(hier._host_splits(g, 2, method="ldg", **kw)) == 1
    # no node's row read by another: dealt to the hosts in turn, heaviest first
    empty = Graph.from_edges(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 5)
    assert route_split(empty, 2, np.array([1, 5, 3, 3, 2]), imbalance=0.0, seed=0).tolist() == [0, 0, 1, 0, 1]


def test_one_artifact_for_both_modes_takes_the_candidate_least_above_the_best_in_its_worse_mode():
    from partitioners.hier import _worse_mode
    # (mvc rows, plain rows) through the route of SNAP facebook_combined's candidates at K = 8: the
    # fewest mvc rows (97) came with 2.45x the fewest plain rows; 108 mvc is 1.11x the fewest
    keys = [(97, 480), (108, 196), (167, 329)]
    assert [round(_worse_mode(keys, i), 2) for i in range(3)] == [2.45, 1.11, 1.72]
    assert _worse_mode([(0, 5), (0, 7)], 0) == 1.0  # no row at all in a mode: counted against 1
