"""Small numpy views of a graph and helpers shared by the partitioners (duck-typed: anything with
``indptr``, ``indices`` and ``num_nodes`` works, e.g. ``graphdist.data.Graph``).

Two adjacency views are used::

    in-CSR  (the graph's own):  row i -> sources j of edges j -> i   (nets / halo model)
    sym-CSR (undirected):       row i -> {j : j -> i or i -> j}, no self-loops (METIS, LDG)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
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


def in_csr(graph) -> tuple[np.ndarray, np.ndarray]:
    """The graph's own destination CSR as int64 numpy ``(indptr, indices)``."""
    return (as_numpy(graph.indptr).astype(np.int64, copy=False),
            as_numpy(graph.indices).astype(np.int64, copy=False))


def in_degree(graph) -> np.ndarray:
    return np.diff(as_numpy(graph.indptr)).astype(np.int64)


def sym_csr(graph) -> sp.csr_matrix:
    """Undirected simple adjacency ``A + A^T`` (values 1, no self-loops) as scipy CSR, int32
    indices; sorted rows."""
    n = int(graph.num_nodes)
    indptr, indices = in_csr(graph)
    a = sp.csr_matrix((np.ones(indices.size, dtype=np.float32), indices, indptr), shape=(n, n))
    s = (a + a.T).tocsr()
    s.setdiag(0)
    s.eliminate_zeros()
    s.sort_indices()
    s.data[:] = 1.0
    return s


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
