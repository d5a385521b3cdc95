"""Every partitioner returns a valid, balanced, deterministic assignment; the volume
refinement's gains are exact; bad input is one clear error."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from graphdist.data import load_graph
from graphdist.data.graph import Graph
from graphdist.errors import USER_ERRORS
from partitioners import METHODS, MissingBackendError, PartitionError, partition, quality
from partitioners.quality import edge_cut
from partitioners.common import make_weights
from partitioners.refine import VolumeRefiner


def grid(rows: int, cols: int) -> Graph:
    idx = np.arange(rows * cols).reshape(rows, cols)
    src = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    dst = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    return Graph.from_edges(src, dst, rows * cols)


GRAPHS = {
    "sbm": lambda: load_graph("sbm:nodes=1500,classes=4,avg_degree=10,features=2,seed=1"),
    "rmat": lambda: load_graph("rmat:scale=11,edge_factor=8,seed=2"),
    "grid": lambda: grid(30, 40),
}
_cache: dict = {}


def graph(name: str) -> Graph:
    if name not in _cache:
        _cache[name] = GRAPHS[name]()
    return _cache[name]


def _has(mod: str) -> bool:
    try:
        importlib.import_module(mod)
        return True
    except ImportError:
        return False


BACKEND = {"metis": "pymetis", "kaminpar": "kaminpar", "mtkahypar": "mtkahypar", "auto": "pymetis"}
# what each method promises to balance by default
NODE_BALANCED = {"random", "ldg", "fennel", "metis", "kaminpar", "mtkahypar", "auto"}


@pytest.mark.parametrize("gname", list(GRAPHS))
@pytest.mark.parametrize("method", METHODS)
def test_valid_balanced_deterministic(method, gname):
    if method in BACKEND and not _has(BACKEND[method]):
        pytest.skip(f"{BACKEND[method]} not installed")
    g = graph(gname)
    k = 4 if method == "mtkahypar" else 8
    a = partition(g, k, method=method, seed=3)
    assert a.dtype == torch.int64 and a.shape == (g.num_nodes,)
    assert int(a.min()) >= 0 and int(a.max()) < k
    assert torch.equal(a, partition(g, k, method=method, seed=3)), "not deterministic for a seed"
    q = quality(g, a, k=k)
    slack = 1.0 / (g.num_nodes / k)  # one node over an exact split
    if method in NODE_BALANCED:
        assert q["node_imbalance"] <= 0.03 + slack + 1e-9, q
    if method == "auto":  # the default balances nodes AND edges
        assert q["edge_imbalance"] <= 0.03 + 1e-9, q
    if method not in ("random", "block"):  # better than hashing
        assert q["comm_volume"] < quality(g, partition(g, k, method="random"))["comm_volume"]


@pytest.mark.parametrize("method", ["ldg", "fennel", "metis", "auto"])
def test_edge_balance(method):
    g = graph("rmat")
    a = partition(g, 4, method=method, balance="edges")
    q = quality(g, a, k=4)
    assert q["edge_imbalance"] <= 0.05, q


@pytest.mark.parametrize("method", ["ldg", "metis", "auto"])
def test_both_balanced_on_power_law(method):
    g = graph("rmat")
    a = partition(g, 8, method=method, balance="both")
    q = quality(g, a, k=8)
    assert q["node_imbalance"] <= 0.05 and q["edge_imbalance"] <= 0.05, q


def test_auto_beats_node_balanced_metis_on_balance_and_grid_volume():
    g = graph("rmat")
    m = quality(g, partition(g, 8, method="metis"), k=8)
    a = quality(g, partition(g, 8), k=8)
    assert m["edge_imbalance"] > 0.2  # METIS balances nodes only: hubs pile up
    assert a["edge_imbalance"] <= 0.03 and a["node_imbalance"] <= 0.03
    gg = graph("grid")
    assert quality(gg, partition(gg, 8))["comm_volume"] <= quality(gg, partition(gg, 8, method="metis"))["comm_volume"]


def test_block_on_a_grid_is_countable_by_hand():
    # 8 x 8 grid, ids row-major: block k=2 cuts between rows 3 and 4 -> 8 undirected edges
    g = grid(8, 8)
    a = partition(g, 2, method="block")
    assert a.tolist() == [0] * 32 + [1] * 32
    q = quality(g, a)
    assert q["edge_cut"] == 16 and q["comm_volume"] == 16 and q["max_recv"] == 8
    # METIS finds the same straight cut (volume can't be lower for a balanced bisection)
    if _has("pymetis"):
        assert quality(g, partition(g, 2, method="metis"))["comm_volume"] == 16


def test_random_is_exactly_node_balanced_and_seeded():
    g = grid(10, 10)
    a = partition(g, 7, method="random", seed=1)
    counts = torch.bincount(a, minlength=7)
    assert counts.max() - counts.min() <= 1
    assert not torch.equal(a, partition(g, 7, method="random", seed=2))


def test_k1_and_node_weights():
    g = grid(5, 5)
    assert partition(g, 1).tolist() == [0] * 25
    w = torch.ones(25)
    w[:5] = 5.0  # first row five times heavier
    a = partition(g, 2, method="ldg", node_weights=w, imbalance=0.1)
    loads = torch.bincount(a, weights=w, minlength=2)
    assert loads.max() <= 1.1 * w.sum() / 2 + 5


def test_refiner_gains_are_exact():
    rng = np.random.default_rng(0)
    n, k = 60, 4
    g = Graph.from_edges(rng.integers(0, n, 200), rng.integers(0, n, 200), n, symmetrize=False)
    a = rng.integers(0, k, n)
    r = VolumeRefiner(g, k, make_weights(g, k, 0.03, "both"))
    phi = r.phi(a)
    assert r.volume(a, phi) == quality(g, a, k=k)["comm_volume"]
    cand = np.arange(n)
    gains = r.gains(a, phi, cand)
    for v in range(0, n, 7):
        for q in range(k):
            if q == a[v]:
                continue
            b = a.copy()
            b[v] = q
            assert gains[v, q] == quality(g, a, k=k)["comm_volume"] - quality(g, b, k=k)["comm_volume"]


def test_refinement_never_breaks_caps_and_lowers_volume():
    g = graph("sbm")
    k = 4
    w = make_weights(g, k, 0.03, "both")
    a0 = partition(g, k, method="random", seed=0).numpy()
    r = VolumeRefiner(g, k, w)
    a = r.run(a0)
    assert (r.loads(a) <= np.asarray(w.caps)[:, None] + 1e-9).all()
    assert r.volume(a) < r.volume(a0)


@pytest.mark.parametrize("kwargs, match", [
    ({"k": 0}, "k=0 must be between 1 and the number of nodes N=25"),
    ({"k": 26}, "k=26 must be between 1"),
    ({"k": 2, "method": "nope"}, "unknown partition method 'nope'"),
    ({"k": 2, "balance": "weird"}, "unknown balance 'weird'"),
    ({"k": 2, "imbalance": -0.1}, "imbalance -0.1"),
    ({"k": 2, "node_weights": torch.ones(3)}, "node_weights has shape"),
])
def test_bad_input(kwargs, match):
    g = grid(5, 5)
    k = kwargs.pop("k")
    with pytest.raises(PartitionError, match=match) as ei:
        partition(g, k, **kwargs)
    assert isinstance(ei.value, USER_ERRORS)  # the CLI prints it as one line, exit 2


def test_missing_backend_names_pip_command(monkeypatch):
    real = importlib.import_module

    def fake(name, *a, **kw):
        if name == "kaminpar":
            raise ImportError("No module named 'kaminpar'")
        return real(name, *a, **kw)

    monkeypatch.setattr(importlib, "import_module", fake)
    with pytest.raises(MissingBackendError, match="pip install kaminpar"):
        partition(grid(5, 5), 2, method="kaminpar")


class _FakeMetis:
    """A METIS library whose idx_t is 16-bit: METIS_SetDefaultOptions writes 40 int16 words."""

    def METIS_SetDefaultOptions(self, p):  # noqa: N802 - the C symbol's name
        import ctypes
        ctypes.memmove(p, (ctypes.c_int16 * 40)(*([-1] * 40)), 40 * 2)
        return 1


def test_metis_width_selftest_detects_a_foreign_build(monkeypatch):
    from partitioners import metis
    pytest.importorskip("pymetis")
    libs = metis._metis_libs()
    assert libs, metis._METIS["why"]
    for idx, (lib, layout) in libs.items():  # every build found passes, with its own widths
        why, got, lay = metis._metis_selftest(lib)
        assert why == "" and np.dtype(got) == idx and lay == layout
    why, idx, _ = metis._metis_selftest(_FakeMetis())
    assert "neither 32- nor 64-bit (2-byte options seen)" in why and idx is None
    monkeypatch.setitem(metis._METIS, "libs", {})
    monkeypatch.setitem(metis._METIS, "why", why)
    with pytest.raises(MissingBackendError, match="2-byte options seen.*cmeel-metis==5.2.1.1"):
        partition(grid(4, 4), 2, method="metis", balance="both")


def test_metis_32_and_64_bit_builds_cut_alike():
    """The 32-bit build (cmeel-metis) and pymetis' 64-bit one: both balanced, cuts within 15%."""
    from partitioners import metis
    from partitioners.common import sym_csr
    libs = metis._metis_libs()
    if len(libs) < 2:
        pytest.skip("needs both METIS builds (pymetis and cmeel-metis)")
    g = grid(30, 30)
    s = sym_csr(g)
    cuts = {}
    for idx in libs:
        monkey = {i: v for i, v in libs.items() if i == idx}
        saved = metis._METIS["libs"]
        metis._METIS["libs"] = monkey
        try:
            a = metis.metis_kway(s, 4, np.ones((900, 1), dtype=np.int64), imbalance=0.03, seed=0)
        finally:
            metis._METIS["libs"] = saved
        assert np.bincount(a, minlength=4).max() <= 1.03 * 900 / 4 + 1
        cuts[idx.itemsize] = edge_cut(g, torch.from_numpy(a))
    assert max(cuts.values()) <= 1.15 * min(cuts.values()), cuts


