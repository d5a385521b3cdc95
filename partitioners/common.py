"""Small numpy views of a graph and helpers shared by the partitioners (duck-typed: anything with
``indptr``, ``indices`` and ``num_nodes`` works, e.g. ``graphdist.data.Graph``).

Two adjacency views are used::

    in-CSR  (the graph's own):  row i -> sources j of edges j -> i   (nets / halo model)
    sym-CSR (undirected):       row i -> {j : j -> i or i -> j}, no self-loops (METIS, LDG)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def as_numpy(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().cpu().numpy()
    return np.asarray(t)


@dataclass
class Weights:
    """Per-node balance weights: one or two constraints.

    ``w[c]`` is the ``[N]`` float64 weight of constraint ``c``; ``caps[c]`` the largest load a part
    may carry in it (``(1 + imbalance) * total / k``)."""

    w: list
    """list of ``[N]`` float64 arrays, one per balance constraint (nodes and/or in-edges)."""
    names: list
    """constraint names, e.g. ``["nodes", "edges"]``."""
    caps: list
    """``caps[c]`` = maximum load of one part in constraint ``c``."""


def id_dtype(n: int):
    """numpy dtype of node ids below ``n``: int32 when they fit, else int64."""
    return np.int32 if int(n) < 2**31 - 1 else np.int64


def in_csr(graph) -> tuple[np.ndarray, np.ndarray]:
    """The graph's own destination CSR as numpy ``(indptr int64, indices)``; ``indices`` keeps
    the graph's narrow id dtype (no copy)."""
    return (as_numpy(graph.indptr).astype(np.int64, copy=False),
            as_numpy(graph.indices).astype(id_dtype(graph.num_nodes), copy=False))


def gather_rows(indptr, indices, rows, block: int = 1 << 23):
    """``(ptr, idx)``: the CSR rows ``rows`` of ``(indptr, indices)``, in the order given, as
    numpy arrays (``idx`` keeps the dtype of ``indices``; ``ptr`` is int64). Works in blocks of
    about ``block`` entries, so no temporary is sized by the whole result."""
    indptr, indices, rows = as_numpy(indptr), as_numpy(indices), as_numpy(rows)
    lo = indptr[rows].astype(np.int64)
    cnt = indptr[rows + 1].astype(np.int64) - lo
    ptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(cnt, out=ptr[1:])
    idx = np.empty(int(ptr[-1]), dtype=indices.dtype)
    r0 = 0
    while r0 < rows.size:  # rows r0..r1-1 hold about `block` entries (at least one row)
        r1 = int(np.searchsorted(ptr, ptr[r0] + block, side="right"))
        r1 = min(max(r1 - 1, r0 + 1), rows.size)
        c = cnt[r0:r1]
        e0, e1 = int(ptr[r0]), int(ptr[r1])
        pos = np.repeat(lo[r0:r1] - ptr[r0:r1], c) + np.arange(e0, e1)
        idx[e0:e1] = indices[pos]
        r0 = r1
    return ptr, idx


def in_degree(graph) -> np.ndarray:
    return np.diff(as_numpy(graph.indptr)).astype(np.int64)


@dataclass
class CSR:
    """A square pattern-only CSR (no values): what METIS and KaMinPar read."""

    indptr: np.ndarray
    """``[n+1]`` int64 row pointer."""
    indices: np.ndarray
    """``[nnz]`` column ids (int32 when they fit), sorted within each row."""

    @property
    def shape(self) -> tuple[int, int]:
        return (self.indptr.size - 1, self.indptr.size - 1)

    @property
    def nnz(self) -> int:
        return int(self.indices.size)


def row_blocks(indptr: np.ndarray, block: int = 1 << 23):
    """``(r0, r1)`` row ranges holding about ``block`` entries each (at least one row)."""
    n = indptr.size - 1
    r0 = 0
    while r0 < n:
        r1 = min(n, max(r0 + 1, int(np.searchsorted(indptr, indptr[r0] + block, side="right")) - 1))
        yield r0, r1
        r0 = r1


