"""Building the :class:`~graphdist.partition.local.LocalGraph` of every part, and checking that the
layouts of all parts agree (see :mod:`graphdist.partition.local` for the layout).

Both exchange layouts are cut from whole-graph arrays computed once (:class:`SharedArrays`):

* plain: the distinct ``(source u, receiving part)`` pairs of the cut edges, sorted by
  ``(receiving part, owner of u, u)`` for the receive side and ``(owner, receiving part, u)``
  for the send side, so rank s's send list to r is exactly r's halo block from s, in order;
* mvc: the König cover of all ordered part pairs at once (:func:`partitioners.cover.halo_cover`;
  for a host-aware partition, across hosts per sending part and receiving host): covered
  ``(u, r)`` pairs are sent raw; every other cut edge ``u -> v`` enters the partial sum of
  ``(v, owner of u)``, a covered pair, sent in ascending order of ``v``.

Sorting uses :func:`graphdist.sparse.lex_order` (no ``a * n + b`` keys that could overflow
int64 on huge graphs). :func:`validate_layouts` checks, for every ordered pair, that the raw rows,
the partial sums and the very edges summed into them are the same on both sides.

Memory: nothing here is sized by the whole graph's edges except the graph itself. A part's rows
are gathered in blocks (:func:`partitioners.common.gather_rows`), renumbered to int32 local
columns and sorted within each row in place; the shared arrays are sized by the cut.
"""
from __future__ import annotations

import numpy as np
import torch

from graphdist.errors import ArtifactError
from graphdist.partition.local import HALO_MODES, MODELS, ExchangeLayout, LocalGraph, gathered_csr
from graphdist.sparse import index2ptr, lex_order
from partitioners.common import self_loops_per_row

__all__ = ["LocalGraph", "ExchangeLayout", "build_layout", "build_layouts", "validate_layouts", "layout_stats",
           "MODELS", "HALO_MODES"]


def checked_assignment(graph, assignment, k) -> torch.Tensor:
    """``assignment`` as an int64 tensor of one part id in ``0..k-1`` per node of ``graph``, or
    an ``ArtifactError`` naming what is wrong."""
    a = torch.as_tensor(assignment).to(torch.int64)
    if a.shape != (graph.num_nodes,):
        raise ArtifactError(f"assignment has shape {tuple(a.shape)} but the graph has {graph.num_nodes} nodes")
    if a.numel() and (int(a.min()) < 0 or int(a.max()) >= k):
        raise ArtifactError(f"assignment values must lie in 0..{k - 1}, got {int(a.min())}..{int(a.max())}")
    return a


def _t(x) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.int64))


class SharedArrays:
    """Whole-graph arrays every part's layout is cut from (computed once, vectorised). ``hosts``
    > 1: the parts are host-major for that many hosts, and mvc's cover of the cut across hosts is
    one per (sending part, receiving host), so a raw row counts once per host, as ``--halo-route
    hosts`` moves it (:func:`partitioners.cover.halo_cover`)."""

    def __init__(self, graph, a, k, hosts: int = 1):
        from partitioners.cover import halo_cover
        n = graph.num_nodes
        self.a, self.k, self.n = a, k, n
        order = torch.argsort(a, stable=True)  # nodes grouped by part, ascending id within
        self.order, self.starts = order, index2ptr(a[order], k)
        self.local_of = torch.empty(n, dtype=torch.int64)  # position of node in its owner's list
        self.local_of[order] = torch.arange(n) - self.starts[a[order]]
        loops = torch.from_numpy(self_loops_per_row(graph.indptr.numpy(), graph.indices.numpy()))
        self.deg = graph.in_degree() - loops
        an = a.numpy()
        c = halo_cover(graph, an, k, hosts=hosts if hosts > 1 and k % hosts == 0 else 1)
        # plain halo pairs (u, receiving part q); receive order (q, owner, u), send order (owner, q, u)
        u, q, raw = _t(c.raw_node), _t(c.raw_part), torch.from_numpy(c.raw_cover)
        own = a[u]
        r = lex_order(q * k + own, u, n)
        self.h_part, self.h_owner, self.h_node, self.h_raw = q[r], own[r], u[r], raw[r]
        self.h_starts = index2ptr(self.h_part, k)
        s = lex_order(own * k + q, u, n)
        self.s_owner, self.s_part, self.s_node, self.s_raw = own[s], q[s], u[s], raw[s]
        self.s_starts = index2ptr(self.s_owner, k)
        # partial sums: covered (v, sending part p); receive order (owner of v, p, v), send (p, owner, v)
        cov = np.flatnonzero(c.pre_cover)
        v, p = _t(c.pre_node[cov]), _t(c.pre_part[cov])
        ov = a[v]
        r = lex_order(ov * k + p, v, n)
        self.pr_part, self.pr_from, self.pr_node = ov[r], p[r], v[r]
        self.pr_starts = index2ptr(self.pr_part, k)
        s = lex_order(p * k + ov, v, n)
        self.ps_from, self.ps_part, self.ps_node = p[s], ov[s], v[s]
        self.ps_starts = index2ptr(self.ps_from, k)
        # edges summed into each partial sum sent: row = send position of its (v, p) pair
        send_pos = np.full(c.pre_node.size, -1, dtype=np.int64)
        send_pos[cov[s.numpy()]] = np.arange(cov.size)
        pre = c.edge_pre
        trow, tsrc = _t(send_pos[c.col[pre]]), _t(c.src[pre])
        o = lex_order(trow, tsrc, n)
        self.t_row, self.t_src = trow[o], tsrc[o]
        self.t_ptr = index2ptr(self.t_row, cov.size)


