"""A rank's normalised adjacency as sparse operators, and its product with the halo exchange.

``SparseAdj.propagate(h, exchanger)`` = ``A @ [h ; halo rows of h]`` for the rows ``h`` a rank
owns. Three operators, each kept as CSR of itself and of its transpose (:class:`CSRPair`, so a
backward is a forward SpMM too)::

    T      [n_msg_out, n_own]   send operator: message rows from owned rows (raw rows are
                                one-hot; a partial sum for v has right(u) on its sources u)
    A_own  [n_own, n_own]       the owned block
    A_halo [n_own, n_msg_in]    received message rows -> owned rows (a raw row u has
                                left(v) right(u) in row v; a partial sum for v has left(v))

    forward    send = T h ;  post the exchange ;  out = A_own h  (while rows travel) ;
               out += A_halo recv
    backward   g_msg = A_halo^T g ; post the reverse exchange ; g_h = A_own^T g ;
               g_h += T^T back

In ``plain`` mode ``T`` is a gather (``h[send_idx]``, backward ``index_add``). Used by every
workload that propagates over a partitioned graph (GCN/SAGE, LightGCN).
"""
from __future__ import annotations

import copy
import weakref
from typing import NamedTuple

import torch

from graphdist.exchange.csr import CSRPair
from graphdist.sparse import ptr2index

__all__ = ["SparseAdj"]


