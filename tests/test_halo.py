"""Local graph and halo plan on graphs small enough to check on paper."""
from __future__ import annotations

import pytest
import torch

from graphdist.data import Graph
from graphdist.errors import ArtifactError, MissingFileError
from graphdist.partition.layout import build_layout, build_layouts, validate_layouts
from graphdist.partition.parts import load_part, part_path, write_parts


def path6() -> Graph:
    """0 - 1 - 2 - 3 - 4 - 5 (undirected), parts [0 0 | 1 1 | 2 2]."""
    return Graph.from_edges(torch.tensor([0, 1, 2, 3, 4]), torch.tensor([1, 2, 3, 4, 5]), 6,
                            x=torch.arange(6.0)[:, None], y=torch.arange(6) % 2,
                            train_mask=torch.tensor([1, 0, 1, 0, 1, 0], dtype=torch.bool))


A3 = torch.tensor([0, 0, 1, 1, 2, 2])


def test_path_plan_by_hand():
    p0, p1, p2 = build_layouts(path6(), A3, 3)
    # part 1 owns 2,3; in-neighbours 1 (part 0) and 4 (part 2) -> columns [2 3 | 1 | 4]
    assert p1.owned.tolist() == [2, 3]
    assert p1.halo.tolist() == [1, 4]
    assert p1.recv_counts == [1, 0, 1]
    assert p1.indptr.tolist() == [0, 2, 4]
    assert p1.indices.tolist() == [1, 2, 0, 3]     # row 2: {3, 1}; row 3: {2, 4}
    assert p1.send_counts == [1, 0, 1]              # node 2 -> part 0, node 3 -> part 2
    assert p1.owned[p1.send_idx].tolist() == [2, 3]
    # part 0 owns 0,1; needs node 2 from part 1; sends node 1 to part 1
    assert p0.halo.tolist() == [2] and p0.recv_counts == [0, 1, 0]
    assert p0.owned[p0.send_idx].tolist() == [1] and p0.send_counts == [0, 1, 0]
    assert p0.indices.tolist() == [1, 0, 2]
    # part 2 owns 4,5; needs 3
    assert p2.halo.tolist() == [3] and p2.owned[p2.send_idx].tolist() == [4]
    # global degrees of all columns (path: ends have 1, inner nodes 2)
    assert p0.col_deg.tolist() == [1, 2, 2]
    assert p1.col_deg.tolist() == [2, 2, 2, 2]
    assert p1.y.tolist() == [0, 1] and p1.train_mask.tolist() == [True, False]
    assert p1.x[:, 0].tolist() == [2.0, 3.0]


def test_gcn_normalisation_by_hand():
    p1 = build_layouts(path6(), A3, 3)[1]
    indptr, indices, vals = p1.gcn_adjacency()
    # d = deg + 1 = 3 for nodes 1..4: every entry 1/sqrt(3*3) incl. the self-loop
    assert indptr.tolist() == [0, 3, 6]
    assert indices.tolist() == [0, 1, 2, 0, 1, 3]
    assert torch.allclose(vals, torch.full((6,), 1 / 3))
    p0 = build_layouts(path6(), A3, 3)[0]
    _, idx0, v0 = p0.gcn_adjacency()
    # node 0 (d=2): self 1/2, from node 1 (d=3) 1/sqrt(6); node 1: from 0 1/sqrt(6), self 1/3, from 2 1/3
    want = torch.tensor([1 / 2, 6 ** -0.5, 6 ** -0.5, 1 / 3, 1 / 3])
    assert idx0.tolist() == [0, 1, 0, 1, 2]
    assert torch.allclose(v0, want)


def test_mean_adjacency_and_isolated_node():
    g = Graph.from_edges(torch.tensor([0, 0]), torch.tensor([1, 2]), 4)  # node 3 isolated
    (p,) = build_layouts(g, torch.zeros(4, dtype=torch.long), 1)
    ip, ix, v = p.mean_adjacency()
    assert ip.tolist() == [0, 2, 3, 4, 4]
    assert torch.allclose(v, torch.tensor([0.5, 0.5, 1.0, 1.0]))
    assert p.num_halo == 0 and p.send_idx.numel() == 0