def build_layout(graph, assignment, rank: int, k: int, *, shared: SharedArrays | None = None) -> LocalGraph:
    """The :class:`LocalGraph` of one part (``rank``) of ``graph`` cut by ``assignment``."""
    a = checked_assignment(graph, assignment, k) if shared is None else shared.a
    sh = shared or SharedArrays(graph, a, k)
    owned = sh.order[sh.starts[rank]:sh.starts[rank + 1]]
    n_own = owned.numel()
    hs, he = int(sh.h_starts[rank]), int(sh.h_starts[rank + 1])
    halo = sh.h_node[hs:he]
    ss, se = int(sh.s_starts[rank]), int(sh.s_starts[rank + 1])
    indptr, cols = _local_csr(graph, owned, halo, sh.n)
    # partial sums received and sent
    rs, re_ = int(sh.pr_starts[rank]), int(sh.pr_starts[rank + 1])
    ps, pe = int(sh.ps_starts[rank]), int(sh.ps_starts[rank + 1])
    t0, t1 = int(sh.t_ptr[ps]), int(sh.t_ptr[pe])
    sub = lambda t: None if t is None else t[owned]  # noqa: E731 - indexing copies already
    count = lambda parts: torch.bincount(parts, minlength=k).tolist()  # noqa: E731
    return LocalGraph(
        rank=rank, world_size=k, num_global_nodes=sh.n, owned=owned.clone(), indptr=indptr,
        indices=cols, halo=halo.clone(), recv_counts=count(sh.h_owner[hs:he]),
        send_idx=sh.local_of[sh.s_node[ss:se]], send_counts=count(sh.s_part[ss:se]),
        col_deg=torch.cat([sh.deg[owned], sh.deg[halo]]),
        x=sub(graph.x), y=sub(graph.y), train_mask=sub(graph.train_mask),
        val_mask=sub(graph.val_mask), test_mask=sub(graph.test_mask),
        num_classes=graph.num_classes, fingerprint=_fp(graph), class_names=_names(graph),
        halo_raw=sh.h_raw[hs:he].clone(), send_raw=sh.s_raw[ss:se].clone(),
        pre_rows=sh.local_of[sh.pr_node[rs:re_]], pre_recv_counts=count(sh.pr_from[rs:re_]),
        pre_ptr=sh.t_ptr[ps:pe + 1] - t0, pre_src=sh.local_of[sh.t_src[t0:t1]],
        pre_dst=sh.ps_node[ps:pe].clone(), pre_send_counts=count(sh.ps_part[ps:pe]))


def _names(graph) -> list[str] | None:
    names = getattr(graph, "class_names", None)
    return None if names is None else [str(v) for v in names]


def _local_csr(graph, owned: torch.Tensor, halo: torch.Tensor, n: int):
    """``(indptr int64, indices)`` of the owned rows in local columns ``[owned | halo]``, sorted
    within each row; indices int32 when the columns fit."""
    n_own, n_cols = owned.numel(), owned.numel() + halo.numel()
    it = np.int32 if n_cols < 2**31 - 1 else np.int64
    col_of = np.full(n, -1, dtype=it)
    col_of[owned.numpy()] = np.arange(n_own, dtype=it)
    col_of[halo.numpy()] = np.arange(n_own, n_cols, dtype=it)
    return gathered_csr(graph.indptr, graph.indices, owned, col_of, n_cols)


def _fp(graph) -> str:
    try:
        return graph.fingerprint
    except Exception:  # noqa: BLE001 - fingerprint is informative here
        return ""


def build_layouts(graph, assignment, k: int, hosts: int = 1) -> list[LocalGraph]:
    """Plans of all ``k`` parts, built in one process; validated with :func:`validate_layouts`
    (``hosts``: as :class:`SharedArrays`)."""
    a = checked_assignment(graph, assignment, k)
    sh = SharedArrays(graph, a, k, hosts=hosts)
    plans = [build_layout(graph, a, r, k, shared=sh) for r in range(k)]
    validate_layouts(plans)
    return plans


def _blocks(counts) -> torch.Tensor:
    off = torch.zeros(len(counts) + 1, dtype=torch.int64)
    torch.cumsum(torch.tensor(counts, dtype=torch.int64), 0, out=off[1:])
    return off


