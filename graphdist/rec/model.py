"""LightGCN on a partitioned user-item graph: each rank owns the embedding rows of its part.

    E^(0)            [n_own, D]   the rank's rows of the embedding table (the only parameters)
    E^(l+1)          = A_hat @ [E^(l) ; halo rows of E^(l)]      (SparseAdj.propagate + halo exchange;
                       plain rows or mvc partial sums, optionally quantised in flight)
    E                = mean(E^(0), ..., E^(L))                   (no weights, no non-linearity)
    A_hat            = D^-1/2 A D^-1/2 over the bipartite graph, global degrees, no self-loops
                       (PyG ``LGConv`` / the LightGCN reference)

A BPR step on a batch of (user, positive, negative) triples, for the triples of this rank's users::

    table = [E ; E^(0)] of the owned rows the batch touches, plus the rows of remote items it needs,
            which arrive by one all-to-all (HaloExchanger with a per-batch schedule; gradients go
            home the same way)
    loss  = ( sum softplus(e_u.e_n - e_u.e_p) + l2/2 * sum(|e0_u|^2 + |e0_p|^2 + |e0_n|^2) ) / B

``B`` is the batch's global size, so the ranks' losses add up to the single-process loss (the
reference's ``mean(softplus) + decay/2 * |E0_batch|^2 / B``) and so do their gradients. The
optimizer (Adam) acts on each rank's own rows: element-wise, it is exactly Adam on the whole
table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from graphdist import comm
from graphdist.exchange.exchanger import CommStats, HaloExchanger
from graphdist.keyed import key32, keyed_bits
from graphdist.exchange.spmm import SparseAdj

__all__ = ["lightgcn_adjacency", "halo_exchanger", "init_embeddings", "LightGCNShard", "BatchSchedule",
           "EpochSchedule", "schedule_epoch", "bpr_step"]

INIT_VALUES = 1 << 20
"""Values of the initial table generated per block (bounds the temporaries; not part of the result)."""


def lightgcn_adjacency(lg, device="cpu", halo: str = "plain") -> SparseAdj:
    """``D^-1/2 A D^-1/2`` (no self-loops, global degrees) on this rank's rows, for the ``plain``
    or ``mvc`` (pre/post-aggregation) halo exchange: the ``sym`` model of
    :meth:`SparseAdj.for_model`. The one place the propagation matrix is built."""
    return SparseAdj.for_model(lg, "sym", device, halo=halo)


def halo_exchanger(lg, device="cpu", halo: str = "plain", bits: int = 32, seed: int = 0) -> HaloExchanger:
    """The halo exchange of every propagation layer (forward rows, backward gradients) in ``halo``
    mode, ``bits`` per value in flight (32 = exact float32; fewer = quantised, keyed by ``seed``)."""
    return HaloExchanger.from_local_graph(lg, device, halo=halo, bits=bits, seed=seed)


def init_embeddings(ids: torch.Tensor, dim: int, std: float, seed: int) -> torch.Tensor:
    """Rows ``ids`` (global node ids) of the table ``N(0, std^2)^[N, dim]`` (the reference's
    ``normal_(std=0.1)``): row ``g`` is a function of ``(seed, g)`` only (keyed random numbers,
    :mod:`graphdist.keyed`, through Box-Muller), so a rank draws only its own rows and the
    table does not depend on the number of ranks or on the partition."""
    ids = ids.to(torch.int64).cpu()
    out = torch.empty(ids.numel(), dim)
    step = max(1, INIT_VALUES // max(dim, 1))
    k1, k2 = key32(seed, 0x1E17, 1), key32(seed, 0x1E17, 2)
    for s in range(0, ids.numel(), step):  # blocks bound the float64 temporaries
        blk = ids[s:s + step]
        u1 = _unit(keyed_bits(blk, dim, k1))
        u2 = _unit(keyed_bits(blk, dim, k2))
        z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2.0 * math.pi) * u2)
        out[s:s + step] = (z * std).to(torch.float32)
    return out


def _unit(bits: torch.Tensor) -> torch.Tensor:
    """Uniform in ``(0, 1)`` (float64) from int32 bits: the top 24 bits, centred in their cell."""
    return (torch.bitwise_right_shift(bits, 8).bitwise_and_(0xFFFFFF).to(torch.float64) + 0.5) * 2.0 ** -24


class LightGCNShard(nn.Module):
    """This rank's rows of the embedding table and the layer-mean propagation."""

    def __init__(self, rows: torch.Tensor, layers: int):
        super().__init__()
        self.weight = nn.Parameter(rows.clone())
        self.layers = layers

    def forward(self, adj: SparseAdj, exchanger=None) -> torch.Tensor:
        """Final embeddings ``mean_l E^(l)`` of the owned rows ``[n_own, D]``."""
        h = self.weight
        out = h
        for _ in range(self.layers):
            h = adj.propagate(h, exchanger)
            out = out + h
        return out / (self.layers + 1)