@pytest.mark.parametrize("method", ["metis", "auto"])
def test_metis_on_disk_gives_the_same_partition(monkeypatch, tmp_path, method):
    """When METIS's in-memory levels would not fit (``MemAvailable`` patched low), the 5.2 build
    runs with ONDISK, in a temporary folder it leaves removed, the caller's working directory
    restored, and returns the partition the in-memory run returns."""
    import ctypes
    import os

    from partitioners import metis
    lib, idx = metis._metis_lib()
    if lib is None or "ondisk" not in metis._metis_libs()[idx][1]:
        pytest.skip("needs cmeel-metis (METIS 5.2, ONDISK)")
    at = metis._metis_libs()[idx][1]["ondisk"]
    seen = []
    real = lib.METIS_PartGraphKway

    class Spy:  # records the ONDISK option and the working directory of each call
        def __getattr__(self, name):
            return getattr(lib, name)

        def METIS_PartGraphKway(self, *a):
            opts = ctypes.cast(a[10], ctypes.POINTER(ctypes.c_int32 if idx == np.int32 else ctypes.c_int64))
            seen.append((int(opts[at]), os.getcwd()))
            return real(*a)
    monkeypatch.setattr(metis, "_metis_lib", lambda *a: (Spy(), idx))
    monkeypatch.setattr(metis, "scratch_dir", lambda: str(tmp_path))  # on disk, whatever /tmp is here
    monkeypatch.chdir(tmp_path)
    g = load_graph("rmat:scale=12,edge_factor=8,seed=3")
    parts = {}
    for avail in (10**15, 1):
        monkeypatch.setattr(metis, "mem_available", lambda a=avail: a)
        parts[avail] = partition(g, 4, method=method, seed=0).numpy()
    assert np.array_equal(parts[1], parts[10**15])
    assert seen[0][0] <= 0 and seen[0][1] == str(tmp_path) and seen[-1][0] == 1 and "graphdist-metis-" in seen[-1][1]
    assert not os.path.exists(seen[-1][1]) and os.getcwd() == str(tmp_path)


