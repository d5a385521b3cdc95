"""The input features' halo rows held by the rank that reads them (``--input-halo resident``).

A first layer that propagates its input (``A @ [x ; halo(x)]``, see
:mod:`graphdist.gnn.models`) would send the same feature rows every epoch: the features never
change, only their dropout mask does, and that mask is keyed by (seed, epoch, layer, global node
id, column) (:func:`graphdist.gnn.models.keyed_dropout`). So each rank receives its plain halo's
feature rows once, at start-up, and draws their mask itself: the rows it multiplies are, bit for
bit, the rows the owners would have sent (dropout is one multiply per element, done alike on
either rank), and the first layer exchanges nothing, forward or backward::

    start-up   xh = the plain halo rows of x            (one all-to-all, never again)
    epoch      xd = dropout(x) ; xhd = dropout(xh)      (same key, halo rows keyed by their ids)
               msg = xhd                                (plain)
               msg = T_held xhd                         (mvc: raw rows one-hot, and every partial
                                                         sum the owner would have formed, its
                                                         entries in the owner's order)
               out = A_own xd ; out += A_halo[r] msg_r  (per exchange round, as the exchange does)

``mvc``'s partial sums are formed by the receiver from the owner's list of sources (received
once, in the order of the owner's send operator, with the same normalisation values), so the
sums are the owner's, bit for bit. Evaluation (no dropout) keeps the whole product while the
features live: its first layer is then a dense product only, as at k = 1.

The rows cost ``n_halo x F x 4`` bytes (:func:`graphdist.gnn.plan_memory.rank_memory` counts them;
when they do not fit, the trainer falls back to the exchange).
"""
from __future__ import annotations

import weakref

import torch

from graphdist import comm

__all__ = ["ResidentHalo", "HeldRows"]


class ResidentHalo:
    """One rank's held halo rows of the input ``x`` (rows in ``lg``'s current order), for the
    adjacency ``adj`` (:meth:`graphdist.exchange.spmm.SparseAdj.for_model`, ``plain`` or ``mvc``)
    and its exchanger ``ex`` (its message counts and rounds). Collective: every rank builds one."""

    def __init__(self, lg, x: torch.Tensor, adj, ex, model: str):
        self.mode = adj.halo_mode
        self.ids = lg.halo.to(x.device)
        x = x.contiguous()
        self.rows = comm.all_to_all_varied(x.index_select(0, lg.send_idx.to(x.device)), lg.send_counts)[0]
        self.nbytes = int(self.rows.numel() * self.rows.element_size())
        self.send = None
        if self.mode == "mvc":
            self.send = _held_send(lg, model, x.device)
            self.nbytes += self.send.nnz * 8
        self.n_msg = adj.n_recv
        self.rounds = getattr(ex, "rounds", 1)
        self._round_rows = None
        if self.rounds > 1:
            from graphdist.exchange.rounds import round_of
            rnd = round_of(ex.recv_counts, self.rounds)[0].to(x.device)
            self._round_rows = [torch.nonzero(rnd == r).flatten() for r in range(self.rounds)]
        self._eval = None

    def held(self) -> "HeldRows":
        """Evaluation's message rows (no dropout): the same object every pass, so the product
        is kept while the features live."""
        if self._eval is None:
            self._eval = HeldRows(self, self._messages(self.rows), keep=True)
        return self._eval

    def _messages(self, rows: torch.Tensor) -> torch.Tensor:
        return rows if self.send is None else self.send.mm(rows)

    def dropped(self, dropout) -> "HeldRows":
        """``dropout(rows, ids)``: the held rows after the training pass's dropout (a function
        of the rows and their global ids, :func:`graphdist.gnn.models.keyed_dropout`)."""
        return HeldRows(self, self._messages(dropout(self.rows, self.ids)), keep=False)

    def round_rows(self, msg: torch.Tensor, r: int) -> torch.Tensor:
        return msg if self._round_rows is None else msg.index_select(0, self._round_rows[r])