def validate_layouts(plans: list[LocalGraph]) -> None:
    """Check that what rank r sends to s is exactly what s expects from r, in order, in both
    exchange modes (mvc: raw rows, partial sums, and the edges summed into each). Only the
    exchange fields are read (node data may be gone: :func:`graphdist.partition.parts.write_parts`
    drops it once a part is written)."""
    k = len(plans)
    for s in plans:
        if len(s.recv_counts) != k or len(s.send_counts) != k:
            raise ArtifactError(f"part {s.rank}: layout is for {len(s.recv_counts)} parts, not {k}")
    mvc = all(p.has_mvc for p in plans)
    for s in plans:
        roff = _blocks(s.recv_counts)
        halo_edges = _halo_edges(s) if mvc else None
        for r in plans:
            soff, poff = _blocks(r.send_counts), _blocks(r.pre_send_counts) if mvc else None
            want = s.halo[roff[r.rank]:roff[r.rank + 1]]
            sel = slice(int(soff[s.rank]), int(soff[s.rank + 1]))
            sent = r.owned[r.send_idx[sel]]
            if sent.numel() != want.numel() or not torch.equal(sent, want):
                raise ArtifactError(f"halo layout asymmetric: part {r.rank} sends {sent.numel()} rows to "
                                    f"part {s.rank}, which expects {want.numel()} (or they differ)")
            if not mvc:
                continue
            raw_in = s.halo_raw[roff[r.rank]:roff[r.rank + 1]]
            if not torch.equal(r.send_raw[sel], raw_in):
                raise ArtifactError(f"pre-aggregation layout asymmetric: part {r.rank} sends other raw rows "
                                    f"to part {s.rank} than it expects")
            _check_partial_sums(r, s, poff, roff, halo_edges)


def _halo_edges(s: LocalGraph) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(local row, halo column index, start of each peer's block)`` of every edge of ``s`` from
    a halo column, sorted by column (so one peer's edges are one slice)."""
    h = s.indices >= s.num_owned
    rows = torch.repeat_interleave(torch.arange(s.num_owned), s.indptr[1:] - s.indptr[:-1])[h]
    cols = (s.indices[h] - s.num_owned).to(torch.int64)
    del h
    o = torch.argsort(cols, stable=True)
    rows, cols = rows[o], cols[o]
    return rows, cols, torch.searchsorted(cols, _blocks(s.recv_counts))


def _check_partial_sums(r: LocalGraph, s: LocalGraph, poff, roff, halo_edges) -> None:
    """Partial sums r -> s: same destinations on both sides, and the (v, u) edges r sums are
    exactly the edges of s from r's non-raw halo rows."""
    a, b = int(poff[s.rank]), int(poff[s.rank + 1])
    dst = r.pre_dst[a:b]
    qoff = _blocks(s.pre_recv_counts)
    got = s.owned[s.pre_rows[qoff[r.rank]:qoff[r.rank + 1]]]
    if not torch.equal(dst, got):
        raise ArtifactError(f"pre-aggregation layout asymmetric: part {r.rank} sends {dst.numel()} partial sums "
                            f"to part {s.rank}, which expects {got.numel()} (or they differ)")
    lo, hi = int(r.pre_ptr[a]), int(r.pre_ptr[b])
    sent_v = torch.repeat_interleave(dst, r.pre_ptr[a + 1:b + 1] - r.pre_ptr[a:b])
    sent_u = r.owned[r.pre_src[lo:hi]]
    rows, cols, start = halo_edges
    e0, e1 = int(start[r.rank]), int(start[r.rank + 1])  # the edges from r's halo columns
    rows, cols = rows[e0:e1], cols[e0:e1]
    hit = ~s.halo_raw[cols]
    want_v, want_u = s.owned[rows[hit]], s.halo[cols[hit]]
    n = max(r.num_global_nodes, 1)
    o1, o2 = lex_order(sent_v, sent_u, n), lex_order(want_v, want_u, n)
    if not (torch.equal(sent_v[o1], want_v[o2]) and torch.equal(sent_u[o1], want_u[o2])):
        raise ArtifactError(f"pre-aggregation layout asymmetric: the edges part {r.rank} sums for part {s.rank} "
                            "are not the edges that part leaves out")


def layout_stats(plans: list[LocalGraph]) -> dict:
    """Rows and nodes per part, for reports (``moved_rows``: rows received per layer in mvc mode)."""
    out = {"owned_nodes": [p.num_owned for p in plans], "halo_rows": [p.num_halo for p in plans],
           "local_edges": [int(p.indices.numel()) for p in plans],
           "halo_rows_total": int(sum(p.num_halo for p in plans))}
    if all(p.has_mvc for p in plans):
        out["moved_rows"] = [int(p.halo_raw.sum()) + int(p.pre_rows.numel()) for p in plans]
    return out
