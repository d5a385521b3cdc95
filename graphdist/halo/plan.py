"""Local graph and halo plan of each part, as plain tensors (no torch.distributed here).

Rank ``r`` owns the nodes with ``assignment == r`` (in ascending global id). Its **halo** is the
set of remote in-neighbours of its owned nodes: every source ``j`` of an edge ``j -> i`` with
``i`` owned by ``r`` and ``j`` owned by some peer ``s != r``. Local column ids::

    columns  0 .. n_own-1 | n_own .. n_own+h0-1 | ... | ... +h_{k-1}-1
             owned rows   | halo from peer 0    | ... | halo from peer k-1
                            (sorted by global id within each peer block; h_r = 0)

    indptr  [n_own+1]   local CSR over owned destination rows
    indices [nnz]       local column id of each in-neighbour (sorted per row)
    send_idx[sum(send_counts)]  owned-local rows to send, grouped by peer 0,1,..,k-1
    send_counts[k]      rows r sends to each peer      (send_counts[r] == 0)
    recv_counts[k]      halo rows r receives per peer  (recv_counts[r] == 0)

Symmetry: the rows ``r`` sends to ``s`` (``owned[r][send_idx block s]``) are exactly the
global ids of ``s``'s "halo from peer r" block, in the same order (both are sorted by global
id), so ``all_to_all_single(recv, gather(send_idx), recv_counts, send_counts)`` fills the halo.

GCN normalisation (Kipf & Welling, as PyG ``gcn_norm``): ``D^-1/2 (A + I) D^-1/2`` with
``d_i = 1 + global in-degree of i`` (existing self-loops replaced by one of weight 1). Halo
columns need their *global* degree, so each part stores ``col_deg`` for all its columns.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from graphdist.errors import ArtifactError
from graphdist.sparse import coo_to_csr, index2ptr, lex_order, ptr2index


@dataclass(eq=False)
class LocalGraph:
    """One rank's share of the graph: owned rows, halo columns, exchange plan, node data."""

    rank: int
    """This part's id (= the rank that trains on it)."""
    world_size: int
    """Number of parts k."""
    num_global_nodes: int
    """N of the whole graph."""
    owned: torch.Tensor
    """``[n_own]`` int64 global ids of owned nodes, ascending; local row ``i`` = ``owned[i]``."""
    indptr: torch.Tensor
    """``[n_own+1]`` int64 local CSR row pointer (rows = owned destinations)."""
    indices: torch.Tensor
    """``[nnz]`` int64 local column ids ``[owned | halo]`` of each in-neighbour."""
    halo: torch.Tensor
    """``[n_halo]`` int64 global ids of halo columns, grouped by owning peer, ascending within."""
    recv_counts: list[int]
    """Halo rows received from each peer (``len == world_size``)."""
    send_idx: torch.Tensor
    """``[sum(send_counts)]`` int64 owned-local rows to send, grouped by destination peer."""
    send_counts: list[int]
    """Rows sent to each peer (``len == world_size``)."""
    col_deg: torch.Tensor
    """``[n_own+n_halo]`` int64 global in-degree (without self-loops) of every local column."""
    x: torch.Tensor | None = None
    """``[n_own, F]`` float32 owned features."""
    y: torch.Tensor | None = None
    """``[n_own]`` int64 owned labels."""
    train_mask: torch.Tensor | None = None
    """``[n_own]`` bool."""
    val_mask: torch.Tensor | None = None
    """``[n_own]`` bool."""
    test_mask: torch.Tensor | None = None
    """``[n_own]`` bool."""
    num_classes: int = 0
    """Global number of classes (max label + 1 over the whole graph)."""
    fingerprint: str = ""
    """Fingerprint of the graph this part was cut from."""

    @property
    def num_owned(self) -> int:
        return int(self.owned.numel())

    @property
    def num_halo(self) -> int:
        return int(self.halo.numel())

    @property
    def num_cols(self) -> int:
        return self.num_owned + self.num_halo

    def row_of_edges(self) -> torch.Tensor:
        """``[nnz]`` local destination row of each stored edge."""
        return ptr2index(self.indptr, int(self.indices.numel()))

    def gcn_adjacency(self):
        """``(indptr, indices, values)`` of ``D^-1/2 (A+I) D^-1/2`` restricted to owned rows."""
        n = self.num_owned
        rows = self.row_of_edges()
        cols = self.indices
        keep = cols != rows  # drop existing self-loops; one of weight 1 is added below
        rows = torch.cat([rows[keep], torch.arange(n)])
        cols = torch.cat([cols[keep], torch.arange(n)])
        dinv = (self.col_deg.to(torch.float64) + 1.0).rsqrt()
        vals = (dinv[rows] * dinv[cols]).to(torch.float32)
        return coo_to_csr(rows, cols, vals, n, self.num_cols)

    def mean_adjacency(self):
        """``(indptr, indices, values)`` of the mean aggregator (``1/in-degree`` per row)."""
        deg = (self.indptr[1:] - self.indptr[:-1]).clamp(min=1).to(torch.float32)
        vals = (1.0 / deg)[self.row_of_edges()]
        return self.indptr.clone(), self.indices.clone(), vals

    def nbytes(self) -> int:
        return sum(int(t.numel() * t.element_size()) for t in
                   (self.owned, self.indptr, self.indices, self.halo, self.send_idx, self.col_deg,
                    self.x, self.y, self.train_mask, self.val_mask, self.test_mask) if t is not None)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _check_assignment(graph, assignment, k) -> torch.Tensor:
    a = torch.as_tensor(assignment).to(torch.int64)
    if a.shape != (graph.num_nodes,):
        raise ArtifactError(f"assignment has shape {tuple(a.shape)} but the graph has {graph.num_nodes} nodes")
    if a.numel() and (int(a.min()) < 0 or int(a.max()) >= k):
        raise ArtifactError(f"assignment values must lie in 0..{k - 1}, got {int(a.min())}..{int(a.max())}")
    return a