class SparseAdj:
    """A rank's normalised adjacency split by column block, ``A = [A_own | A_halo]``, with an
    optional send operator ``T`` (see the module docstring).

    ``SparseAdj(indptr, indices, values, n_rows, n_cols)`` takes any matrix in the plain layout
    (columns ``[owned | halo from peer 0 | ...]``) and exchanges with ``send_idx`` (plain mode);
    :meth:`for_model` builds the normalised adjacency of a model in either halo mode. At world
    size 1 there is no halo block.
    """

    def __init__(self, indptr, indices, values, n_rows: int, n_cols: int, device="cpu"):
        self.shape = (n_rows, n_cols)
        self.nnz = int(indices.numel())
        dev = indices.device
        rows = ptr2index(indptr.to(dev), int(indices.numel()))
        own = indices < n_rows
        self.send = None
        self.halo_mode = "plain"
        if bool(own.all()):
            self.own, self.halo = CSRPair(rows, indices, values, n_rows, n_rows, device), None
        else:
            self.own = CSRPair(rows[own], indices[own], values[own], n_rows, n_rows, device)
            h = ~own
            self.halo = CSRPair(rows[h], indices[h] - n_rows, values[h], n_rows, n_cols - n_rows, device)

    @classmethod
    def for_model(cls, lg, model: str, device="cpu", halo: str = "plain") -> "SparseAdj":
        """The normalised adjacency a ``gcn``, ``sage`` or ``sym`` (LightGCN: D^-1/2 A D^-1/2,
        no self-loops) model needs, from a LocalGraph, for the ``plain`` or ``mvc`` exchange."""
        ptr, cols, vals = lg.normalised_csr(model)
        n = lg.num_owned
        own_ptr, own_cols, own_vals, h_rows, h_cols, h_vals = _split_owned(ptr, cols, vals, n)
        del ptr, cols, vals
        self = cls.__new__(cls)
        self.shape, self.nnz = (n, lg.num_cols), int(own_cols.size + h_cols.size)
        self.send, self.halo_mode = None, "plain"
        self.own = CSRPair.from_csr(own_ptr, own_cols, own_vals, n, n, device)
        del own_ptr, own_cols, own_vals
        if halo == "plain" or lg.world_size == 1:
            self.halo = None if h_cols.size == 0 else CSRPair(
                torch.from_numpy(h_rows), torch.from_numpy(h_cols), torch.from_numpy(h_vals), n,
                lg.num_cols - n, device)
            return self
        self.halo_mode = halo
        lay = lg.exchange_layout(halo)
        left, right, _ = lg.normalisation(model)
        rows_h, hc, vals_h = (torch.from_numpy(a) for a in (h_rows, h_cols, h_vals))
        # received rows: raw columns keep their edges; each partial sum is one entry left(v)
        mc = lay.recv_col[hc]
        keep = mc >= 0
        n_in = sum(lay.recv_counts)
        self.halo = CSRPair.from_coo(torch.cat([rows_h[keep], lg.pre_rows]), torch.cat([mc[keep], lay.pre_col]),
                                     torch.cat([vals_h[keep], left[lg.pre_rows].to(torch.float32)]), n, n_in, device)
        # send operator: raw rows one-hot; partial sums right(u) on their sources
        raw_src = lg.send_idx[lg.send_raw]
        pre_row = torch.repeat_interleave(lay.send_pre_pos, lg.pre_ptr[1:] - lg.pre_ptr[:-1])
        n_out = sum(lay.send_counts)
        self.send = CSRPair.from_coo(torch.cat([lay.send_raw_pos, pre_row]), torch.cat([raw_src, lg.pre_src]),
                                     torch.cat([torch.ones(raw_src.numel(), dtype=torch.float64),
                                                right[lg.pre_src]]), n_out, n, device)
        return self

    rounds = 1
    """Exchange rounds of a product (:meth:`in_rounds`, :mod:`graphdist.exchange.rounds`)."""
    _blocks = None

    def in_rounds(self, rounds: int, send_counts: list[int], recv_counts: list[int]) -> "SparseAdj":
        """This adjacency for an exchange in ``rounds`` rounds (:mod:`graphdist.exchange.rounds`):
        its halo block split by columns and its mvc send operator by rows; ``send_counts`` /
        ``recv_counts`` are the exchanger's message rows per peer. The split blocks replace the
        whole ones; ``rounds = 1`` leaves it as it is."""
        from graphdist.exchange.rounds import round_of, split_columns, split_rows
        rounds = int(rounds)
        if rounds <= 1 or self.rounds == rounds:
            return self
        if self.rounds != 1:
            raise ValueError(f"this adjacency is already split into {self.rounds} rounds")
        if sum(recv_counts) != self.n_recv or (self.send is not None and sum(send_counts) != self.n_send):
            raise ValueError("the exchange counts do not match this adjacency's halo")
        halo = [None] * rounds if self.halo is None else split_columns(self.halo, round_of(recv_counts, rounds)[0],
                                                                       rounds)
        send = [None] * rounds if self.send is None else split_rows(self.send, round_of(send_counts, rounds)[0],
                                                                    rounds)
        self._blocks, self.rounds = list(zip(halo, send)), rounds
        # the whole blocks go: their shapes and entry counts stay for the checks
        self.halo = None if self.halo is None else _Whole(self.halo.shape, self.halo.nnz)
        self.send = None if self.send is None else _Whole(self.send.shape, self.send.nnz)
        return self

    def with_blocks(self, halo, send) -> "SparseAdj":
        """This adjacency with other halo and send blocks (``CSRPair`` or None), the owned block
        and everything else shared: one epoch's sampled cut (:mod:`graphdist.exchange.boundary`)."""
        if self.rounds != 1:
            raise ValueError(f"an adjacency split into {self.rounds} rounds takes no other blocks")
        new = copy.copy(self)
        new.halo, new.send = halo, send
        return new

    def blocks(self) -> list[tuple]:
        """``[(A_halo block, T block)]`` per round (None where there is none)."""
        return self._blocks if self._blocks is not None else [(self.halo, self.send)]

    @property
    def n_send(self) -> int | None:
        """Message rows this adjacency sends (None: the exchanger's ``send_idx`` decides)."""
        return None if self.send is None else self.send.shape[0]

    @property
    def n_recv(self) -> int:
        return 0 if self.halo is None else self.halo.shape[1]

    def propagate(self, h: torch.Tensor, exchanger=None, *, reuse: bool = False) -> torch.Tensor:
        """``A @ [h ; halo rows of h]`` for owned rows ``h [n_own, F]`` (autograd-aware).

        ``reuse=True``, for an input that needs no gradient and no active exchange: the product
        is kept while ``h`` lives, and a later call with the same, unmodified ``h`` (same
        object, same version) returns it (the caller must not change it in place). The
        evaluation pass propagates the same features every epoch. ``exchanger`` may be a pass's
        :class:`~graphdist.exchange.resident.HeldRows` (the input's halo rows held, no exchange)."""
        if getattr(exchanger, "held", False):  # the input's halo rows are held (graphdist.exchange.resident)
            return exchanger.product(h, self, reuse)
        local = exchanger is None or not exchanger.active
        if reuse and local and not h.requires_grad:
            return self._kept_product(h)
        if local:
            if self.halo is not None and self.halo.nnz:
                raise ValueError("this adjacency has halo columns but no active halo exchanger was given")
            return _SpMM.apply(h, self.own)
        if (exchanger.n_recv != self.n_recv or (self.send is None and exchanger.send_idx is None)
                or (self.send is not None and exchanger.n_send != self.n_send)):
            raise ValueError(f"the halo exchanger moves {exchanger.n_send} / {exchanger.n_recv} rows but this "
                             f"adjacency ({self.halo_mode}) expects {self.n_send} / {self.n_recv}: build both "
                             "for the same halo mode")
        if getattr(exchanger, "rounds", 1) != self.rounds:
            raise ValueError(f"the halo exchanger moves its rows in {getattr(exchanger, 'rounds', 1)} round(s) but "
                             f"this adjacency is split into {self.rounds}: call in_rounds on both")
        return _HaloSpMM.apply(h, self, exchanger)

    def _kept_product(self, h: torch.Tensor) -> torch.Tensor:
        kept = self.__dict__.setdefault("_kept", {})
        hit = kept.get(id(h))
        if hit is not None and hit[0]() is h and hit[1] == h._version:
            return hit[2]
        if self.halo is not None and self.halo.nnz:
            raise ValueError("this adjacency has halo columns but no active halo exchanger was given")
        out = self.own.mm(h)
        key = id(h)
        ref = weakref.ref(h, lambda _, k=key, d=kept: d.pop(k, None))  # dies with h
        kept[key] = (ref, h._version, out)
        return out

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_kept", None)
        return state

    def __matmul__(self, h: torch.Tensor) -> torch.Tensor:
        return self.propagate(h)