def test_gcn_norm_matches_pyg_on_random_graph():
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    gen = torch.Generator().manual_seed(0)
    n = 30
    g = Graph.from_edges(torch.randint(0, n, (90,), generator=gen), torch.randint(0, n, (90,), generator=gen), n)
    a = torch.randint(0, 3, (n,), generator=gen)
    ei, w = gcn_norm(g.edge_index, num_nodes=n, add_self_loops=True)
    dense = torch.zeros(n, n)
    dense[ei[1], ei[0]] = w  # row = destination
    for p in build_layouts(g, a, 3):
        ip, ix, v = p.gcn_adjacency()
        cols = torch.cat([p.owned, p.halo])
        local = torch.zeros(p.num_owned, p.num_cols)
        rows = torch.repeat_interleave(torch.arange(p.num_owned), ip[1:] - ip[:-1])
        local[rows, ix] = v
        assert torch.allclose(local, dense[p.owned][:, cols], atol=1e-7)


def test_directed_graph_halo_is_in_neighbours_only():
    # edges 0 -> 2 and 2 -> 1 only; parts [0, 0, 1]
    g = Graph.from_edges(torch.tensor([0, 2]), torch.tensor([2, 1]), 3, symmetrize=False)
    p0, p1 = build_layouts(g, torch.tensor([0, 0, 1]), 2)
    assert p0.halo.tolist() == [2]      # node 1 (part 0) receives from 2
    assert p1.halo.tolist() == [0]      # node 2 (part 1) receives from 0
    assert p0.owned[p0.send_idx].tolist() == [0]


def test_validate_detects_asymmetry():
    plans = build_layouts(path6(), A3, 3)
    plans[0].send_idx = torch.tensor([0])  # sends node 0 where part 1 expects node 1
    with pytest.raises(ArtifactError, match="asymmetric"):
        validate_layouts(plans)


def test_bad_assignment():
    with pytest.raises(ArtifactError, match="0..1"):
        build_layouts(path6(), torch.tensor([0, 0, 1, 1, 2, 2]), 2)
    with pytest.raises(ArtifactError, match="6 nodes"):
        build_layout(path6(), torch.tensor([0, 1]), 0, 2)


def test_empty_part_is_allowed():
    plans = build_layouts(path6(), torch.tensor([0, 0, 0, 2, 2, 2]), 3)
    assert plans[1].num_owned == 0 and plans[1].num_halo == 0
    assert plans[0].halo.tolist() == [3] and plans[2].halo.tolist() == [2]


