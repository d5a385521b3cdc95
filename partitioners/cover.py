"""Pre/post aggregation of the halo by a minimum vertex cover (König).

For the cut edges ``u -> v`` from part ``s`` to part ``r`` take the bipartite graph ``B_sr``
of their distinct sources ``U`` (on ``s``) and destinations ``V`` (on ``r``). Every edge is
carried either *raw* (``s`` sends ``h_u``, ``r`` aggregates it: the plain halo) or
*pre-aggregated* (``s`` sends one partial sum ``sum_u A_vu h_u`` per destination ``v``). A
vertex cover ``C`` of ``B_sr`` says which: sources in ``C`` go raw, every other edge is summed
into the partial sum of its destination (which must then be in ``C``). Rows moved per layer
for the pair = ``|C|``, at best the maximum matching size (König), never more than
``min(|U|, |V|)``; the plain halo moves ``|U|``.

Rows of the bipartite matrix are the distinct ``(source, receiving part)`` pairs (= the plain
halo rows), columns the distinct ``(destination, sending part)`` pairs; it is block diagonal by
receiving part (a column's destination lies in the part its row's edge goes to). Each receiving
part's block is solved on its own by :func:`part_cover`: ``scipy.sparse.csgraph.
maximum_bipartite_matching``, then one alternating BFS from the unmatched rows gives König's
cover::

    Z = unmatched rows + everything reachable by alternating paths (row -> any edge -> column,
        column -> its matched row)
    cover = (rows not in Z) + (columns in Z)          |cover| = |matching|

A part's block depends only on the cut edges into that part, in canonical order (rows by
source id, columns by (destination, sending part)), so the rank that holds those edges computes
the very same cover (:mod:`graphdist.partition.build`, the artifact built by k ranks together).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_bipartite_matching

from partitioners.common import as_numpy, in_csr, row_blocks

__all__ = ["HaloCover", "halo_cover", "matching_size", "part_cover"]


@dataclass
class HaloCover:
    """The cover of every ordered part pair of one partition (all arrays numpy)."""

    src: np.ndarray
    """``[cut]`` int64 source ``u`` of every cut edge ``u -> v`` (in CSR order of ``v``)."""
    dst: np.ndarray
    """``[cut]`` int64 destination ``v`` of every cut edge."""
    row: np.ndarray
    """``[cut]`` row of the edge (int32 when it fits): index into ``raw_node``/``raw_part`` (its
    ``(u, part of v)``)."""
    col: np.ndarray
    """``[cut]`` column of the edge (int32 when it fits): index into ``pre_node``/``pre_part``
    (its ``(v, part of u)``)."""
    raw_node: np.ndarray
    """``[R]`` source node of each distinct ``(u, receiving part)`` pair, sorted by (u, part)."""
    raw_part: np.ndarray
    """``[R]`` receiving part of each such pair."""
    raw_cover: np.ndarray
    """``[R]`` bool: the pair is in the cover (``u`` is sent raw to that part)."""
    pre_node: np.ndarray
    """``[C]`` destination node of each distinct ``(v, sending part)`` pair, sorted by (v, part)."""
    pre_part: np.ndarray
    """``[C]`` sending part of each such pair."""
    pre_cover: np.ndarray
    """``[C]`` bool: in the cover (the sending part sends one partial sum for ``v``)."""

    @property
    def edge_pre(self) -> np.ndarray:
        """``[cut]`` bool: the edge is summed into its destination's partial sum."""
        return ~self.raw_cover[self.row]

    @property
    def moved_rows(self) -> int:
        return int(self.raw_cover.sum() + self.pre_cover.sum())

    def moved_per_receiver(self, a: np.ndarray, k: int) -> np.ndarray:
        """``[k]`` rows each part receives per layer (raw rows + partial sums)."""
        return (np.bincount(self.raw_part[self.raw_cover], minlength=k)
                + np.bincount(a[self.pre_node[self.pre_cover]], minlength=k))


def _small(a: np.ndarray, k: int) -> np.ndarray:
    return a.astype(np.int8 if k <= 127 else np.int16 if k <= 32767 else np.int64)


def _cut_edges(graph, a: np.ndarray, k: int):
    """``(src, dst, part of src, part of dst)`` of the cut edges in CSR order: ends int64, parts
    in the narrowest type. Only cut-sized arrays are int64 (the mask is built in row blocks)."""
    indptr, src = in_csr(graph)
    small = _small(a, k)
    cut = np.empty(src.size, dtype=bool)
    for r0, r1 in row_blocks(indptr):
        e0, e1 = int(indptr[r0]), int(indptr[r1])
        cut[e0:e1] = small[src[e0:e1]] != np.repeat(small[r0:r1], np.diff(indptr[r0:r1 + 1]))
    e = np.flatnonzero(cut)
    del cut
    u = src[e].astype(np.int64)
    v = np.searchsorted(indptr, e, side="right") - 1
    del e
    return u, v, small[u], small[v]


DENSE_RANK_CELLS = 1 << 25
"""N x k cells of the bitmap ranking of pair keys (a bool mask and its int32 running count:
160 MiB); above it ``np.unique`` of the keys."""


