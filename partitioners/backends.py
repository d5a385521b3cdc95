"""Optional partitioning libraries, imported lazily: KaMinPar and Mt-KaHyPar here, METIS (pymetis,
cmeel-metis) in :mod:`partitioners.metis`; the import that names the pip command of a missing one.

    kaminpar   shared-memory multilevel graph partitioner (fast, large k, lean), edge cut. The
               binding reads only files: the graph goes through a binary ParHiP file written
               with numpy (:mod:`partitioners.formats`).
    mtkahypar  hypergraph partitioner on the *column-net* model: net j = {j} ∪ {i : j -> i}.
               Its km1 objective, sum_j (lambda_j - 1), is exactly the halo volume. The
               hypergraph goes through an hMetis text file written by numpy (vectorised
               digits; BENCHMARKS.md compares it with the binding's list-of-nets constructor).

KaMinPar and Mt-KaHyPar balance one weight; for ``balance="both"`` they balance the blend
``node_w / mean(node_w) + edge_w / mean(edge_w)``, which bounds neither. A missing library raises :class:`MissingBackendError` with the pip command.
"""
from __future__ import annotations

import importlib
import os
import tempfile

import numpy as np

from partitioners.common import CSR, Weights, in_csr, sym_csr
from partitioners.errors import MissingBackendError

__all__ = ["kaminpar_partition", "mtkahypar_partition", "single_weight"]

_PIP = {"pymetis": "pip install pymetis", "kaminpar": "pip install kaminpar==3.7.3",
        "mtkahypar": "pip install mtkahypar==1.7.post1"}


def require(name: str, method: str):
    """The optional library ``name`` that partitioner ``method`` uses, imported now; when it is
    missing, :class:`MissingBackendError` with the pip command that installs it."""
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


def _kaminpar_graph(kaminpar, s: CSR, vw: np.ndarray, compress: bool = False):
    """The KaMinPar graph of ``s`` with vertex weights ``vw``, through a binary ParHiP file
    written with numpy (the binding has no in-memory constructor); the file is gone on return."""
    from partitioners.formats import write_parhip
    with tempfile.TemporaryDirectory(prefix="graphdist-kaminpar-") as d:
        path = os.path.join(d, "g.parhip")
        write_parhip(path, s.indptr, s.indices, vw)
        return kaminpar.load_graph(path, kaminpar.GraphFileFormat.PARHIP, compress)


def _kaminpar_run(kaminpar, g, k: int, imbalance: float, seed: int, preset: str) -> np.ndarray:
    kaminpar.reseed(int(seed))
    ctx = kaminpar.context_by_name(preset) if preset != "default" else kaminpar.default_context()
    solver = kaminpar.KaMinPar(_threads(), ctx)
    return np.asarray(solver.compute_partition(g, int(k), float(imbalance)), dtype=np.int64)


def kaminpar_partition(graph, k: int, weights: Weights, *, imbalance: float, seed: int,
                       preset: str = "default", compress: bool = False) -> np.ndarray:
    """KaMinPar (edge cut, one vertex weight); ``compress``: KaMinPar's compressed graph (less
    memory, slower)."""
    kaminpar = require("kaminpar", "kaminpar")
    n = int(graph.num_nodes)
    if k == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    g = _kaminpar_graph(kaminpar, sym_csr(graph), single_weight(weights), compress)
    return _kaminpar_run(kaminpar, g, k, imbalance, seed, preset)


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


def mtkahypar_handle():
    """``(the mtkahypar module, its initialised handle)``: the thread pool can be initialised once
    per process. Raises ``MissingBackendError`` without the package."""
    mtkahypar = require("mtkahypar", "mtkahypar")
    if "init" not in _MTK:
        _MTK["init"] = mtkahypar.initialize(_threads(), False)
    return mtkahypar, _MTK["init"]


def mtkahypar_partition(graph, k: int, weights: Weights, *, imbalance: float, seed: int,
                        preset: str = "default") -> np.ndarray:
    """Mt-KaHyPar km1 on the column-net hypergraph (km1 == halo volume)."""
    n = int(graph.num_nodes)
    if k == 1 or n == 0:
        require("mtkahypar", "mtkahypar")
        return np.zeros(n, dtype=np.int64)
    mtkahypar, mtk = mtkahypar_handle()
    presets = {"default": mtkahypar.PresetType.DEFAULT, "quality": mtkahypar.PresetType.QUALITY,
               "deterministic": mtkahypar.PresetType.DETERMINISTIC}
    ctx = mtk.context_from_preset(presets[preset])
    ctx.set_partitioning_parameters(int(k), float(imbalance), mtkahypar.Objective.KM1)
    ctx.logging = False
    mtkahypar.set_seed(int(seed))
    nptr, pins = column_nets(graph)
    hg = _mtkahypar_hypergraph(mtkahypar, mtk, ctx, nptr, pins, single_weight(weights), n)
    del nptr, pins
    phg = hg.partition(ctx)
    return np.asarray(phg.get_partition(), dtype=np.int64)


def column_nets(graph) -> tuple[np.ndarray, np.ndarray]:
    """``(nptr int64, pins)`` of the column-net hypergraph without its single-pin nets (they are
    never cut): net j = {j} ∪ {i : j -> i}. A symmetric graph without self-loops is its own
    transpose: each net is its CSR row with ``j`` put in front (no sort, no transposition)."""
    import scipy.sparse as sp
    from partitioners.common import id_dtype
    n = int(graph.num_nodes)
    indptr, indices = in_csr(graph)
    meta = getattr(graph, "meta", None) or {}
    if not (meta.get("symmetric") and not meta.get("self_loops", True)):
        a = sp.csr_matrix((np.ones(indices.size, dtype=np.int8), indices, indptr), shape=(n, n))
        t = (a.T.tocsr() + sp.identity(n, dtype=np.int8, format="csr")).tocsr()
        del a
        t.sum_duplicates()
        nptr, pins = t.indptr.astype(np.int64), t.indices.astype(id_dtype(n), copy=False)
    else:
        nptr = indptr + np.arange(n + 1, dtype=np.int64)
        pins = np.empty(nptr[-1], dtype=indices.dtype)
        head = np.zeros(pins.size, dtype=bool)
        head[nptr[:-1]] = True
        pins[head] = np.arange(n, dtype=indices.dtype)
        pins[~head] = indices
        del head
    size = np.diff(nptr)
    if (size > 1).all():
        return nptr, pins
    keep = np.repeat(size > 1, size)
    ptr = np.zeros(int((size > 1).sum()) + 1, dtype=np.int64)
    np.cumsum(size[size > 1], out=ptr[1:])
    return ptr, pins[keep]


def _mtkahypar_hypergraph(mtkahypar, mtk, ctx, nptr: np.ndarray, pins: np.ndarray, vw: np.ndarray, n: int,
                          via: str = "file"):
    """The Mt-KaHyPar hypergraph of the nets ``(nptr, pins)``: ``via="file"`` writes an hMetis
    file with numpy (the default: leaner and faster, BENCHMARKS.md), ``"list"`` hands the
    binding a list with one int array per net."""
    if via == "list":
        nets = np.split(pins.astype(np.int64), nptr[1:-1])
        return mtk.create_hypergraph(ctx, n, len(nets), nets, vw.tolist(), [1] * len(nets))
    from partitioners.formats import write_hmetis
    with tempfile.TemporaryDirectory(prefix="graphdist-mtkahypar-") as d:
        path = os.path.join(d, "g.hgr")
        write_hmetis(path, nptr, pins, vw)
        return mtk.hypergraph_from_file(path, ctx, mtkahypar.FileFormat.HMETIS)