class HeldRows:
    """A pass's message rows from held rows, passed to ``SparseAdj.propagate`` in place of the
    exchanger: ``active`` is False (no exchange runs), so a layer orders its product as at
    k = 1 (:func:`graphdist.gnn.models._propagate_first`)."""

    active = False
    held = True

    def __init__(self, source: ResidentHalo, msg: torch.Tensor, keep: bool):
        self.source, self.msg, self.keep = source, msg, keep
        self._kept = None

    def product(self, h: torch.Tensor, adj, reuse: bool) -> torch.Tensor:
        """``A @ [h ; held rows]`` (no gradient to ``h``: the features); kept while ``h`` lives
        and is unchanged when ``reuse`` and the rows are evaluation's."""
        if h.requires_grad and torch.is_grad_enabled():
            raise ValueError("held halo rows carry no gradient: the first layer's input must not need one")
        kept = self._kept
        if reuse and self.keep and kept is not None and kept[0]() is h and kept[1] == h._version \
                and kept[2] is adj:
            return kept[3]
        with torch.no_grad():
            h = h.contiguous()
            if self.msg.shape[0] != adj.n_recv:
                raise ValueError(f"{self.msg.shape[0]} held message rows but the adjacency reads {adj.n_recv}")
            out = adj.own.mm(h)
            for r, (halo, _) in enumerate(adj.blocks()):
                recv = self.source.round_rows(self.msg, r)
                if halo is not None and recv.shape[0]:
                    halo.mm_add(recv, out)
        if reuse and self.keep:
            self._kept = (weakref.ref(h), h._version, adj, out)
        return out


def _held_send(lg, model: str, device):
    """The receiver's copy of its peers' mvc send operators for this rank: ``[n_msg_in,
    n_halo]`` CSR, raw message rows one-hot on their halo column, each partial sum with its
    owner's entries (sources and ``right(u)`` values) in the owner's order. The owners' source
    lists come in one start-up exchange (global ids, in the owner's operator order)."""
    from graphdist.exchange.csr import CSRPair
    n, k = lg.num_owned, lg.world_size
    lay = lg.exchange_layout("mvc")
    # owner side: per partial sum sent, its sources in the send operator's order (ascending
    # owned-local row: the operator is sorted by (row, column)), as global ids
    lens = (lg.pre_ptr[1:] - lg.pre_ptr[:-1]).to(torch.int64)
    pre_row = torch.repeat_interleave(torch.arange(lens.numel()), lens)
    order = torch.argsort(pre_row * max(n, 1) + lg.pre_src.to(torch.int64))
    src_ids = lg.owned[lg.pre_src[order]]
    got_lens = comm.all_to_all_varied(lens[:, None], lg.pre_send_counts)[0][:, 0]
    per_peer = torch.tensor(lg.pre_send_counts, dtype=torch.int64)
    entries_out = torch.zeros(k, dtype=torch.int64)
    if lens.numel():
        peer_of = torch.repeat_interleave(torch.arange(k), per_peer)
        entries_out.index_add_(0, peer_of, lens)
    got_ids = comm.all_to_all_varied(src_ids, entries_out.tolist())[0]
    # receiver side: every received source id -> its halo column (ascending within a peer)
    got_per_peer = torch.tensor(lg.pre_recv_counts, dtype=torch.int64)
    peer_in = torch.repeat_interleave(torch.arange(k), got_per_peer)
    entry_peer = torch.repeat_interleave(peer_in, got_lens)
    hoff = torch.cumsum(torch.tensor([0] + list(lg.recv_counts)), 0)
    col = torch.empty(got_ids.numel(), dtype=torch.int64)
    for p in range(k):
        sel = entry_peer == p
        block = lg.halo[hoff[p]:hoff[p + 1]]
        c = torch.searchsorted(block, got_ids[sel])
        if c.numel() and not bool((block[c.clamp(max=max(block.numel() - 1, 0))] == got_ids[sel]).all()):
            raise ValueError(f"part {lg.rank}: a partial sum from peer {p} reads a node outside this part's halo")
        col[sel] = c + hoff[p]
    _, right, _ = lg.normalisation(model)
    raw_cols = torch.nonzero(lay.recv_col >= 0).flatten()
    rows = torch.cat([lay.recv_col[raw_cols], torch.repeat_interleave(lay.pre_col, got_lens)])
    cols = torch.cat([raw_cols, col])
    vals = torch.cat([torch.ones(raw_cols.numel(), dtype=torch.float64), right[n + col]])
    o = torch.argsort(rows, stable=True)  # grouped by message row, each row's entries in the owner's order
    return CSRPair(rows[o], cols[o], vals[o], sum(lay.recv_counts), lg.num_halo, device)