class _Whole(NamedTuple):
    """A halo block split into rounds (:meth:`SparseAdj.in_rounds`): what the whole had."""

    shape: tuple
    nnz: int


def _split_owned(ptr, cols, vals, n: int):
    """A plain-layout CSR split into the owned block (CSR: the first columns of every row, as
    columns are sorted and owned ones come first) and the halo entries (COO, by (row, col),
    halo columns counted from 0)."""
    import numpy as np
    own = cols < n
    if own.all():
        e = np.zeros(0, dtype=cols.dtype)
        return ptr, cols, vals, e, e, np.zeros(0, dtype=np.float32)
    cs = np.zeros(cols.size + 1, dtype=np.int32 if cols.size < 2**31 - 1 else np.int64)
    np.cumsum(own, out=cs[1:])
    own_ptr = cs[ptr].astype(np.int64)
    del cs
    h = ~own
    h_rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr) - np.diff(own_ptr))
    h_cols = (cols[h] - n).astype(np.int64)
    return own_ptr, cols[own], vals[own], h_rows, h_cols, vals[h]


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, pair):
        ctx.pair = pair
        return pair.mm(x)

    @staticmethod
    def backward(ctx, g):
        if not ctx.needs_input_grad[0]:
            return None, None
        return ctx.pair.mm_t(g), None


class _HaloSpMM(torch.autograd.Function):
    """Halo exchange fused with the SpMM so communication overlaps the local product; in
    ``adj.rounds`` rounds, each round's rows multiplied in as they arrive and then freed
    (:mod:`graphdist.exchange.rounds`)."""

    @staticmethod
    def forward(ctx, h, adj, ex):
        ctx.adj, ctx.ex = adj, ex
        h = h.contiguous()
        blocks = adj.blocks()

        def send(r):  # held by the exchange from here until its wait()
            t = blocks[r][1]
            return t.mm(h) if t is not None else h.index_select(0, ex.round_send_idx(r))
        ctx.tag = ex.next_tag()
        pending = ex.post(send(0), ctx.tag, 0)
        out = adj.own.mm(h)
        for r, (halo, _) in enumerate(blocks):
            nxt = ex.post(send(r + 1), ctx.tag, r + 1) if r + 1 < len(blocks) else None
            recv = pending.wait()
            if halo is not None and recv.shape[0]:
                halo.mm_add(recv, out)
            recv = None  # this round's rows go now
            pending = nxt
        return out

    @staticmethod
    def backward(ctx, g):
        if not ctx.needs_input_grad[0]:
            return None, None, None
        adj, ex = ctx.adj, ctx.ex
        g = g.contiguous()
        blocks = adj.blocks()

        def grads(r):
            halo = blocks[r][0]
            return halo.mm_t(g) if halo is not None else g.new_zeros((ex.round_counts(r)[1], g.shape[1]))
        pending = ex.post_reverse(grads(0), ctx.tag, 0)
        g_h = adj.own.mm_t(g)
        for r, (_, t) in enumerate(blocks):
            nxt = ex.post_reverse(grads(r + 1), ctx.tag, r + 1) if r + 1 < len(blocks) else None
            back = pending.wait()
            if back.shape[0]:
                if t is not None:
                    t.mm_t_add(back, g_h)
                else:
                    g_h.index_add_(0, ex.round_send_idx(r), back)
            back = None
            pending = nxt
        return g_h, None, None