class _Shared:
    """Whole-graph arrays every part's plan is cut from (computed once, vectorised)."""

    def __init__(self, graph, a, k):
        n = graph.num_nodes
        self.a, self.k, self.n = a, k, n
        order = torch.argsort(a, stable=True)  # nodes grouped by part, ascending id within
        starts = index2ptr(a[order], k)
        self.starts, self.order = starts, order
        self.local_of = torch.empty(n, dtype=torch.int64)  # position of node in its owner's list
        self.local_of[order] = torch.arange(n) - starts[a[order]]
        src, dst = graph.indices, graph.dst_of_edges()
        deg = graph.in_degree() - torch.bincount(dst[src == dst], minlength=n)
        self.deg = deg
        pd, ps = a[dst], a[src]
        cross = pd != ps
        # distinct (receiving part, source node) pairs, sorted by (part, owner of source, id)
        key = torch.unique((pd[cross] * k + ps[cross]) * n + src[cross])
        self.h_part, self.h_owner, self.h_node, self.h_starts = _decode(key, k, n)
        # same pairs sorted by (owner of source, receiving part, id) for the send lists
        skey = torch.sort((self.h_owner * k + self.h_part) * n + self.h_node).values
        self.s_owner, self.s_part, self.s_node, self.s_starts = _decode(skey, k, n)