def _loop_mask(indptr: np.ndarray, indices: np.ndarray, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray]:
    """``(local row of each entry, entry is a self-loop)`` for rows ``r0..r1-1``."""
    e0, e1 = int(indptr[r0]), int(indptr[r1])
    local = np.repeat(np.arange(r1 - r0, dtype=np.int32), np.diff(indptr[r0:r1 + 1]))
    return local, indices[e0:e1] == local + r0


def self_loops_per_row(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``[N]`` int64 number of entries ``(i, i)`` in each row (row blocks, no E-sized temporary)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    out = np.zeros(indptr.size - 1, dtype=np.int64)
    for r0, r1 in row_blocks(indptr):
        local, loop = _loop_mask(indptr, indices, r0, r1)
        out[r0:r1] = np.bincount(local[loop], minlength=r1 - r0)
    return out


def _drop_loops(indptr: np.ndarray, indices: np.ndarray) -> CSR:
    """``(indptr, indices)`` without entries ``(i, i)``."""
    loops = self_loops_per_row(indptr, indices)
    if not loops.any():
        return CSR(indptr, indices)
    keep = np.empty(indices.size, dtype=bool)
    for r0, r1 in row_blocks(indptr):
        keep[int(indptr[r0]):int(indptr[r1])] = ~_loop_mask(indptr, indices, r0, r1)[1]
    ptr = np.zeros(indptr.size, dtype=np.int64)
    np.cumsum(np.diff(indptr) - loops, out=ptr[1:])
    return CSR(ptr, indices[keep])


def sym_csr(graph) -> CSR:
    """Undirected simple adjacency ``A + A^T`` (no self-loops), sorted rows, int32 ids when they
    fit. A graph built symmetrised (``meta["symmetric"]``) already is it: its own arrays are
    returned without a copy (minus self-loops, if it kept any)."""
    n = int(graph.num_nodes)
    indptr, indices = in_csr(graph)
    meta = getattr(graph, "meta", None) or {}
    if not meta.get("symmetric"):
        import scipy.sparse as sp  # here, not above: every rank imports this package's errors (0.17 s)
        a = sp.csr_matrix((np.ones(indices.size, dtype=np.int8), indices, indptr), shape=(n, n))
        s = (a + a.T.tocsr()).tocsr()
        del a
        s.sum_duplicates()
        indptr, indices = s.indptr.astype(np.int64), s.indices.astype(id_dtype(n), copy=False)
    elif not meta.get("self_loops", True):
        return CSR(indptr, indices)
    return _drop_loops(indptr, indices)


def make_weights(graph, k: int, imbalance: float, balance: str, node_weights=None) -> Weights:
    """Balance constraints for ``balance`` in ``nodes`` / ``edges`` / ``both``."""
    n = int(graph.num_nodes)
    nw = np.ones(n) if node_weights is None else as_numpy(node_weights).astype(np.float64)
    ew = in_degree(graph).astype(np.float64)
    ws, names = [], []
    if balance in ("nodes", "both"):
        ws.append(nw)
        names.append("nodes")
    if balance in ("edges", "both"):
        ws.append(ew)
        names.append("edges")
    caps = []
    for w in ws:
        total = float(w.sum())
        cap = (1.0 + imbalance) * total / k
        # integer weights: a part may always hold ceil(total / k); and one heaviest node
        cap = max(cap, float(np.ceil(total / k - 1e-9)), float(w.max()) if w.size else 0.0)
        caps.append(cap + 1e-9)
    return Weights(ws, names, caps)


def loads(weights: Weights, a: np.ndarray, k: int) -> np.ndarray:
    """``[C, k]`` load of every part in every constraint."""
    return np.stack([np.bincount(a, weights=w, minlength=k) for w in weights.w])


def group_cumsum(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum of ``values`` restarting at each new value of sorted ``groups``."""
    c = np.cumsum(values)
    start = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    offset = np.zeros_like(c)
    offset[start[1:]] = c[start[1:] - 1]
    return c - np.maximum.accumulate(offset)
