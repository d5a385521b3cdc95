"""Boundary-node sampling (``--boundary-rate p``, BNS-GCN, Wan et al., MLSys 2022).

A *boundary node* is an owned node whose row some peer receives (a source of a cut edge).
Each training epoch keeps each boundary node with probability ``p``, decided by a keyed hash of
``(seed, epoch, global node id)`` (:func:`kept`): the sender and every receiver of a row take
the same decision without talking, and any number of ranks draws what one process would. For
that epoch, in every layer and both directions::

    dropped u   its rows are not sent, and its cut edges are removed from the receivers' A_halo
    kept u      its cut edges are scaled by 1 / p (A_halo entries A_vu / p)

so ``E[A_own h + A_halo' h_halo] = A h`` for every row (the aggregate is unbiased for every
linear aggregation, GCN's and SAGE's mean alike, with the full graph's normalisation), while the
rows and bytes exchanged drop to about ``p`` times. Edges inside a part are never sampled.
Evaluation uses the full adjacency and exchanger (exact, ``p = 1``).

With ``--halo mvc`` the same edges go: a dropped node's raw rows are not sent, its terms leave
the partial sums it was in, and the kept terms (raw rows and partial-sum terms alike) are
scaled by 1/p at the sender (the send operator ``T``). A partial sum is still sent when all of
its sources were dropped (the receiver cannot tell), so mvc's bytes drop less than plain's.
"""
from __future__ import annotations

import torch

from graphdist.keyed import key32, keyed_bits
from graphdist.exchange.csr import CSRPair
from graphdist.sparse import ptr2index

__all__ = ["kept", "BoundarySampler"]

_SALT = 0xB05  # keys of boundary sampling, apart from dropout's (seed, epoch, layer)


def kept(ids: torch.Tensor, rate: float, seed: int, epoch: int) -> torch.Tensor:
    """``[len(ids)]`` bool: the nodes (global ids) kept in ``epoch``; each with probability
    ``rate``, a function of ``(seed, epoch, id)`` only."""
    if rate >= 1.0:
        return torch.ones(ids.shape[0], dtype=torch.bool, device=ids.device)
    bits = keyed_bits(ids, 1, key32(seed, epoch, _SALT))[:, 0]
    return bits < int(rate * (1 << 32)) - (1 << 31)


def _segment_sums(mask: torch.Tensor, counts: list[int]) -> list[int]:
    peer = torch.repeat_interleave(torch.arange(len(counts), device=mask.device),
                                   torch.tensor(counts, device=mask.device))
    return torch.zeros(len(counts), dtype=torch.int64, device=mask.device).index_add_(
        0, peer, mask.to(torch.int64)).tolist()


class BoundarySampler:
    """Per-epoch sampled ``(adjacency, exchanger)`` of one rank for ``rate``.

    ``lg``: the rank's :class:`~graphdist.partition.local.LocalGraph` (the one ``adj`` was built
    from); ``adj`` / ``ex``: its :class:`~graphdist.exchange.spmm.SparseAdj` and
    :class:`~graphdist.exchange.exchanger.HaloExchanger` (the sampled exchanger shares ``ex``'s
    counters, link and rounding keys)."""

    def __init__(self, lg, adj, ex, rate: float, seed: int):
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"boundary rate must be in (0, 1], got {rate}")
        self.adj, self.ex, self.rate, self.seed = adj, ex, float(rate), int(seed)
        dev = adj.own.A.device
        self.n_own = adj.shape[0]
        if adj.halo is not None:
            self.rows, self.cols, self.vals = _coo(adj.halo.A)
        self.mvc = adj.send is not None
        if self.mvc:
            self._init_mvc(lg, dev)
            return
        self.send_ids = lg.owned.to(dev)[ex.send_idx]  # global ids of the rows sent, peer by peer
        self.halo_ids = lg.halo.to(dev)                # global ids of the halo columns, peer by peer

    def _init_mvc(self, lg, dev) -> None:
        lay = lg.exchange_layout("mvc")
        owned = lg.owned.to(dev)
        self.t_rows, self.t_cols, self.t_vals = _coo(self.adj.send.A)
        self.t_ids = owned[self.t_cols]  # global id of each send-operator entry's source
        n_out, n_in = self.adj.send.shape[0], self.adj.halo.shape[1] if self.adj.halo is not None else 0
        self.raw_out = torch.zeros(n_out, dtype=torch.bool, device=dev)
        self.raw_out[lay.send_raw_pos.to(dev)] = True
        raw = lay.recv_col >= 0
        self.raw_in = torch.zeros(n_in, dtype=torch.bool, device=dev)
        self.raw_in[lay.recv_col[raw].to(dev)] = True
        self.in_ids = torch.zeros(n_in, dtype=torch.int64, device=dev)  # global id of each raw row received
        self.in_ids[lay.recv_col[raw].to(dev)] = lg.halo.to(dev)[raw]

    def epoch(self, epoch: int):
        """``(adjacency, exchanger)`` of training epoch ``epoch``."""
        if self.mvc:
            return self._epoch_mvc(epoch)
        ks = kept(self.send_ids, self.rate, self.seed, epoch)
        kr = kept(self.halo_ids, self.rate, self.seed, epoch)
        ex = self.ex.restricted(self.ex.send_idx[ks], _segment_sums(ks, self.ex.send_counts),
                                _segment_sums(kr, self.ex.recv_counts))
        halo = self.adj.halo
        if halo is not None:
            new_col = torch.cumsum(kr.to(torch.int64), 0) - 1
            keep = kr[self.cols]
            # rows stay sorted, and columns within a row too (the renumbering keeps their order)
            halo = CSRPair(self.rows[keep], new_col[self.cols[keep]], self.vals[keep] / self.rate,
                           self.n_own, int(kr.sum()), self.vals.device)
        return self.adj.with_blocks(halo, self.adj.send), ex

    def _epoch_mvc(self, epoch: int):
        dev = self.t_vals.device
        # sender: entries of kept sources, scaled; raw message rows whose source was dropped go
        ke = kept(self.t_ids, self.rate, self.seed, epoch)
        live = torch.zeros(self.raw_out.shape[0], dtype=torch.bool, device=dev)
        live[self.t_rows[ke]] = True
        ks = ~self.raw_out | live
        # receiver: the same raw rows go (their ids), every partial sum stays
        kr = ~self.raw_in | kept(self.in_ids, self.rate, self.seed, epoch)
        ex = self.ex.restricted(None, _segment_sums(ks, self.ex.send_counts), _segment_sums(kr, self.ex.recv_counts))
        out_row = torch.cumsum(ks.to(torch.int64), 0) - 1
        send = CSRPair(out_row[self.t_rows[ke]], self.t_cols[ke], self.t_vals[ke] / self.rate, int(ks.sum()),
                       self.n_own, dev)
        halo = self.adj.halo
        if halo is not None:
            in_col = torch.cumsum(kr.to(torch.int64), 0) - 1
            keep = kr[self.cols]
            halo = CSRPair(self.rows[keep], in_col[self.cols[keep]], self.vals[keep], self.n_own, int(kr.sum()), dev)
        return self.adj.with_blocks(halo, send), ex


def _coo(a: torch.Tensor):
    """``(rows, cols, values)`` of a CSR tensor, int64 indices, sorted by (row, col)."""
    return ptr2index(a.crow_indices().to(torch.int64), a._nnz()), a.col_indices().to(torch.int64), a.values()