def build_plan(graph, assignment, rank: int, k: int, *, _shared: _Shared | None = None) -> LocalGraph:
    """The :class:`LocalGraph` of one part (``rank``) of ``graph`` cut by ``assignment``."""
    a = _check_assignment(graph, assignment, k) if _shared is None else _shared.a
    sh = _shared or _Shared(graph, a, k)
    owned = sh.order[sh.starts[rank]:sh.starts[rank + 1]]
    n_own = owned.numel()
    hs, he = int(sh.h_starts[rank]), int(sh.h_starts[rank + 1])
    halo, halo_owner = sh.h_node[hs:he], sh.h_owner[hs:he]
    recv_counts = torch.bincount(halo_owner, minlength=k).tolist()
    ss, se = int(sh.s_starts[rank]), int(sh.s_starts[rank + 1])
    send_idx = sh.local_of[sh.s_node[ss:se]]
    send_counts = torch.bincount(sh.s_part[ss:se], minlength=k).tolist()
    # local CSR: rows = owned nodes, cols via a global->local map for this part
    col_of = torch.full((sh.n,), -1, dtype=torch.int64)
    col_of[owned] = torch.arange(n_own)
    col_of[halo] = n_own + torch.arange(halo.numel())
    lo, hi = graph.indptr[owned], graph.indptr[owned + 1]
    cnt = hi - lo
    indptr = torch.zeros(n_own + 1, dtype=torch.int64)
    torch.cumsum(cnt, 0, out=indptr[1:])
    pos = torch.arange(int(indptr[-1])) - torch.repeat_interleave(indptr[:-1] - lo, cnt)
    cols = col_of[graph.indices[pos]]
    rows = ptr2index(indptr, int(indptr[-1]))
    cols = cols[lex_order(rows, cols, n_own + halo.numel())]
    sub = lambda t: None if t is None else t[owned].clone()  # noqa: E731
    return LocalGraph(
        rank=rank, world_size=k, num_global_nodes=sh.n, owned=owned.clone(), indptr=indptr,
        indices=cols, halo=halo.clone(), recv_counts=recv_counts, send_idx=send_idx,
        send_counts=send_counts, col_deg=torch.cat([sh.deg[owned], sh.deg[halo]]),
        x=sub(graph.x), y=sub(graph.y), train_mask=sub(graph.train_mask),
        val_mask=sub(graph.val_mask), test_mask=sub(graph.test_mask),
        num_classes=graph.num_classes, fingerprint=_fp(graph))


def _fp(graph) -> str:
    try:
        return graph.fingerprint
    except Exception:  # noqa: BLE001 - fingerprint is informative here
        return ""


def build_plans(graph, assignment, k: int) -> list[LocalGraph]:
    """Plans of all ``k`` parts, built in one process; validated with :func:`validate_plans`."""
    a = _check_assignment(graph, assignment, k)
    sh = _Shared(graph, a, k)
    plans = [build_plan(graph, a, r, k, _shared=sh) for r in range(k)]
    validate_plans(plans)
    return plans


def validate_plans(plans: list[LocalGraph]) -> None:
    """Check that what rank r sends to s is exactly what s expects from r, in order."""
    k = len(plans)
    for s in plans:
        if len(s.recv_counts) != k or len(s.send_counts) != k:
            raise ArtifactError(f"part {s.rank}: plan is for {len(s.recv_counts)} parts, not {k}")
    for r in plans:
        soff = torch.zeros(k + 1, dtype=torch.int64)
        torch.cumsum(torch.tensor(r.send_counts), 0, out=soff[1:])
        for s in plans:
            roff = sum(s.recv_counts[:r.rank])
            want = s.halo[roff:roff + s.recv_counts[r.rank]]
            sent = r.owned[r.send_idx[soff[s.rank]:soff[s.rank + 1]]]
            if sent.numel() != want.numel() or not torch.equal(sent, want):
                raise ArtifactError(f"halo plan asymmetric: part {r.rank} sends {sent.numel()} rows to "
                                    f"part {s.rank}, which expects {want.numel()} (or they differ)")


def plan_stats(plans: list[LocalGraph]) -> dict:
    """Rows and nodes per part, for reports."""
    return {"owned_nodes": [p.num_owned for p in plans], "halo_rows": [p.num_halo for p in plans],
            "local_edges": [int(p.indices.numel()) for p in plans],
            "halo_rows_total": int(sum(p.num_halo for p in plans))}


def _decode(key: torch.Tensor, k: int, n: int):
    """Sorted keys ``(a * k + b) * n + node`` -> ``(a, b, node, starts)`` where ``starts[k+1]``
    delimits each value of ``a``."""
    a = torch.div(key, k * n, rounding_mode="floor")
    b = torch.div(key, n, rounding_mode="floor") - a * k
    return a, b, key % n, index2ptr(a, k)