def test_metis_levels_go_to_a_folder_on_disk(monkeypatch, tmp_path):
    """METIS' on-disk levels need a disk: $TMPDIR, else the working directory when $TMPDIR is
    memory (tmpfs); with both in memory METIS keeps its levels in memory (on disk would save nothing)."""
    import os
    import tempfile

    from partitioners import metis
    monkeypatch.chdir(tmp_path)
    real = metis._fs_type
    assert metis._fs_type("/proc") == "proc"
    assert metis.scratch_dir() == tempfile.gettempdir() or real(tempfile.gettempdir()) in metis._MEMORY_FS
    memory = {tempfile.gettempdir()}  # everything else on disk, whatever this machine mounts
    monkeypatch.setattr(metis, "_fs_type", lambda p: "tmpfs" if p in memory else "ext4")
    assert metis.scratch_dir() == os.getcwd()
    assert metis.metis_ondisk(10**9, available=10**9)
    memory.add(os.getcwd())
    assert metis.scratch_dir() is None and not metis.metis_ondisk(10**9, available=10**9)


# ------------------------------------------------------------------ rows moved (pre/post aggregation)
def test_role_bound_is_an_upper_bound_of_moved_rows_and_exact_in_gains():
    from partitioners.moved import moved_pins, roles
    from partitioners.quality import moved_rows
    rng = np.random.default_rng(4)
    n, k = 80, 4
    g = Graph.from_edges(rng.integers(0, n, 300), rng.integers(0, n, 300), n, symmetrize=False)
    a = rng.integers(0, k, n)
    w = make_weights(g, k, 0.03, "both")
    for raw in (roles(g, a, k), np.ones(n, dtype=bool), rng.random(n) < 0.5):
        r = VolumeRefiner(g, k, w, pins=moved_pins(g, raw))
        phi = r.phi(a)
        assert r.volume(a, phi) >= moved_rows(g, a, k)
        gains = r.gains(a, phi, np.arange(n))
        for v in range(0, n, 9):  # the refiner's gains are exact for the bound
            for q in range(k):
                if q != a[v]:
                    b = a.copy()
                    b[v] = q
                    assert gains[v, q] == r.volume(a) - r.volume(b)
    # all raw = the plain halo volume
    assert VolumeRefiner(g, k, w, pins=moved_pins(g, np.ones(n, dtype=bool))).volume(a) == \
        quality(g, a, k=k)["comm_volume"]