@dataclass
class BatchSchedule:
    """One batch on one rank: the batch's table is ``[rows of [E ; E^(0)] ; rows received from
    peer 0 ; peer 1 ; ...]``; which rows to send, and where each triple's rows are in it.
    Every field is a view of the epoch's :class:`EpochSchedule` (no work per step)."""

    rows: torch.Tensor
    """Owned-local rows the batch touches (its triples' own rows and what peers asked for)."""
    send_idx: torch.Tensor
    """Positions in ``rows`` of the rows the peers asked for, grouped by peer."""
    send_counts: list[int]
    """Rows sent to each peer."""
    recv_counts: list[int]
    """Rows received from each peer."""
    at: torch.Tensor
    """``[3 * m]`` table positions of the own triples' users, then positives, then negatives."""
    size: int
    """Global number of triples in the batch."""


@dataclass
class EpochSchedule:
    """The batch schedules of an epoch as flat arrays, built at once (no loop over batches);
    ``schedule[b]`` is batch ``b``'s :class:`BatchSchedule` (slices)."""

    rows: torch.Tensor
    row_ptr: list[int]
    send: torch.Tensor
    send_ptr: list[int]
    send_counts: np.ndarray
    """``[nb, k]``"""
    recv_counts: np.ndarray
    """``[nb, k]``"""
    at: torch.Tensor
    """``[3, n_samples]``"""
    sample_ptr: list[int]
    sizes: list[int]
    """Global size of every batch."""

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, b: int) -> BatchSchedule:
        lo, hi = self.sample_ptr[b], self.sample_ptr[b + 1]
        rows = self.rows[self.row_ptr[b]:self.row_ptr[b + 1]]
        return BatchSchedule(rows, self.send[self.send_ptr[b]:self.send_ptr[b + 1]],
                         self.send_counts[b].tolist(), self.recv_counts[b].tolist(),
                         self.at[:, lo:hi].reshape(-1), self.sizes[b])

    def __iter__(self):
        return (self[b] for b in range(len(self)))


def _all_to_all(ex: HaloExchanger, t: torch.Tensor, send_counts, recv_counts) -> torch.Tensor:
    return ex.all_to_all(t, list(send_counts), list(recv_counts), int(sum(recv_counts)))


