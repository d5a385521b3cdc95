"""Optional partitioning libraries, imported lazily: METIS (pymetis), KaMinPar, Mt-KaHyPar.

    metis      k-way multilevel (forced: pymetis would use recursive bisection for k <= 8),
               minimises the undirected edge cut (or volume). Called through the
               ``METIS_PartGraphKway`` symbol of pymetis' own extension, so several
               constraints (nodes AND in-edges) are balanced at once, which pymetis' API lacks.
    kaminpar   shared-memory multilevel graph partitioner (fast, large k), edge cut.
    mtkahypar  hypergraph partitioner on the *column-net* model: net j = {j} ∪ {i : j -> i}.
               Its km1 objective, sum_j (lambda_j - 1), is exactly the halo volume.

KaMinPar and Mt-KaHyPar balance one weight; for ``balance="both"`` they balance the blend
``node_w / mean(node_w) + edge_w / mean(edge_w)``, which bounds neither. A missing library raises :class:`MissingBackendError` with the pip command.
"""
from __future__ import annotations

import importlib
import os
import tempfile

import numpy as np

from partitioners.common import Weights, in_csr, sym_csr
from partitioners.errors import MissingBackendError

__all__ = ["metis_partition", "kaminpar_partition", "mtkahypar_partition", "single_weight"]

_PIP = {"pymetis": "pip install pymetis", "kaminpar": "pip install kaminpar",
        "mtkahypar": "pip install mtkahypar"}


