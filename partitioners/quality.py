"""Partition-quality metrics for directed message flow ``src -> dst``.

A partition is ``assignment[N]`` (part id of every node, ``0 <= id < k``). For an edge
``j -> i`` (stored in row ``i`` of the destination CSR), node ``i``'s owner must receive row
``j`` of the features every layer. If ``j`` lives in another part, that is a *halo* row::

    part p owns {i : a[i] == p}
    halo(p)   = { j : exists j -> i with a[i] == p and a[j] != p }   (distinct sources)
    comm_volume = sum_p |halo(p)|            (= rows moved per layer)
    send[p, q]  = |{ j in part p : j in halo(q) }|   (k x k, zero diagonal)
    max_recv    = max_q sum_p send[p, q] ;  max_send = max_p sum_q send[p, q]
    moved_rows  = sum over ordered part pairs of a minimum vertex cover of the pair's cut
                  (rows moved per layer with pre/post aggregation, :mod:`partitioners.cover`)
    moved_max_recv = the busiest receiver's share of moved_rows

Balance: nodes of part p = |{i : a[i] == p}|; edges of part p = sum of in-degrees of its nodes
(the SpMM rows it computes). Imbalance = max part / mean part - 1.

Everything is vectorised (numpy bincount / a dense ``[N, k]`` membership bitmap when it fits,
sorting otherwise); ~10M edges take well under a second.
"""
from __future__ import annotations

import numpy as np

from partitioners.common import as_numpy
from partitioners.errors import PartitionError

__all__ = [
    "edge_cut", "edge_cut_fraction", "comm_volume", "max_recv", "max_send", "node_imbalance",
    "edge_imbalance", "replication_factor", "bytes_per_layer", "send_matrix", "recv_per_part",
    "send_per_part", "quality", "check_assignment", "QUALITY_KEYS", "moved_rows",
]

QUALITY_KEYS = ("edge_cut", "edge_cut_fraction", "comm_volume", "max_recv", "max_send",
                "node_imbalance", "edge_imbalance", "replication_factor", "moved_rows",
                "moved_max_recv")
"""Keys of :func:`quality` (plus ``bytes_per_layer`` when a feature width is given)."""

DENSE_PAIR_CELLS = 1 << 28
"""N x k cells of the dense (node, part) membership bitmap (256 MiB of bool); above it the
halo pairs come from sorting the cut edges' keys."""


def check_assignment(graph, assignment, k: int | None = None) -> tuple[np.ndarray, int]:
    """Validate ``assignment`` against ``graph``; return it as int64 numpy and the part count.

    ``k`` defaults to ``max(assignment) + 1``. Raises :class:`PartitionError` (a
    ``GraphdistError``) on wrong length, negative ids or ids ``>= k``."""
    a = as_numpy(assignment).astype(np.int64, copy=False).reshape(-1)
    n = int(graph.num_nodes)
    if a.shape[0] != n:
        raise PartitionError(f"assignment has {a.shape[0]} entries but the graph has {n} nodes")
    if n and a.min() < 0:
        raise PartitionError(f"assignment has a negative part id ({int(a.min())})")
    top = int(a.max()) + 1 if n else 1
    if k is None:
        k = top
    elif top > k:
        raise PartitionError(f"assignment has part id {top - 1} >= k={k}")
    return a, int(k)


def _small(a: np.ndarray, k: int) -> np.ndarray:
    """The assignment in the narrowest integer type (cache-friendly gathers)."""
    for t in (np.int8, np.int16, np.int32):
        if k <= np.iinfo(t).max:
            return a.astype(t)
    return a


