"""The memory-lean partition path gives the same graphs, arrays and files as plain references:
block-wise generators, int32 ids, the CSR build, the partitioners' inputs and file formats,
the cut edges, and memory-mapped part files."""
from __future__ import annotations

import hashlib
import io
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from graphdist.data import Graph, csr_from_coo, load_graph

SBM = "sbm:nodes=2000,classes=5,avg_degree=8,features=3,seed=4"
RMAT = "rmat:scale=10,edge_factor=6,features=2,classes=3,seed=5"


def _reference_fingerprint(g) -> str:
    """The fingerprint as it was defined before ids were narrowed: int64 bytes, one update."""
    h = hashlib.blake2b(digest_size=8)
    h.update(np.int64(g.num_nodes).tobytes())
    for k in ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask"):
        v = getattr(g, k)
        h.update(k.encode())
        if v is not None:
            h.update(str(tuple(v.shape)).encode())
            a = v.numpy()
            h.update((a.astype(np.int64) if k in ("indptr", "indices") else a).tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("spec", [SBM, RMAT])
def test_block_wise_generators_draw_the_same_graph(spec, monkeypatch):
    import graphdist.data.synthetic as syn
    whole = load_graph(spec)
    monkeypatch.setattr(syn, "BLOCK", 777)  # many blocks: the random stream must not change
    blocks = load_graph(spec)
    for k in ("indptr", "indices", "x", "y", "train_mask"):
        assert torch.equal(getattr(whole, k), getattr(blocks, k)), k
    assert whole.indices.dtype == torch.int32 and whole.indptr.dtype == torch.int64
    assert whole.fingerprint == blocks.fingerprint == _reference_fingerprint(whole)
    assert whole.meta["symmetric"] and not whole.meta["self_loops"]


def test_csr_from_coo_matches_a_sort_and_unique_reference():
    rng = np.random.default_rng(0)
    rows, cols = rng.integers(0, 50, 3000), rng.integers(0, 70, 3000)
    indptr, indices = csr_from_coo(torch.from_numpy(rows), cols, 50, num_cols=70)
    key = np.unique(rows * 70 + cols)
    assert indices.dtype == torch.int32
    assert np.array_equal(indices.numpy(), key % 70)
    assert np.array_equal(indptr.numpy(), np.searchsorted(key // 70, np.arange(51)))
    ip, ix = csr_from_coo(np.zeros(0, np.int64), np.zeros(0, np.int64), 3)
    assert ip.tolist() == [0, 0, 0, 0] and ix.numel() == 0


def _sym_reference(g):
    n = g.num_nodes
    a = sp.csr_matrix((np.ones(g.num_edges), g.indices.numpy(), g.indptr.numpy()), shape=(n, n))
    s = (a + a.T).tolil()
    s.setdiag(0)
    s = s.tocsr()
    s.eliminate_zeros()
    s.sort_indices()
    return s


@pytest.mark.parametrize("loops", [False, True])
def test_sym_csr_of_a_symmetric_graph_is_the_graph_itself(loops):
    from partitioners.common import sym_csr
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, 300, 2000), rng.integers(0, 300, 2000)
    g = Graph.from_edges(src, dst, 300, self_loops=loops)
    s, want = sym_csr(g), _sym_reference(g)
    assert np.array_equal(s.indptr, want.indptr) and np.array_equal(s.indices, want.indices)
    if not loops:  # no copy at all
        assert np.shares_memory(s.indices, g.indices.numpy())
    d = Graph.from_edges(src, dst, 300, symmetrize=False, self_loops=loops)  # the general path
    s, want = sym_csr(d), _sym_reference(d)
    assert np.array_equal(s.indptr, want.indptr) and np.array_equal(s.indices, want.indices)


def test_gather_rows_in_blocks_equals_concatenation():
    from partitioners.common import gather_rows
    g = load_graph(SBM)
    rows = np.random.default_rng(2).permutation(g.num_nodes)[:700]
    ptr, idx = gather_rows(g.indptr, g.indices, rows, block=50)
    ip, ix = g.indptr.numpy(), g.indices.numpy()
    want = np.concatenate([ix[ip[r]:ip[r + 1]] for r in rows])
    assert idx.dtype == np.int32 and np.array_equal(idx, want)
    assert np.array_equal(np.diff(ptr), ip[rows + 1] - ip[rows])


def test_text_lines_writer_equals_join(monkeypatch):
    import partitioners.formats as fm
    monkeypatch.setattr(fm, "_BLOCK", 7)
    rng = np.random.default_rng(3)
    cnt = rng.integers(0, 6, 60) * (rng.random(60) < 0.8)
    ptr = np.r_[0, np.cumsum(cnt)]
    v = (10 ** rng.integers(0, 15, ptr[-1]) * rng.random(ptr[-1])).astype(np.int64)
    v[:3] = [0, 9, 10]
    f = io.BytesIO()
    fm.write_int_lines(f, ptr, v)
    want = "".join(" ".join(map(str, v[ptr[r]:ptr[r + 1]])) + "\n" for r in range(60))
    assert f.getvalue().decode() == want


def test_parhip_file_is_the_graph_kaminpar_reads(tmp_path):
    kaminpar = pytest.importorskip("kaminpar")
    from partitioners.common import sym_csr
    from partitioners.formats import write_parhip
    s = sym_csr(load_graph(SBM))
    vw = np.arange(s.shape[0]) % 7 + 1
    write_parhip(tmp_path / "g.parhip", s.indptr, s.indices, vw)
    kg = kaminpar.load_graph(str(tmp_path / "g.parhip"), kaminpar.GraphFileFormat.PARHIP)
    assert kg.n() == s.shape[0] and kg.m() == s.nnz
    for u in (0, 17, 999, s.shape[0] - 1):
        assert sorted(v for v, _ in kg.neighbors(u)) == s.indices[s.indptr[u]:s.indptr[u + 1]].tolist()
        assert kg.node_weight(u) == vw[u]


@pytest.mark.parametrize("symmetric", [True, False])
def test_column_nets_and_the_hmetis_file(tmp_path, symmetric):
    from partitioners.backends import column_nets
    rng = np.random.default_rng(5)
    g = Graph.from_edges(rng.integers(0, 200, 900), rng.integers(0, 200, 900), 200, symmetrize=symmetric)
    nptr, pins = column_nets(g)
    ip, ix = g.indptr.numpy(), g.indices.numpy()
    dst = np.repeat(np.arange(200), np.diff(ip))
    nets = [sorted({j} | set(dst[ix == j].tolist())) for j in range(200)]
    want = [n for n in nets if len(n) > 1]
    got = [sorted(pins[nptr[i]:nptr[i + 1]].tolist()) for i in range(nptr.size - 1)]
    assert got == want
    mtkahypar = pytest.importorskip("mtkahypar")
    from partitioners import partition
    from partitioners.quality import comm_volume
    a = partition(g, 3, method="mtkahypar", seed=0)
    from partitioners import backends
    mtk = backends._MTK["init"]
    ctx = mtk.context_from_preset(mtkahypar.PresetType.DETERMINISTIC)
    ctx.set_partitioning_parameters(3, 0.03, mtkahypar.Objective.KM1)
    hg = backends._mtkahypar_hypergraph(mtkahypar, mtk, ctx, nptr, pins, np.ones(200, np.int64), 200)
    assert hg.num_nodes() == 200 and hg.num_edges() == len(want) and hg.num_pins() == pins.size
    phg = hg.create_partitioned_hypergraph(ctx, 3, a.tolist())  # (the binding names them the other way)
    assert phg.km1() == comm_volume(g, a)  # km1 of the column nets is the halo volume


def test_cut_edges_equal_brute_force():
    from partitioners.cover import _cut_edges
    g = load_graph(RMAT)
    a = np.random.default_rng(6).integers(0, 4, g.num_nodes)
    u, v, pu, pv = _cut_edges(g, a, 4)
    src, dst = g.edge_index.numpy()
    cut = a[src] != a[dst]
    assert np.array_equal(u, src[cut]) and np.array_equal(v, dst[cut])
    assert np.array_equal(pu, a[src[cut]]) and np.array_equal(pv, a[dst[cut]])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_a_part_file_is_memory_mapped_not_copied(tmp_path):
    from graphdist.partition.parts import load_part, write_parts
    g = load_graph(SBM)
    write_parts(tmp_path, g, torch.arange(g.num_nodes) % 2, 2)
    lg = load_part(tmp_path, 1)
    assert lg.indices.dtype == torch.int32 and lg.edges("gcn")[1].dtype == torch.int64
    path = str((tmp_path / "part_00001.pt").resolve())
    spans = []
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == path:
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                spans.append((lo, hi))
    for t in (lg.indices, lg.x, lg.owned):
        assert any(lo <= t.data_ptr() < hi for lo, hi in spans), "tensor is not a page of the part file"


def _file_behind(t: torch.Tensor) -> str:
    """The file a tensor's memory is mapped from ('' for anonymous memory), from /proc/self/maps."""
    addr = t.data_ptr()
    for line in open("/proc/self/maps"):
        parts = line.split()
        lo, hi = (int(v, 16) for v in parts[0].split("-"))
        if lo <= addr < hi:
            return " ".join(parts[5:])
    return ""


def test_features_wait_on_disk_while_the_partitioner_runs(tmp_path, monkeypatch):
    """``graphdist partition``: while the partitioner runs the features are a mapped (deleted)
    file, not anonymous memory, and the artifact is byte for byte the one written without it."""
    from graphdist.partition import budget
    from graphdist.partition.tools import PartitionConfig, features_on_disk, partition_to_artifact
    import partitioners

    behind = {}
    real = partitioners.partition

    def spy(g, *a, **kw):  # where the features live while the partitioner runs
        behind["now"] = _file_behind(g.x)
        return real(g, *a, **kw)
    monkeypatch.setattr(partitioners, "partition", spy)
    spec = "sbm:nodes=30000,classes=4,avg_degree=6,features=600,seed=1"  # 72 MB of features
    files = {}
    for spill, name in ((10**12, "kept"), (budget.SPILL_BYTES, "spilled")):
        monkeypatch.setattr(budget, "SPILL_BYTES", spill)
        partition_to_artifact(PartitionConfig(spec=spec, parts=2, method="fennel", out=str(tmp_path / name)))
        files[name] = {p.name: p.read_bytes() for p in (tmp_path / name).iterdir() if p.name != "meta.json"}
        behind[name] = behind.pop("now")
    assert files["kept"] == files["spilled"] and len(files["kept"]) == 3
    assert ".graphdist-features-" in behind["spilled"] and "(deleted)" in behind["spilled"], behind
    assert ".graphdist-features-" not in behind["kept"]
    g = load_graph(spec)
    x0 = g.x.clone()
    with features_on_disk(g, tmp_path):
        assert torch.equal(g.x, x0) and "(deleted)" in _file_behind(g.x)
    assert not list(tmp_path.glob(".graphdist-features-*"))  # unlinked at once
