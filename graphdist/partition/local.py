"""One rank's share of a partitioned graph: :class:`LocalGraph` (plain tensors, no
torch.distributed), built by :mod:`graphdist.partition.layout`.

Rank ``r`` owns the nodes with ``assignment == r``. Its **halo** is the set of remote
in-neighbours of its owned nodes. Local column ids::

    columns  0 .. n_own-1 | n_own .. n_own+h0-1 | ... | ... +h_{k-1}-1
             owned rows   | halo from peer 0    | ... | halo from peer k-1
                            (ascending global id within each peer block; h_r = 0)

The local CSR (``indptr``/``indices``) always holds every in-edge of every owned row in this
*plain* layout. Two exchange modes move the halo (:meth:`LocalGraph.exchange_layout`):

``plain``  rank s sends every halo row raw: ``send_idx`` (grouped by peer) / ``recv_counts``.
``mvc``    per ordered pair, a minimum vertex cover of the cut (``partitioners.cover``) picks
           raw rows (``send_raw`` / ``halo_raw`` mark them among the plain rows) and partial
           sums: s sends, for each destination ``pre_dst[j]``, ``sum_{u in pre_src[pre_ptr[j]:
           pre_ptr[j+1]]} A_vu h_u``; r adds it into owned row ``pre_rows[j']``. Per peer the
           message rows are ``[raw rows, ascending id | partial sums, ascending id of v]``.

Normalisation values depend on the model and are computed from the stored degrees
(:meth:`LocalGraph.normalisation`): every supported model is ``A_vu = left(v) * right(u)`` on
the stored edges (plus an optional self-loop), so a partial sum carries ``right(u)`` weights
and the receiver multiplies by ``left(v)``.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import torch

from graphdist.errors import ArtifactError
from graphdist.sparse import coo_to_csr, index_dtype, ptr2index

MODELS = ("gcn", "sage", "sym")
"""Normalisations: ``gcn`` D^-1/2 (A+I) D^-1/2 (Kipf, PyG ``gcn_norm``), ``sage`` the mean
over in-neighbours, ``sym`` D^-1/2 A D^-1/2 without self-loops (LightGCN)."""
HALO_MODES = ("plain", "mvc")


@dataclass
class ExchangeLayout:
    """Message rows one rank sends and receives per layer in one halo mode."""

    send_counts: list[int]
    """Message rows sent to each peer."""
    recv_counts: list[int]
    """Message rows received from each peer."""
    recv_col: torch.Tensor
    """``[n_halo]`` message row that carries each plain halo column, -1 if it arrives summed."""
    pre_col: torch.Tensor
    """``[len(pre_rows)]`` message row of each partial sum received."""
    send_raw_pos: torch.Tensor
    """``[n_raw_sent]`` message row of each raw row sent (the rows ``send_idx[send_raw]``)."""
    send_pre_pos: torch.Tensor
    """``[len(pre_dst)]`` message row of each partial sum sent."""


@dataclass(eq=False)
class LocalGraph:
    """One rank's share of the graph: owned rows, halo columns, exchange layouts, node data."""

    rank: int
    """This part's id (= the rank that trains on it)."""
    world_size: int
    """Number of parts k."""
    num_global_nodes: int
    """N of the whole graph."""
    owned: torch.Tensor
    """``[n_own]`` int64 global ids of owned nodes (ascending unless :meth:`reordered`)."""
    indptr: torch.Tensor
    """``[n_own+1]`` int64 local CSR row pointer (rows = owned destinations)."""
    indices: torch.Tensor
    """``[nnz]`` local column ids ``[owned | halo]`` of each in-neighbour, sorted within a row:
    int32 (int64 only when the columns do not fit)."""
    halo: torch.Tensor
    """``[n_halo]`` int64 global ids of halo columns, grouped by owning peer, ascending within."""
    recv_counts: list[int]
    """Plain mode: halo rows received from each peer (``len == world_size``)."""
    send_idx: torch.Tensor
    """``[sum(send_counts)]`` int64 owned-local rows to send, grouped by peer, ascending id."""
    send_counts: list[int]
    """Plain mode: rows sent to each peer (``len == world_size``)."""
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
    class_names: list[str] | None = None
    """The name of each class where the input's labels are names (:attr:`Graph.class_names`),
    the same on every part; None where labels are integers."""
    halo_raw: torch.Tensor | None = None
    """mvc: ``[n_halo]`` bool, the halo column arrives raw (else its edges arrive summed)."""
    send_raw: torch.Tensor | None = None
    """mvc: ``[len(send_idx)]`` bool, the row is sent raw (else it only enters partial sums)."""
    pre_rows: torch.Tensor | None = None
    """mvc: ``[n_pre_in]`` owned-local rows receiving a partial sum, by peer, ascending id."""
    pre_recv_counts: list[int] | None = None
    """mvc: partial sums received from each peer."""
    pre_ptr: torch.Tensor | None = None
    """mvc: ``[n_pre_out+1]`` row pointer of the partial sums this rank sends."""
    pre_src: torch.Tensor | None = None
    """mvc: owned-local source rows summed into each partial sum sent."""
    pre_dst: torch.Tensor | None = None
    """mvc: ``[n_pre_out]`` global id of the destination of each partial sum sent (by peer,
    ascending id)."""
    pre_send_counts: list[int] | None = None
    """mvc: partial sums sent to each peer."""
    order_kept: ClassVar[bool] = False
    """the owned rows' order was read from a kept one (:meth:`reordered`), not computed (set on
    the copy :meth:`reordered` returns; not a field: never saved with a part)"""

    @property
    def num_owned(self) -> int:
        return int(self.owned.numel())

    @property
    def num_halo(self) -> int:
        return int(self.halo.numel())

    @property
    def num_cols(self) -> int:
        return self.num_owned + self.num_halo

    @property
    def has_mvc(self) -> bool:
        return self.halo_raw is not None and self.pre_ptr is not None

    def row_of_edges(self) -> torch.Tensor:
        """``[nnz]`` local destination row of each stored edge."""
        return ptr2index(self.indptr, int(self.indices.numel()))

    # ------------------------------------------------------------------ normalisation
    def normalisation(self, model: str) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """``(left [n_own], right [n_cols], self_loops)`` float64 with ``A_vu = left[v] *
        right[u]`` on the stored edges; with ``self_loops`` existing self-loops are replaced by
        one of value ``left[v] * right[v]`` (``gcn``), for ``sym`` they are dropped."""
        if model == "gcn":
            dinv = (self.col_deg.to(torch.float64) + 1.0).rsqrt()
            return dinv[:self.num_owned], dinv, True
        if model == "sage":
            deg = (self.indptr[1:] - self.indptr[:-1]).clamp(min=1).to(torch.float64)
            return 1.0 / deg, torch.ones(self.num_cols, dtype=torch.float64), False
        if model == "sym":
            d = self.col_deg.to(torch.float64)
            dinv = torch.where(d > 0, d.clamp(min=1.0).rsqrt(), torch.zeros_like(d))
            return dinv[:self.num_owned], dinv, False
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")

    def edges(self, model: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(rows, cols, values float64)`` of the normalised adjacency in the plain layout,
        sorted by (row, col)."""
        left, right, loops = self.normalisation(model)
        rows, cols = self.row_of_edges(), self.indices.to(torch.int64)
        if model in ("gcn", "sym"):  # self-loops replaced (gcn) or dropped (sym)
            keep = cols != rows
            rows, cols = rows[keep], cols[keep]
        if loops:
            n = torch.arange(self.num_owned)
            rows, cols = torch.cat([rows, n]), torch.cat([cols, n])
        vals = left[rows] * right[cols]
        ip, c, v = coo_to_csr(rows, cols, vals, self.num_owned, self.num_cols)
        return ptr2index(ip, int(c.numel())), c, v

    def normalised_csr(self, model: str):
        """``(indptr int64, cols, values float32)`` numpy arrays of the normalised adjacency in
        the plain layout, sorted by (row, col): the entries of :meth:`edges` (values computed in
        float64, then narrowed), built from the stored CSR without E-sized int64 temporaries:
        self-loops dropped with a mask and inserted with one ``np.insert``, values in blocks.
        ``cols`` keeps the dtype of :attr:`indices` (int32 when the columns fit)."""
        import numpy as np
        left, right, loops = self.normalisation(model)
        left, right = left.numpy(), right.numpy()
        n = self.num_owned
        ptr = self.indptr.numpy().astype(np.int64, copy=False)
        cols = self.indices.numpy()
        it = np.int32 if n < 2**31 - 1 else np.int64
        deg = np.diff(ptr)
        if model in ("gcn", "sym") and cols.size:  # stored self-loops replaced (gcn) or dropped (sym)
            rows = np.repeat(np.arange(n, dtype=it), deg)
            loop = cols == rows
            del rows
            if loop.any():
                deg = deg - _per_row(loop, ptr)
                cols = cols[~loop]
                ptr = np.concatenate([[0], np.cumsum(deg)])
            del loop
        if loops:  # one self-loop per row, after the row's columns below it
            below = _per_row(cols < np.repeat(np.arange(n, dtype=it), deg), ptr)
            cols = np.insert(cols, ptr[:-1] + below, np.arange(n, dtype=cols.dtype))
            deg = deg + 1
            ptr = ptr + np.arange(n + 1)
        vals = np.empty(cols.size, dtype=np.float32)
        r0 = 0
        while r0 < n:  # rows r0..r1-1 hold about 2^22 entries: float64 products in blocks
            r1 = min(max(int(np.searchsorted(ptr, ptr[r0] + (1 << 22), side="right")) - 1, r0 + 1), n)
            e0, e1 = int(ptr[r0]), int(ptr[r1])
            vals[e0:e1] = left[np.repeat(np.arange(r0, r1), deg[r0:r1])] * right[cols[e0:e1]]
            r0 = r1
        return ptr, cols, vals

    def gcn_adjacency(self):
        """``(indptr, indices, values)`` of ``D^-1/2 (A+I) D^-1/2`` restricted to owned rows."""
        return self._csr("gcn")

    def mean_adjacency(self):
        """``(indptr, indices, values)`` of the mean aggregator (``1/in-degree`` per row)."""
        return self._csr("sage")

    def _csr(self, model):
        rows, cols, vals = self.edges(model)
        return coo_to_csr(rows, cols, vals.to(torch.float32), self.num_owned, self.num_cols)

    # ------------------------------------------------------------------ exchange
    def exchange_layout(self, halo: str = "plain") -> ExchangeLayout:
        """Where every raw row and partial sum sits among the message rows of ``halo`` mode."""
        k = self.world_size
        if halo not in HALO_MODES:
            raise ValueError(f"halo must be one of {', '.join(HALO_MODES)}, got {halo!r}")
        if halo == "mvc" and not self.has_mvc:
            raise ArtifactError(f"part {self.rank} has no pre-aggregation layout (written by an older "
                                "graphdist); rebuild the partition with `graphdist partition`, or use --halo plain")
        recv_peer = torch.repeat_interleave(torch.arange(k), torch.tensor(self.recv_counts, dtype=torch.int64))
        send_peer = torch.repeat_interleave(torch.arange(k), torch.tensor(self.send_counts, dtype=torch.int64))
        if halo == "plain":
            e = torch.zeros(0, dtype=torch.int64)
            return ExchangeLayout(list(self.send_counts), list(self.recv_counts),
                                  _positions(recv_peer, e, k)[0], e, _positions(send_peer, e, k)[0], e)
        pre_in = torch.repeat_interleave(torch.arange(k), torch.tensor(self.pre_recv_counts, dtype=torch.int64))
        pre_out = torch.repeat_interleave(torch.arange(k), torch.tensor(self.pre_send_counts, dtype=torch.int64))
        raw_in, pre_col, recv_counts = _positions(recv_peer[self.halo_raw], pre_in, k)
        recv_col = torch.full((self.num_halo,), -1, dtype=torch.int64)
        recv_col[self.halo_raw] = raw_in
        raw_out, pre_pos, send_counts = _positions(send_peer[self.send_raw], pre_out, k)
        return ExchangeLayout(send_counts, recv_counts, recv_col, pre_col, raw_out, pre_pos)

    # ------------------------------------------------------------------ locality
    def reordered(self, order: str = "rcm", width: int = 64, kept: str | None = None,
                  write: bool = True) -> "LocalGraph":
        """A copy whose owned rows are permuted for locality of the owned-block SpMM
        (:func:`graphdist.partition.order.locality_order`: ``blocks``, ``rcm``, ``community``,
        ``degree``; ``none``: unchanged; ``width``: the widest product's columns, which sizes
        the ``blocks`` order's blocks). Message order (by global id) and halo columns are
        unchanged. ``kept``: a folder (a run's checkpoint folder) whose kept order of this part
        is read instead of computed (METIS blocks of a products-size part take minutes), and
        where a computed one is kept when ``write``; ``self.order_kept`` says which happened."""
        if order == "none" or self.num_owned < 3:
            return self
        from graphdist.partition.order import keep, kept_name, locality_order, read_kept
        name = kept_name(self.fingerprint, order, width, self.world_size, self.rank)
        perm = read_kept(kept, name, self.owned) if kept else None
        reused = perm is not None
        if perm is None:
            perm = locality_order(self.indptr, self.indices, self.num_owned, order, width)
        out = self.permuted(perm)
        if kept and write and not reused:
            keep(kept, name, out.owned)
        out.order_kept = reused
        return out

    def permuted(self, perm: torch.Tensor) -> "LocalGraph":
        """A copy with owned row ``i`` = old owned row ``perm[i]`` (columns renumbered alike)."""
        n = self.num_owned
        inv = torch.empty(n, dtype=torch.int64)
        inv[perm] = torch.arange(n)
        ip, cols = _permuted_csr(self.indptr, self.indices, perm, inv, self.num_cols)
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        sub = lambda t: None if t is None else t[perm]  # noqa: E731
        d.update(owned=self.owned[perm], indptr=ip, indices=cols, send_idx=inv[self.send_idx],
                 col_deg=torch.cat([self.col_deg[:n][perm], self.col_deg[n:]]), x=sub(self.x), y=sub(self.y),
                 train_mask=sub(self.train_mask), val_mask=sub(self.val_mask), test_mask=sub(self.test_mask))
        if self.has_mvc:
            d.update(pre_rows=inv[self.pre_rows], pre_src=inv[self.pre_src])
        for name, v in d.items():  # share no storage with self: a memory-mapped part file is
            if isinstance(v, torch.Tensor) and v is getattr(self, name):  # unmapped once self goes
                d[name] = v.clone()
        return LocalGraph(**d)

    def without_edges(self) -> "LocalGraph":
        """A shallow copy without the local CSR (``indptr``/``indices`` empty), for a trainer
        once the operators that need the CSR (the adjacency, the exchangers) are built: the CSR's
        memory is freed when nothing else holds this object. Plans, degrees and node data are
        shared; :meth:`edges` and :meth:`reordered` do not work on the copy."""
        from dataclasses import replace
        return replace(self, indptr=torch.zeros(1, dtype=torch.int64),
                       indices=torch.zeros(0, dtype=self.indices.dtype))

    def nbytes(self) -> int:
        return sum(int(t.numel() * t.element_size()) for t in
                   (getattr(self, f.name) for f in fields(self)) if isinstance(t, torch.Tensor))

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _per_row(mask, ptr):
    """``[n]`` int64 count of True entries of ``mask`` in each CSR row (``ptr`` int64)."""
    import numpy as np
    n = ptr.size - 1
    if mask.size == 0:
        return np.zeros(n, dtype=np.int64)
    cs = np.zeros(mask.size + 1, dtype=np.int32 if mask.size < 2**31 - 1 else np.int64)
    np.cumsum(mask, out=cs[1:])
    return (cs[ptr[1:]] - cs[ptr[:-1]]).astype(np.int64)


def _positions(block_a: torch.Tensor, block_b: torch.Tensor, k: int):
    """Message rows when each peer block holds its A items, then its B items (both given in
    block order): ``(position of each A item, position of each B item, rows per block)``."""
    ca = torch.bincount(block_a, minlength=k)
    cb = torch.bincount(block_b, minlength=k)
    off = torch.cumsum(ca + cb, 0) - (ca + cb)
    a_start = torch.cumsum(ca, 0) - ca
    b_start = torch.cumsum(cb, 0) - cb
    pa = off[block_a] + torch.arange(block_a.numel()) - a_start[block_a]
    pb = off[block_b] + ca[block_b] + torch.arange(block_b.numel()) - b_start[block_b]
    return pa, pb, (ca + cb).tolist()


def _permuted_csr(indptr, indices, perm, inv, n_cols: int):
    """``(indptr int64, indices)`` of the rows ``perm`` with owned columns renumbered by ``inv``,
    sorted within each row: rows gathered in blocks, columns mapped through an int32 table and
    sorted in place per row (:func:`gathered_csr`)."""
    import numpy as np
    n = perm.numel()
    it = index_dtype(n_cols)
    nt = np.int32 if it == torch.int32 else np.int64
    col_map = np.concatenate([inv.numpy().astype(nt), np.arange(n, n_cols, dtype=nt)])
    return gathered_csr(indptr, indices, perm, col_map, n_cols)


def gathered_csr(indptr, indices, rows: torch.Tensor, col_map, n_cols: int):
    """``(indptr int64, indices)`` of CSR rows ``rows`` with every column ``c`` renamed
    ``col_map[c]`` (a numpy table of the index dtype) and sorted within each row: rows gathered
    in blocks, sorted in place per row (no E-sized int64 keys; same as a lexicographic sort)."""
    import numpy as np
    import scipy.sparse as sp
    from partitioners.common import gather_rows
    nt = col_map.dtype
    ptr, src = gather_rows(indptr, indices, rows)
    cols = col_map[src]
    del src, col_map
    if cols.size:
        pt = ptr.astype(nt) if ptr[-1] < 2**31 - 1 else ptr
        m = sp.csr_matrix((np.ones(cols.size, dtype=bool), cols.astype(pt.dtype, copy=False), pt),
                          shape=(rows.numel(), n_cols), copy=False)
        m.has_sorted_indices = False
        m.sort_indices()  # in place, row by row
        cols = m.indices.astype(nt, copy=False)
        del m
    return torch.from_numpy(ptr), torch.from_numpy(cols)