def test_refine_moved_never_worse_and_keeps_caps():
    from partitioners.moved import moved_key, refine_moved
    g = graph("rmat")
    k = 8
    w = make_weights(g, k, 0.03, "both")
    r = VolumeRefiner(g, k, w)
    a = r.run(partition(g, k, method="ldg", seed=1, balance="both").numpy(), rounds=4)
    b = refine_moved(g, a, k, w, rounds=10, alternations=2)
    assert moved_key(g, b, k) <= moved_key(g, a, k)
    assert (r.loads(b) <= np.asarray(w.caps)[:, None] + 1e-9).all()


def test_auto_chooses_by_moved_rows():
    g = graph("rmat")
    q_auto = quality(g, partition(g, 8), k=8)
    q_vol = quality(g, partition(g, 8, initial="metis-vol@0.3", alternations=0), k=8)
    assert q_auto["moved_rows"] <= q_vol["moved_rows"]
    assert q_auto["node_imbalance"] <= 0.03 + 1e-9 and q_auto["edge_imbalance"] <= 0.03 + 1e-9


def test_sparse_pin_counts_match_dense(monkeypatch):
    import partitioners.refine as pr
    rng = np.random.default_rng(5)
    n, k = 200, 6
    g = Graph.from_edges(rng.integers(0, n, 900), rng.integers(0, n, 900), n)
    w = make_weights(g, k, 0.03, "both")
    a0 = rng.integers(0, k, n)
    dense = VolumeRefiner(g, k, w)
    phi_d = dense.phi(a0)
    monkeypatch.setattr(pr, "DENSE_PIN_CELLS", 0)  # every PinCounts from here on is the sorted-key kind
    sparse = VolumeRefiner(g, k, w)
    phi_s = sparse.phi(a0)
    assert phi_d.flat is not None and phi_s.flat is None
    keys = np.arange(n * k)
    assert np.array_equal(phi_d.get(keys), phi_s.get(keys))
    assert phi_d.volume() == phi_s.volume() == quality(g, a0, k=k)["comm_volume"]
    cand = np.arange(n)
    assert np.array_equal(dense.gains(a0, phi_d, cand), sparse.gains(a0, phi_s, cand))
    assert np.array_equal(dense.run(a0, seed=1), sparse.run(a0, seed=1))


@pytest.mark.parametrize("start", ["ldg", "random"])
def test_vectorised_rebalance_from_a_bad_start(start):
    g = graph("rmat")
    k = 8
    w = make_weights(g, k, 0.03, "both")
    caps = np.asarray(w.caps)[:, None]
    r = VolumeRefiner(g, k, w)
    a = partition(g, k, method=start).numpy()  # nodes balanced, R-MAT hubs pile up in-edges
    assert (r.loads(a) > caps).any()
    assert r.rebalance(a)
    assert (r.loads(a) <= caps + 1e-9).all()
    # from node-balanced METIS (4x the edge cap on one part) the overload drops to near zero
    b = partition(g, k, method="metis").numpy()
    before = np.maximum(r.loads(b) / caps - 1, 0).sum()
    r.rebalance(b)
    assert np.maximum(r.loads(b) / caps - 1, 0).sum() < 0.01 * before


def test_hypergraph_pins_are_exact_beyond_3e9_nodes():
    # mtkahypar's net/pin list used to be np.unique(src * n + dst): at n = 3.5e9 that key
    # overflows int64 and distinct pairs collide; unique_pairs sorts the pairs themselves
    from partitioners.backends import unique_pairs
    n = 3_500_000_000
    a = np.array([n - 1, 5, n - 1, 5, 2**40, n - 1], dtype=np.int64)
    b = np.array([n - 2, 7, n - 2, 6, 3, 0], dtype=np.int64)
    want = [(5, 6), (5, 7), (n - 1, 0), (n - 1, n - 2), (2**40, 3)]
    with np.errstate(over="ignore"):
        key = np.unique(a * n + b)
    assert list(zip((key // n).tolist(), (key % n).tolist())) != want  # the old key misreads pairs
    net, pin = unique_pairs(a, b)
    assert list(zip(net.tolist(), pin.tolist())) == want
