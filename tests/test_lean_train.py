"""The memory-lean training path builds exactly the operators of the plain references: the
normalised CSR without int64 sort keys, the transpose by counting sort (stored once when the
block is symmetric), the reordered part, and a part that shares no storage with its file."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from graphdist.data import Graph
from graphdist.partition.parts import load_part, write_parts
from graphdist.partition.layout import build_layouts
from graphdist.exchange.spmm import SparseAdj
from graphdist.sparse import coo_to_csr


def _graph(symmetric: bool) -> Graph:
    """A random graph with self-loops, a duplicate-free CSR and isolated nodes (54..59)."""
    gen = torch.Generator().manual_seed(7)
    n = 60
    src, dst = torch.randint(0, 54, (400,), generator=gen), torch.randint(0, 54, (400,), generator=gen)
    src, dst = torch.cat([src, torch.arange(10)]), torch.cat([dst, torch.arange(10)])  # 10 self-loops
    return Graph.from_edges(src, dst, n, symmetrize=symmetric, self_loops=True,
                            x=torch.randn(n, 3, generator=gen))


def _same_csr(t: torch.Tensor, ptr, cols, vals) -> None:
    assert torch.equal(t.crow_indices().to(torch.int64), ptr.to(torch.int64))
    assert torch.equal(t.col_indices().to(torch.int64), cols.to(torch.int64))
    assert torch.equal(t.values().view(torch.int32), vals.to(torch.float32).view(torch.int32))  # bit for bit


def _reference_blocks(lg, model):
    """Owned and halo blocks of ``lg.edges(model)`` (the COO path with lexicographic sorts)."""
    rows, cols, vals = lg.edges(model)
    n = lg.num_owned
    own = cols < n
    out = {}
    for name, keep, shift, width in (("own", own, 0, n), ("halo", ~own, n, lg.num_cols - n)):
        r, c, v = rows[keep], cols[keep] - shift, vals[keep]
        out[name] = (coo_to_csr(r, c, v, n, width), coo_to_csr(c, r, v, width, n))
    return out


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("model", ["gcn", "sage", "sym"])
@pytest.mark.parametrize("k", [1, 3])
def test_adjacency_is_the_reference_bit_for_bit(symmetric, model, k):
    g = _graph(symmetric)
    a = torch.arange(g.num_nodes) % k
    for lg in build_layouts(g, a, k):
        lg = lg.reordered("rcm")
        ref = _reference_blocks(lg, model)
        for halo in ("plain", "mvc"):
            adj = SparseAdj.for_model(lg, model, halo=halo)
            (fwd, bwd) = ref["own"]
            _same_csr(adj.own.A, *fwd)
            _same_csr(adj.own.AT, *bwd)
            if halo == "plain":
                if adj.halo is None:
                    assert ref["halo"][0][1].numel() == 0
                else:
                    _same_csr(adj.halo.A, *ref["halo"][0])
                    _same_csr(adj.halo.AT, *ref["halo"][1])
            # shared storage exactly when the owned block is its own transpose
            dense = adj.own.A.to_dense()
            assert (adj.own.AT is adj.own.A) == bool(torch.equal(dense, dense.t()))
    if symmetric and model in ("gcn", "sym") and k == 1:
        assert adj.own.AT is adj.own.A  # an undirected graph's GCN block is stored once


def test_reordered_csr_matches_a_per_row_sort():
    g = _graph(False)
    for lg in build_layouts(g, torch.arange(g.num_nodes) % 3, 3):
        m = lg.reordered("rcm")
        perm = torch.searchsorted(lg.owned, m.owned)  # old row of each new row (owned ascending)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.numel())
        col_map = torch.cat([inv, torch.arange(lg.num_owned, lg.num_cols)])
        assert m.indices.dtype == lg.indices.dtype == torch.int32
        for i, old in enumerate(perm.tolist()):
            want = sorted(col_map[lg.indices[lg.indptr[old]:lg.indptr[old + 1]].long()].tolist())
            assert m.indices[m.indptr[i]:m.indptr[i + 1]].tolist() == want


def test_reordered_part_shares_no_storage_with_its_file(tmp_path):
    g = _graph(True)
    write_parts(tmp_path, g, torch.arange(g.num_nodes) % 2, 2)
    lg = load_part(tmp_path, 1)
    m = lg.reordered("rcm")
    mine = {t.untyped_storage().data_ptr() for t in m.to_dict().values()
            if isinstance(t, torch.Tensor) and t.numel()}
    file = {t.untyped_storage().data_ptr() for t in lg.to_dict().values()
            if isinstance(t, torch.Tensor) and t.numel()}
    assert not mine & file
    lean = m.without_edges()
    assert lean.indices.numel() == 0 and m.indices.numel() > 0 and lean.x is m.x


def test_normalised_csr_equals_edges():
    g = _graph(False)
    (lg,) = build_layouts(g, torch.zeros(g.num_nodes, dtype=torch.int64), 1)
    for model in ("gcn", "sage", "sym"):
        ptr, cols, vals = lg.normalised_csr(model)
        rows, c, v = lg.edges(model)
        assert np.array_equal(np.repeat(np.arange(lg.num_owned), np.diff(ptr)), rows.numpy())
        assert np.array_equal(cols, c.numpy()) and np.array_equal(vals, v.to(torch.float32).numpy())