class _Cache:
    """Per-edge part ids and the distinct halo pairs, computed once per (graph, assignment).

    ``src_part[e]`` / ``dst_part[e]`` are the parts of edge ``e``'s ends; halo pairs
    ``(j, q)`` mean row ``j`` must be sent to part ``q`` (found with a dense ``[N*k]`` bitmap
    when it fits in 256 MiB, else by sorting)."""

    def __init__(self, graph, assignment, k=None):
        self.graph = graph
        self.a, self.k = check_assignment(graph, assignment, k)
        n = self.a.size
        self.deg = np.diff(as_numpy(graph.indptr)).astype(np.int64)
        src = as_numpy(graph.indices)
        self.src = src.astype(np.int32 if n < 2**31 - 1 else np.int64, copy=False)
        small = _small(self.a, self.k)
        self.dst_part = np.repeat(small, self.deg)
        self.src_part = small[self.src]
        self._pairs = None

    @property
    def cut(self) -> int:
        return int(np.count_nonzero(self.src_part != self.dst_part))

    @property
    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        if self._pairs is None:
            n, k = self.a.size, self.k
            if n * k <= DENSE_PAIR_CELLS:
                kt = np.int32 if n * k < 2**31 else np.int64
                key = self.src.astype(kt) * kt(k)
                key += self.dst_part
                mask = np.zeros(n * k, dtype=bool)
                mask[key] = True
                mask[np.arange(n, dtype=np.int64) * k + self.a] = False  # own part: no halo
                key = np.flatnonzero(mask)
            else:
                cut = self.src_part != self.dst_part
                key = np.unique(self.src[cut].astype(np.int64) * k + self.dst_part[cut])
            self._pairs = (key // k, key % k)
        return self._pairs


def send_matrix(graph, assignment, k: int | None = None) -> np.ndarray:
    """``[k, k]`` int64: ``S[p, q]`` = rows part ``p`` sends to part ``q`` per layer (diag 0)."""
    c = _Cache(graph, assignment, k)
    return _send_matrix(c)


def _send_matrix(c: _Cache) -> np.ndarray:
    j, q = c.pairs
    return np.bincount(c.a[j] * c.k + q, minlength=c.k * c.k).reshape(c.k, c.k)


def recv_per_part(graph, assignment, k: int | None = None) -> np.ndarray:
    """``[k]`` distinct remote source rows each part receives per layer (its halo size)."""
    c = _Cache(graph, assignment, k)
    return np.bincount(c.pairs[1], minlength=c.k)


def send_per_part(graph, assignment, k: int | None = None) -> np.ndarray:
    """``[k]`` rows each part sends per layer (a row sent to two parts counts twice)."""
    c = _Cache(graph, assignment, k)
    return np.bincount(c.a[c.pairs[0]], minlength=c.k)


def edge_cut(graph, assignment) -> int:
    """Number of directed edges ``j -> i`` whose endpoints lie in different parts."""
    return _Cache(graph, assignment).cut


def edge_cut_fraction(graph, assignment) -> float:
    """:func:`edge_cut` / number of directed edges (0 for an edgeless graph)."""
    e = int(graph.num_edges)
    return edge_cut(graph, assignment) / e if e else 0.0


def comm_volume(graph, assignment) -> int:
    """Total halo rows per layer: sum over parts of distinct remote sources it must receive."""
    c = _Cache(graph, assignment)
    return int(c.pairs[0].size)


def max_recv(graph, assignment, k: int | None = None) -> int:
    """Largest number of halo rows one part receives per layer."""
    r = recv_per_part(graph, assignment, k)
    return int(r.max()) if r.size else 0


def max_send(graph, assignment, k: int | None = None) -> int:
    """Largest number of rows one part sends per layer."""
    s = send_per_part(graph, assignment, k)
    return int(s.max()) if s.size else 0


def imbalance(weights: np.ndarray | None, a: np.ndarray, k: int) -> float:
    """max over parts / mean over parts - 1 of ``weights`` summed per part (``None``: node counts)."""
    loads = np.bincount(a, weights=weights, minlength=k)
    total = float(loads.sum())
    return float(loads.max() / (total / k) - 1.0) if total > 0 else 0.0


def node_imbalance(graph, assignment, k: int | None = None) -> float:
    """``max part size / (N / k) - 1`` (``k`` defaults to ``max id + 1``)."""
    a, k = check_assignment(graph, assignment, k)
    return imbalance(None, a, k)


def edge_imbalance(graph, assignment, k: int | None = None) -> float:
    """``max part in-edges / (E / k) - 1``; a part's edges are the in-edges of its nodes."""
    a, k = check_assignment(graph, assignment, k)
    deg = np.diff(as_numpy(graph.indptr)).astype(np.float64)
    return imbalance(deg, a, k)


def replication_factor(graph, assignment) -> float:
    """``(N + comm_volume) / N``: stored rows (owned + halo) per original row."""
    n = int(graph.num_nodes)
    return (n + comm_volume(graph, assignment)) / n if n else 1.0


def moved_rows(graph, assignment, k: int | None = None) -> int:
    """Rows moved per layer with pre/post aggregation chosen by a minimum vertex cover per
    ordered part pair (<= :func:`comm_volume`)."""
    from partitioners.cover import matching_size
    a, k = check_assignment(graph, assignment, k)
    return matching_size(graph, a, k)[0]


def bytes_per_layer(graph, assignment, feature_dim: int, dtype_bytes: int = 4) -> int:
    """Bytes of halo features moved per layer: ``comm_volume * feature_dim * dtype_bytes``."""
    return comm_volume(graph, assignment) * int(feature_dim) * int(dtype_bytes)


def quality(graph, assignment, feature_dim: int | None = None, k: int | None = None) -> dict:
    """All metrics at once (halo pairs computed once). Keys are :data:`QUALITY_KEYS` plus
    ``bytes_per_layer`` when ``feature_dim`` is given (float32 features)."""
    c = _Cache(graph, assignment, k)
    a, k = c.a, c.k
    n, e = int(graph.num_nodes), int(graph.num_edges)
    j, q = c.pairs
    vol = int(j.size)
    cut = c.cut
    recv = np.bincount(q, minlength=k)
    send = np.bincount(a[j], minlength=k)
    deg = c.deg.astype(np.float64)
    from partitioners.cover import matching_size
    moved, moved_recv = matching_size(graph, a, k)
    out = {
        "edge_cut": cut,
        "edge_cut_fraction": cut / e if e else 0.0,
        "comm_volume": vol,
        "max_recv": int(recv.max()) if k else 0,
        "max_send": int(send.max()) if k else 0,
        "node_imbalance": imbalance(None, a, k),
        "edge_imbalance": imbalance(deg, a, k),
        "replication_factor": (n + vol) / n if n else 1.0,
        "moved_rows": moved,
        "moved_max_recv": int(moved_recv.max()) if k else 0,
    }
    if feature_dim is not None:
        out["bytes_per_layer"] = vol * int(feature_dim) * 4
    return out