def test_parts_roundtrip(tmp_path):
    g = path6()
    summary = write_parts(tmp_path, g, A3)
    assert summary["parts"] == 3 and summary["halo_rows"] == [1, 2, 1]
    assert summary["halo_rows_total"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part_00000.pt", "part_00001.pt", "part_00002.pt"]
    p1 = load_part(tmp_path, 1)
    want = build_layouts(g, A3, 3)[1]
    for k in ("owned", "indptr", "indices", "halo", "send_idx", "col_deg", "x", "y"):
        assert torch.equal(getattr(p1, k), getattr(want, k)), k
    assert p1.recv_counts == want.recv_counts and p1.fingerprint == g.fingerprint
    with pytest.raises(MissingFileError, match="rank 3"):
        load_part(tmp_path, 3)
    part_path(tmp_path, 2).write_bytes(b"garbage")
    with pytest.raises(ArtifactError, match="part_00002"):
        load_part(tmp_path, 2)


# ------------------------------------------------------------------ pre/post aggregation (mvc)
def star() -> Graph:
    """0 -> 1, 2, 3 and 4 -> 1, 5 -> 1 (directed); parts {0, 4, 5} | {1, 2, 3}."""
    return Graph.from_edges(torch.tensor([0, 0, 0, 4, 5]), torch.tensor([1, 2, 3, 1, 1]), 6, symmetrize=False,
                            x=torch.arange(6.0)[:, None])


STAR = torch.tensor([0, 1, 1, 1, 0, 0])


def test_mvc_plan_by_hand():
    p0, p1 = build_layouts(star(), STAR, 2)
    # cover of the cut {0,4,5} -> {1,2,3}: row 0 raw (it feeds 1, 2, 3), one partial sum 4 + 5 for node 1
    assert p0.owned[p0.send_idx].tolist() == [0, 4, 5] and p0.send_raw.tolist() == [True, False, False]
    assert p0.pre_dst.tolist() == [1] and p0.pre_send_counts == [0, 1]
    assert p0.owned[p0.pre_src[p0.pre_ptr[0]:p0.pre_ptr[1]]].tolist() == [4, 5]
    assert p1.halo.tolist() == [0, 4, 5] and p1.halo_raw.tolist() == [True, False, False]
    assert p1.owned[p1.pre_rows].tolist() == [1] and p1.pre_recv_counts == [1, 0]
    lay0, lay1 = p0.exchange_layout("mvc"), p1.exchange_layout("mvc")
    assert lay0.send_counts == [0, 2] and lay1.recv_counts == [2, 0]  # 2 rows instead of 3
    assert p0.exchange_layout("plain").send_counts == [0, 3]


def test_mvc_operators_by_hand():
    from graphdist.exchange.spmm import SparseAdj
    p0, p1 = build_layouts(star(), STAR, 2)
    t = SparseAdj.for_model(p0, "sage", halo="mvc").send.A.to_dense()
    assert t.tolist() == [[1, 0, 0], [0, 1, 1]]          # row 0 raw; 4 + 5 summed (mean: right = 1)
    h = SparseAdj.for_model(p1, "sage", halo="mvc").halo.A.to_dense()
    # node 1 has in-degree 3: 1/3 of raw 0 and 1/3 of the partial sum; nodes 2, 3 take raw 0
    assert torch.allclose(h, torch.tensor([[1 / 3, 1 / 3], [1.0, 0.0], [1.0, 0.0]]))
    # gcn: the sender weights each summed source by d_u^-1/2, the receiver the sum by d_v^-1/2
    t = SparseAdj.for_model(p0, "gcn", halo="mvc").send.A.to_dense()
    assert torch.allclose(t, torch.tensor([[1.0, 0, 0], [0, 1.0, 1.0]]))  # d = 1 + 0 for 4 and 5
    h = SparseAdj.for_model(p1, "gcn", halo="mvc").halo.A.to_dense()
    assert torch.allclose(h, torch.tensor([[4 ** -0.5, 4 ** -0.5], [2 ** -0.5, 0], [2 ** -0.5, 0]]))


def _simulated(plans, model, halo, h_global):
    """Every rank's ``A @ [h ; halo]`` with the exchange simulated in one process."""
    from graphdist.exchange.spmm import SparseAdj
    adjs = [SparseAdj.for_model(p, model, halo=halo) for p in plans]
    lays = [p.exchange_layout(halo) for p in plans]
    sends = []
    for p, adj in zip(plans, adjs):
        h = h_global[p.owned]
        s = adj.send.mm(h) if adj.send is not None else h[p.send_idx]
        sends.append(torch.split(s, lays[p.rank].send_counts))
    outs = []
    for p, adj in zip(plans, adjs):
        recv = torch.cat([sends[s][p.rank] for s in range(len(plans))])
        out = adj.own.mm(h_global[p.owned])
        if adj.halo is not None:
            out = out + adj.halo.mm(recv)
        outs.append(out)
    return outs


@pytest.mark.parametrize("model", ["gcn", "sage", "sym"])
def test_mvc_equals_plain_and_dense(model):
    gen = torch.Generator().manual_seed(1)
    n = 60
    g = Graph.from_edges(torch.randint(0, n, (300,), generator=gen), torch.randint(0, n, (300,), generator=gen), n,
                         symmetrize=False, self_loops=True)
    a = torch.randint(0, 4, (n,), generator=gen)
    plans = build_layouts(g, a, 4)
    assert sum(p.exchange_layout("mvc").recv_counts[s] for p in plans for s in range(4)) < \
        sum(p.num_halo for p in plans)  # the cover saves rows here
    (whole,) = build_layouts(g, torch.zeros(n, dtype=torch.long), 1)
    rows, cols, vals = whole.edges(model)
    dense = torch.zeros(n, n, dtype=torch.float64)
    dense[rows, cols] = vals
    h = torch.randn(n, 5, generator=gen)
    want = (dense @ h.double()).float()
    for halo in ("plain", "mvc"):
        for p, out in zip(plans, _simulated(plans, model, halo, h)):
            assert torch.allclose(out, want[p.owned], atol=1e-5), (model, halo, p.rank)


def test_validate_detects_mvc_asymmetry():
    plans = build_layouts(star(), STAR, 2)
    plans[0].pre_src = torch.tensor([1, 1])  # sums 4 twice where part 1 left out 4 and 5
    with pytest.raises(ArtifactError, match="are not the edges"):
        validate_layouts(plans)
    plans = build_layouts(star(), STAR, 2)
    plans[1].halo_raw = torch.tensor([True, True, False])
    with pytest.raises(ArtifactError, match="other raw rows"):
        validate_layouts(plans)


def test_reordered_part_is_the_same_graph():
    gen = torch.Generator().manual_seed(2)
    n = 50
    g = Graph.from_edges(torch.randint(0, n, (200,), generator=gen), torch.randint(0, n, (200,), generator=gen), n,
                         x=torch.randn(n, 3, generator=gen))
    plans = build_layouts(g, torch.arange(n) % 3, 3)
    h = torch.randn(n, 4, generator=gen)
    for halo in ("plain", "mvc"):
        base = _simulated(plans, "gcn", halo, h)
        for order, width in (("rcm", 64), ("degree", 64), ("community", 64), ("blocks", 1 << 20)):
            moved = [p.reordered(order, width) for p in plans]  # blocks: 4 rows of 2^20 columns each
            validate_layouts(moved)
            assert not all(torch.equal(m.owned, p.owned) for m, p in zip(moved, plans))
            for m, p, b, o in zip(moved, plans, base, _simulated(moved, "gcn", halo, h)):
                assert torch.equal(m.x, g.x[m.owned])
                pos = torch.searchsorted(p.owned, m.owned)  # p.owned is ascending
                assert torch.allclose(o, b[pos], atol=1e-6)


def test_a_kept_order_is_read_not_computed_and_only_for_its_own_rows(tmp_path, monkeypatch):
    """reordered(kept=D) keeps each part's order in D/order/ and reads it back (the same part,
    locality_order not called); a kept file of other rows, or one cut short, is computed again."""
    import numpy as np

    from graphdist.partition import order
    gen = torch.Generator().manual_seed(3)
    n = 60
    g = Graph.from_edges(torch.randint(0, n, (240,), generator=gen), torch.randint(0, n, (240,), generator=gen), n,
                         x=torch.randn(n, 3, generator=gen))
    plans = build_layouts(g, torch.arange(n) % 2, 2)
    first = [p.reordered("blocks", 1 << 20, kept=str(tmp_path)) for p in plans]
    files = sorted((tmp_path / "order").iterdir())
    assert [f.name.split("-", 1)[1] for f in files] == ["blocks-w1048576-k2-part00000.npy",
                                                         "blocks-w1048576-k2-part00001.npy"]
    assert not any(m.order_kept for m in first)
    calls = []
    real = order.locality_order
    monkeypatch.setattr(order, "locality_order", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    again = [p.reordered("blocks", 1 << 20, kept=str(tmp_path)) for p in plans]
    assert not calls and all(m.order_kept for m in again)
    for a, b in zip(first, again):
        assert torch.equal(a.owned, b.owned) and torch.equal(a.indices, b.indices) and torch.equal(a.x, b.x)
    assert not plans[0].reordered("rcm", 64, kept=str(tmp_path), write=False).order_kept  # another order
    assert len(calls) == 1 and len(list((tmp_path / "order").iterdir())) == 2  # write=False kept nothing
    np.save(files[0], plans[1].owned.numpy())  # part 1's rows under part 0's name
    np.save(files[1], first[1].owned.numpy()[:-1])  # one row short
    third = [p.reordered("blocks", 1 << 20, kept=str(tmp_path)) for p in plans]
    assert len(calls) == 3 and not any(m.order_kept for m in third)
    assert all(torch.equal(a.owned, c.owned) for a, c in zip(first, third))  # computed again, kept again
    assert all(m.order_kept for m in (p.reordered("blocks", 1 << 20, kept=str(tmp_path)) for p in plans))


def test_old_part_format_is_refused(tmp_path):
    write_parts(tmp_path, path6(), A3)
    d = torch.load(part_path(tmp_path, 0), weights_only=True)
    d["format_version"] = 1
    torch.save(d, part_path(tmp_path, 0))
    with pytest.raises(ArtifactError, match="part format 1.*rebuild"):
        load_part(tmp_path, 0)


def _two_cliques():
    """Two 10-cliques, ids interleaved (even ids one clique, odd the other), joined by one edge,
    as CSR ``(ptr, cols, n)``."""
    import numpy as np
    n = 20
    rows, cols = [], []
    for v in range(n):
        for u in range(n):
            if u != v and u % 2 == v % 2:
                rows.append(v)
                cols.append(u)
    rows += [0, 1]
    cols += [1, 0]
    o = np.lexsort((np.array(cols), np.array(rows)))
    r, c = np.array(rows)[o], np.array(cols)[o]
    ptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=n))])
    return ptr, c.astype(np.int32), n