def schedule_epoch(samples, rd, num_users: int, rank: int, world_size: int, device="cpu",
               stats: CommStats | None = None) -> EpochSchedule:
    """The :class:`EpochSchedule` of an epoch's own triples ``samples`` (``rd``: the rank's
    :class:`~graphdist.rec.setup.RankData`). Collective: one all-reduce of the batch counts (the
    global batch sizes), then the ids each rank needs from each peer, for all batches at once,
    in one all-to-all (after one of the counts). Vectorised over the epoch: a few sorts of
    O(samples on this rank) each."""
    k, nb = world_size, samples.num_batches
    item_owner = rd.item_owner
    n_own = int(rd.owned.numel())
    n_nodes = num_users + item_owner.size
    sizes = torch.from_numpy(samples.counts.astype(np.int64))
    comm.all_reduce_sum(sizes)
    m = samples.user.size
    b = samples.batch
    items = np.concatenate([samples.pos, samples.neg]) + num_users
    ib = np.concatenate([b, b])
    owner = item_owner[items - num_users].astype(np.int64)
    remote = owner != rank
    # requests sorted by (peer, batch, node): the order of the send buffer and of each batch's rows
    rkey = np.unique((owner[remote] * nb + ib[remote]) * n_nodes + items[remote])
    cnt = np.bincount(rkey // n_nodes, minlength=k * nb).reshape(k, nb)  # [peer, batch] rows I ask for
    ex = HaloExchanger(torch.zeros(0, dtype=torch.int64), [0] * k, [0] * k, device, stats=stats)
    if ex.active:
        got = _all_to_all(ex, torch.from_numpy(cnt.reshape(-1)).to(device), [nb] * k, [nb] * k)
        asked = got.cpu().numpy().reshape(k, nb)  # [peer, batch] rows the peer asks me for
        ids = _all_to_all(ex, torch.from_numpy(rkey % n_nodes).to(device), cnt.sum(1), asked.sum(1)).cpu().numpy()
    else:
        asked, ids = np.zeros((k, nb), dtype=np.int64), np.zeros(0, dtype=np.int64)
    flat = asked.reshape(-1)
    recv_batch = np.repeat(np.tile(np.arange(nb), k), flat)  # batch of each asked id, (peer, batch) order
    recv_peer = np.repeat(np.repeat(np.arange(k), nb), flat)
    # each batch's own table rows: its triples' own rows and the rows peers ask for, unique per batch
    own_rows = np.concatenate([rd.local_rows(samples.user), rd.local_rows(items[~remote])])
    own_batch = np.concatenate([b, ib[~remote]])
    uniq, inv = np.unique(np.concatenate([own_batch * n_own + own_rows, recv_batch * n_own + rd.local_rows(ids)]),
                          return_inverse=True)
    inv = inv.reshape(-1)
    row_ptr = np.searchsorted(uniq, np.arange(nb + 1) * n_own)
    at_own = inv - row_ptr[np.concatenate([own_batch, recv_batch])]
    n_e = own_rows.size
    so = np.argsort(recv_batch * k + recv_peer, kind="stable")  # send buffer by (batch, peer)
    send = at_own[n_e:][so]
    send_ptr = np.concatenate([[0], np.cumsum(asked.sum(0))])
    # a remote row's position: after the batch's own rows, in (peer, node) order within the batch
    c_off = np.concatenate([[0], np.cumsum(cnt.reshape(-1))])
    bstart = np.cumsum(np.concatenate([np.zeros((1, nb), np.int64), cnt[:-1]], 0), 0)  # [peer, batch]
    item_at = np.empty(2 * m, dtype=np.int64)
    o, bb, it = owner[remote], ib[remote], items[remote]
    pos_in_key = np.searchsorted(rkey, (o * nb + bb) * n_nodes + it)
    item_at[remote] = np.diff(row_ptr)[bb] + bstart[o, bb] + pos_in_key - c_off[o * nb + bb]
    item_at[~remote] = at_own[m:n_e]
    at = np.stack([at_own[:m], item_at[:m], item_at[m:]])
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)  # noqa: E731
    sample_ptr = np.concatenate([[0], np.cumsum(samples.counts)])
    return EpochSchedule(t(uniq % n_own if n_own else uniq), row_ptr.tolist(), t(send), send_ptr.tolist(),
                     asked.T.copy(), cnt.T.copy(), t(at), sample_ptr.tolist(), sizes.tolist())


def bpr_step(model: LightGCNShard, adj: SparseAdj, halo, sched: BatchSchedule, l2: float, opt=None,
             row_stats: CommStats | None = None) -> torch.Tensor:
    """Forward, backward and (with ``opt``) one optimizer step on one batch; returns this rank's
    share of the batch loss (the ranks' shares add up to the loss) as a 0-d tensor on the
    device. Collective. No host synchronisation: every size is the schedule's (host) counts.

    Only the rows the batch touches are gathered: ``[E ; E^(0)]`` of the schedule's rows side by
    side, then the remote rows appended by one all-to-all (so no table-sized copy or zero-filled
    gradient per triple column)."""
    if opt is not None:
        opt.zero_grad(set_to_none=True)
    if halo is not None:
        halo.start_pass()
    final = model(adj, halo)
    d = final.shape[1]
    ex = HaloExchanger(sched.send_idx, sched.send_counts, sched.recv_counts, final.device, stats=row_stats)
    table = ex(torch.cat([final.index_select(0, sched.rows), model.weight.index_select(0, sched.rows)], 1))
    m = sched.at.numel() // 3
    eu, ep, en = table.index_select(0, sched.at).view(3, m, 2 * d).unbind(0)
    pos = (eu[:, :d] * ep[:, :d]).sum(1)
    neg = (eu[:, :d] * en[:, :d]).sum(1)
    reg = eu[:, d:].pow(2).sum() + ep[:, d:].pow(2).sum() + en[:, d:].pow(2).sum()
    loss = (F.softplus(neg - pos).sum() + 0.5 * l2 * reg) / sched.size
    loss.backward()
    if opt is not None:
        opt.step()
    return loss.detach()