def _rank(keys: np.ndarray, size: int):
    """``(sorted distinct keys, index of each key among them, int32 when it fits)`` (a bitmap
    when ``size`` is small)."""
    if size <= DENSE_RANK_CELLS:
        mask = np.zeros(size, dtype=bool)
        mask[keys] = True
        rank = np.cumsum(mask, dtype=np.int32) - 1
        return np.flatnonzero(mask), rank[keys]
    uniq, inv = np.unique(keys, return_inverse=True)
    inv = inv.reshape(-1)
    return uniq, inv.astype(np.int32) if uniq.size < 2**31 - 1 else inv


def _bipartite(graph, a, k):
    n = a.size
    if n * k >= 1 << 62:
        raise ValueError(f"{n} nodes x {k} parts overflow the int64 pair keys")
    src, dst, ps, pd = _cut_edges(graph, a, k)
    rkey, row = _rank(src * k + pd, n * k)
    ckey, col = _rank(dst * k + ps, n * k)
    del ps, pd
    b = sp.csr_matrix((np.ones(src.size, dtype=np.int8), (row, col)), shape=(rkey.size, ckey.size))
    b.sum_duplicates()
    return src, dst, row, col, rkey, ckey, b


def _matching(b: sp.csr_matrix) -> np.ndarray:
    if b.shape[0] == 0 or b.shape[1] == 0:
        return np.full(b.shape[0], -1, dtype=np.int64)
    return np.asarray(maximum_bipartite_matching(b, perm_type="column"), dtype=np.int64)


def matching_size(graph, assignment, k: int) -> tuple[int, np.ndarray]:
    """``(moved rows per layer, [k] rows received per part)`` without building the cover."""
    a = as_numpy(assignment).astype(np.int64, copy=False)
    *_, rkey, ckey, b = _bipartite(graph, a, k)
    mu = _matching(b)
    hit = mu >= 0
    return int(hit.sum()), np.bincount(rkey[hit] % k, minlength=k)


def part_cover(b: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, int]:
    """König cover of one receiving part's block ``b`` (canonical CSR: rows its distinct cut
    sources ascending, columns its distinct ``(destination, sending part)`` pairs ascending):
    ``(rows in the cover, columns in the cover, matching size)``."""
    n_rows, n_cols = b.shape
    mu = _matching(b)
    mv = np.full(n_cols, -1, dtype=np.int64)
    matched = np.flatnonzero(mu >= 0)
    mv[mu[matched]] = matched
    vis_r = mu < 0
    vis_c = np.zeros(n_cols, dtype=bool)
    frontier = np.flatnonzero(vis_r)
    while frontier.size:
        lo, hi = b.indptr[frontier], b.indptr[frontier + 1]
        cnt = hi - lo
        pos = np.repeat(lo - np.r_[0, np.cumsum(cnt)[:-1]], cnt) + np.arange(int(cnt.sum()))
        cols = np.unique(b.indices[pos])
        cols = cols[~vis_c[cols]]
        vis_c[cols] = True
        rows = mv[cols]
        rows = rows[rows >= 0]
        rows = np.unique(rows[~vis_r[rows]])
        vis_r[rows] = True
        frontier = rows
    return ~vis_r, vis_c, int(matched.size)


def halo_cover(graph, assignment, k: int) -> HaloCover:
    """The König cover of every ordered part pair (see the module docstring): one
    :func:`part_cover` per receiving part."""
    a = as_numpy(assignment).astype(np.int64, copy=False)
    src, dst, row, col, rkey, ckey, b = _bipartite(graph, a, k)
    n_rows, n_cols = b.shape
    raw, pre, matched = np.zeros(n_rows, dtype=bool), np.zeros(n_cols, dtype=bool), 0
    rpart, cpart = rkey % k, a[ckey // k]
    rord, cord = np.argsort(rpart, kind="stable"), np.argsort(cpart, kind="stable")
    rb, cb = np.searchsorted(rpart[rord], np.arange(k + 1)), np.searchsorted(cpart[cord], np.arange(k + 1))
    colmap = np.full(n_cols, -1, dtype=b.indices.dtype)
    for r in range(k):
        rs, cs = rord[rb[r]:rb[r + 1]], cord[cb[r]:cb[r + 1]]  # ascending: the canonical order
        if rs.size == 0:
            continue
        colmap[cs] = np.arange(cs.size, dtype=colmap.dtype)
        sub = b[rs]
        blk = sp.csr_matrix((sub.data, colmap[sub.indices], sub.indptr), shape=(rs.size, cs.size))
        raw[rs], pre[cs], m = part_cover(blk)
        matched += m
    cover = HaloCover(src=src, dst=dst, row=row, col=col, raw_node=rkey // k, raw_part=rpart,
                      raw_cover=raw, pre_node=ckey // k, pre_part=ckey % k, pre_cover=pre)
    if cover.moved_rows != matched or (cover.raw_cover[row] | cover.pre_cover[col]).sum() != row.size:
        raise RuntimeError(f"König cover of {cover.moved_rows} rows does not match the matching of "
                           f"{matched} or leaves an edge uncovered")  # a bug, never user input
    return cover