def test_community_order_groups_communities_on_paper():
    """``--reorder community`` puts each clique's rows next to each other."""
    from graphdist.partition.order import community_order
    ptr, c, n = _two_cliques()
    perm = community_order(ptr, c, n)
    assert sorted(perm.tolist()) == list(range(n))
    halves = [set(perm[:10] % 2), set(perm[10:] % 2)]
    assert halves in ([{0}, {1}], [{1}, {0}]), perm


def test_block_order_puts_each_clique_in_its_own_block():
    """``--reorder blocks`` with room for 10 rows of input per block: two blocks, one clique
    each, every row once."""
    import torch

    from graphdist.partition import order
    ptr, c, n = _two_cliques()
    width = order.BLOCK_BYTES // (4 * 10)
    assert order.block_count(n, width) == 2
    perm = order.locality_order(torch.from_numpy(ptr), torch.from_numpy(c), n, "blocks", width).numpy()
    assert sorted(perm.tolist()) == list(range(n))
    halves = [set(perm[:10] % 2), set(perm[10:] % 2)]
    assert halves in ([{0}, {1}], [{1}, {0}]), perm


def test_block_order_of_a_directed_graph_cuts_its_symmetrised_pattern():
    """Only the upper triangle of the two cliques is stored (every edge one way): the blocks are
    still the cliques, as METIS sees ``A + A^T``."""
    import numpy as np
    import scipy.sparse as sp

    from graphdist.partition.order import cache_blocks
    ptr, c, n = _two_cliques()
    m = sp.triu(sp.csr_matrix((np.ones(c.size, dtype=np.int8), c, ptr), shape=(n, n)), k=1).tocsr()
    m.sort_indices()
    assert m.nnz * 2 == c.size
    perm = cache_blocks(m, 2)
    assert sorted(perm.tolist()) == list(range(n))
    halves = [set(perm[:10] % 2), set(perm[10:] % 2)]
    assert halves in ([{0}, {1}], [{1}, {0}]), perm