def _import(name: str, method: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise MissingBackendError(
            f"method '{method}' needs the '{name}' package, which is not installed ({e}); "
            f"install it with: {_PIP[name]}") from None


def single_weight(weights: Weights, scale: int = 16, positive: bool = True) -> np.ndarray:
    """One integer vertex weight: the constraint itself when it is integral, else the
    normalised blend ``scale * mean_c(w_c / mean(w_c))``; ``positive`` clamps to >= 1."""
    if len(weights.w) == 1 and np.allclose(weights.w[0], np.round(weights.w[0])):
        v = np.round(weights.w[0]).astype(np.int64)
    else:
        blend = sum(w / max(float(w.mean()), 1e-12) for w in weights.w) / len(weights.w)
        v = np.round(blend * scale).astype(np.int64)
    return np.maximum(v, 1) if positive else v


def _threads() -> int:
    return max(1, min(os.cpu_count() or 1, int(os.environ.get("GRAPHDIST_THREADS", "1"))))


_OBJ = {"cut": 0, "vol": 1}
_METIS_NOPTIONS, _OPT_OBJTYPE, _OPT_SEED, _OPT_UFACTOR = 40, 1, 8, 16


_METIS: dict = {}


def _ptr(x: np.ndarray):
    import ctypes
    return x.ctypes.data_as(ctypes.c_void_p)


def _metis_selftest(lib) -> str:
    """Check the widths this module assumes for the library's ``idx_t`` (64-bit) and
    ``real_t`` (32-bit); returns "" when they hold, else what was seen.

    ``METIS_SetDefaultOptions`` writes ``METIS_NOPTIONS`` idx_t values (all -1) into a buffer
    twice that size in int64: exactly 40 int64 words change when idx_t is 64-bit, 20 when it is
    32-bit. Then a 4-node path cut in 2 with ``ubvec`` in float32 must come back as the
    balanced cut ``[0, 0, 1, 1]`` with edge cut 1 (a 64-bit real_t misreads ubvec and returns
    an error or a degenerate cut)."""
    opts = np.full(2 * _METIS_NOPTIONS, 7, dtype=np.int64)
    lib.METIS_SetDefaultOptions(_ptr(opts))
    written = int((opts != 7).sum())
    if written != _METIS_NOPTIONS:
        return f"idx_t is not 64-bit ({written * 8 // _METIS_NOPTIONS}-byte options seen)"
    n = 4
    xadj, adj = np.array([0, 1, 3, 5, 6], np.int64), np.array([1, 0, 2, 1, 3, 2], np.int64)
    one, two, nv = np.array([1], np.int64), np.array([2], np.int64), np.array([n], np.int64)
    vw, ub = np.ones(n, np.int64), np.full(2, 1.03, np.float32)
    obj, part = np.zeros(2, np.int64), np.zeros(2 * n, np.int64)
    rc = lib.METIS_PartGraphKway(_ptr(nv), _ptr(one), _ptr(xadj), _ptr(adj), _ptr(vw), None, None,
                                 _ptr(two), None, _ptr(ub), _ptr(opts), _ptr(obj), _ptr(part))
    got = part[:n].tolist()
    if rc != 1 or obj[0] != 1 or sorted(got) != [0, 0, 1, 1] or got[0] != got[1]:
        return f"real_t is not 32-bit (4-node path probe: status {rc}, parts {got}, cut {int(obj[0])})"
    return ""


def _metis_lib():
    """``METIS_PartGraphKway`` from pymetis' own extension, once its ``idx_t``/``real_t`` widths
    passed :func:`_metis_selftest`; None when the symbol is not reachable or the widths differ
    (then the pymetis API is used, which balances one constraint; ``_METIS["why"]`` says why)."""
    if "lib" not in _METIS:
        import ctypes
        import glob
        pymetis = _import("pymetis", "metis")
        lib, why = None, "no _internal*.so with METIS_PartGraphKway next to pymetis"
        for so in glob.glob(os.path.join(os.path.dirname(pymetis.__file__), "_internal*.so")):
            try:
                lib = ctypes.CDLL(so)
                lib.METIS_PartGraphKway  # noqa: B018 - raises AttributeError if absent
                lib.METIS_SetDefaultOptions.restype = ctypes.c_int
                lib.METIS_PartGraphKway.restype = ctypes.c_int
            except (OSError, AttributeError):
                lib = None
                continue
            why = _metis_selftest(lib)
            if why:
                lib = None
            break
        _METIS["lib"], _METIS["why"] = lib, "" if lib is not None else why
    return _METIS["lib"]


def metis_kway(s, k: int, vwgt: np.ndarray, *, imbalance: float, seed: int,
               objective: str = "cut", adjwgt: np.ndarray | None = None) -> np.ndarray:
    """METIS k-way on symmetric CSR ``s`` with ``vwgt [N, ncon]`` integer weights (several
    constraints balanced at once, each to ``1 + imbalance``); ``objective`` cut or vol;
    ``adjwgt`` optional integer edge weights (aligned with ``s.indices``, symmetric) for the cut."""
    n, ncon = vwgt.shape
    lib = _metis_lib()
    if lib is None:
        if ncon != 1 or objective != "cut" or adjwgt is not None:
            raise MissingBackendError(f"multi-constraint/volume METIS needs pymetis' METIS_PartGraphKway "
                                      f"with 64-bit idx_t and 32-bit real_t, and this build fails that "
                                      f"check ({_METIS['why']}); install it with: pip install pymetis==2025.2.2")
        import warnings
        pymetis = _import("pymetis", "metis")
        opts = pymetis.Options(seed=int(seed), ufactor=max(1, int(round(1000 * imbalance))))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            _, parts = pymetis.part_graph(k, xadj=s.indptr.astype(np.int64), adjncy=s.indices.astype(np.int64),
                                          vweights=vwgt[:, 0], recursive=False, options=opts)
        return np.asarray(parts, dtype=np.int64)
    idx = np.int64
    ptr = _ptr
    opts = np.full(_METIS_NOPTIONS, -1, dtype=idx)
    lib.METIS_SetDefaultOptions(ptr(opts))
    opts[_OPT_OBJTYPE] = _OBJ[objective]
    opts[_OPT_SEED] = int(seed)
    opts[_OPT_UFACTOR] = max(1, int(round(1000 * imbalance)))
    nv, nc, nparts = np.array([n], idx), np.array([ncon], idx), np.array([k], idx)
    xadj = np.ascontiguousarray(s.indptr, dtype=idx)
    adj = np.ascontiguousarray(s.indices, dtype=idx)
    vw = np.ascontiguousarray(vwgt, dtype=idx).reshape(-1)
    ub = np.full(ncon, 1.0 + imbalance, dtype=np.float32)
    obj, part = np.zeros(1, idx), np.zeros(n, idx)
    ew = None if adjwgt is None else np.ascontiguousarray(np.maximum(adjwgt, 1), dtype=idx)
    rc = lib.METIS_PartGraphKway(ptr(nv), ptr(nc), ptr(xadj), ptr(adj), ptr(vw), None,
                                 None if ew is None else ptr(ew),
                                 ptr(nparts), None, ptr(ub), ptr(opts), ptr(obj), ptr(part))
    if rc != 1:  # METIS_OK
        raise RuntimeError(f"METIS_PartGraphKway failed with status {rc} (n={n}, k={k})")
    return part


def metis_partition(graph, k: int, weights: Weights, *, imbalance: float, seed: int,
                    objective: str = "cut", hub_cut: bool = False) -> np.ndarray:
    """METIS k-way (``PartGraphKway``, never recursive bisection) on the undirected graph,
    balancing every constraint of ``weights`` at once (multi-constraint METIS). ``hub_cut``:
    edge ``{u, v}`` weighs ``64 / max(deg u, deg v)`` (at least 1) in the cut, so edges at hubs
    are cheap to cut: with pre/post aggregation a hub's cut edges cost one row per part, not
    one per edge."""
    _import("pymetis", "metis")
    n = int(graph.num_nodes)
    if k == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    s = sym_csr(graph)
    vw = np.stack([np.round(w).astype(np.int64) if np.allclose(w, np.round(w))
                   else np.round(16 * w / max(float(w.mean()), 1e-12)).astype(np.int64)
                   for w in weights.w], 1)
    ew = None
    if hub_cut:
        deg = np.diff(s.indptr)
        rows = np.repeat(np.arange(n), deg)
        ew = np.maximum(np.round(64.0 / np.maximum(deg[rows], deg[s.indices])), 1).astype(np.int64)
    return metis_kway(s, k, vw, imbalance=imbalance, seed=seed, objective=objective, adjwgt=ew)


def _write_metis(path: str, s, vw: np.ndarray) -> None:
    """METIS text format with vertex weights (fmt 010), 1-based neighbour ids."""
    n = s.shape[0]
    with open(path, "w") as f:
        f.write(f"{n} {s.nnz // 2} 010\n")
        ptr, ind = s.indptr, (s.indices.astype(np.int64) + 1).astype(str)
        chunk = 1 << 16
        for r0 in range(0, n, chunk):
            r1 = min(n, r0 + chunk)
            lines = [str(vw[r]) + (" " + " ".join(ind[ptr[r]:ptr[r + 1]]) if ptr[r + 1] > ptr[r] else "")
                     for r in range(r0, r1)]
            f.write("\n".join(lines) + "\n")


def kaminpar_partition(graph, k: int, weights: Weights, *, imbalance: float, seed: int,
                       preset: str = "default") -> np.ndarray:
    """KaMinPar (edge cut, one vertex weight). The graph goes through a temporary METIS file
    because the binding has no in-memory constructor."""
    kaminpar = _import("kaminpar", "kaminpar")
    n = int(graph.num_nodes)
    if k == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    s = sym_csr(graph)
    with tempfile.TemporaryDirectory(prefix="graphdist-kaminpar-") as d:
        path = os.path.join(d, "g.metis")
        _write_metis(path, s, single_weight(weights))
        g = kaminpar.load_graph(path, kaminpar.GraphFileFormat.METIS)
    kaminpar.reseed(int(seed))
    ctx = kaminpar.context_by_name(preset) if preset != "default" else kaminpar.default_context()
    solver = kaminpar.KaMinPar(_threads(), ctx)
    parts = solver.compute_partition(g, int(k), float(imbalance))
    return np.asarray(parts, dtype=np.int64)


def unique_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct pairs ``(a_i, b_i)`` sorted by ``(a, b)``, without an ``a * n + b`` key (which
    overflows int64 above ~3e9 nodes)."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    o = np.lexsort((b, a))
    a, b = a[o], b[o]
    keep = np.ones(a.size, dtype=bool)
    keep[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return a[keep], b[keep]


_MTK = {}


def mtkahypar_partition(graph, k: int, weights: Weights, *, imbalance: float, seed: int,
                        preset: str = "default") -> np.ndarray:
    """Mt-KaHyPar km1 on the column-net hypergraph (km1 == halo volume)."""
    mtkahypar = _import("mtkahypar", "mtkahypar")
    n = int(graph.num_nodes)
    if k == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    if "init" not in _MTK:  # the thread pool can be initialised once per process
        _MTK["init"] = mtkahypar.initialize(_threads(), False)
    mtk = _MTK["init"]
    presets = {"default": mtkahypar.PresetType.DEFAULT, "quality": mtkahypar.PresetType.QUALITY,
               "deterministic": mtkahypar.PresetType.DETERMINISTIC}
    ctx = mtk.context_from_preset(presets[preset])
    ctx.set_partitioning_parameters(int(k), float(imbalance), mtkahypar.Objective.KM1)
    ctx.logging = False
    mtkahypar.set_seed(int(seed))
    indptr, indices = in_csr(graph)
    # net j = {j} ∪ out(j): transpose the in-CSR (rows = sources) and add j itself
    deg = np.diff(indptr)
    dst = np.repeat(np.arange(n, dtype=np.int64), deg)
    src = indices
    loops = np.arange(n, dtype=np.int64)
    net, pin = unique_pairs(np.concatenate([src, loops]), np.concatenate([dst, loops]))
    nptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(net, minlength=n), out=nptr[1:])
    vw = single_weight(weights)
    with tempfile.TemporaryDirectory(prefix="graphdist-mtkahypar-") as d:
        path = os.path.join(d, "g.hgr")
        sizes = np.diff(nptr)
        keep = np.repeat(sizes > 1, sizes)  # single-pin nets never cut: drop
        nptr2 = np.zeros(int((sizes > 1).sum()) + 1, dtype=np.int64)
        np.cumsum(sizes[sizes > 1], out=nptr2[1:])
        pins = (pin[keep] + 1).astype(str)
        with open(path, "w") as f:
            f.write(f"{nptr2.size - 1} {n} 10\n")  # fmt 10: node weights
            for r0 in range(0, nptr2.size - 1, 1 << 16):
                r1 = min(nptr2.size - 1, r0 + (1 << 16))
                f.write("\n".join(" ".join(pins[nptr2[r]:nptr2[r + 1]]) for r in range(r0, r1)))
                f.write("\n")
            f.write("\n".join(map(str, vw.tolist())) + "\n")
        hg = mtk.hypergraph_from_file(path, ctx, mtkahypar.FileFormat.HMETIS)
    phg = hg.partition(ctx)
    return np.asarray(phg.get_partition(), dtype=np.int64)
