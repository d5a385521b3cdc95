"""The two-level halo route across hosts (``train-gcn --halo-route hosts``).

The direct exchange sends every message row on its ordered rank pair, so a raw row of host A
needed by two ranks of host B crosses the link between the hosts twice. The ``hosts`` route
sends each (raw row, destination host) across hosts once, to a *carrier*: the lowest-numbered
rank of that host that needs the row, which forwards it to the other ranks of its host that
need it::

    phase 1   one all-to-all: every row between ranks of one host, every partial sum (mvc:
              per destination node, never the same on two ranks) and each raw row to its
              carrier only (a row to a rank of another host that is not the carrier stays home)
    phase 2   one all-to-all inside hosts: each carrier forwards the rows it received from
              other hosts to the ranks of its host that need them

A rank's received rows land in exactly the direct exchange's layout (``[rows from peer 0 |
peer 1 | ...]``, each peer's block in its send order), so the product with the adjacency and
mvc's partial sums are unchanged: forward values are bit for bit the direct exchange's.

Backward is the mirror: each forwarded row's gradient goes back to its carrier (phase 2
reversed), which adds it to the gradient of its own copy; the one sum crosses hosts home
(phase 1 reversed) and lands in the carrier's original send slot, the other slots of that row
get zero, so the transpose of the send operator adds the same total (in another order: equal
up to float rounding).

The plan is plain data, computed before any communication from every rank's *send lists*
(per message row: the global id of the raw row, or -1 for a partial sum, grouped by peer)
and each rank's host: :func:`build_routes` builds all ranks' plans in one process (what the
tests check); :func:`gather_route` gathers the lists and builds this rank's plan on a running
job. The wire calls are :mod:`graphdist.comm`'s.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from graphdist import comm

__all__ = ["RankRoute", "build_routes", "send_keys", "host_of_rank", "gather_route", "RoutedPending"]


@dataclass
class RankRoute:
    """One rank's share of a route plan (positions are rows of the direct exchange's buffers)."""

    rank: int
    """The rank this plan is for."""
    hosts: list[int]
    """Host of every rank."""
    routed: bool
    """True: the two-level route; False: the direct exchange (the plan only counts rows)."""
    n_send: int
    """Message rows of the direct exchange sent by this rank (its send buffer)."""
    n_recv: int
    """Message rows of the direct exchange received by this rank (its receive buffer)."""
    send1_idx: torch.Tensor
    """Phase 1: the rows of the send buffer sent, grouped by peer (in send order)."""
    send1_counts: list[int]
    """Phase 1: rows sent to each peer."""
    recv1_counts: list[int]
    """Phase 1: rows received from each peer."""
    recv1_pos: torch.Tensor
    """Phase 1: the receive-buffer row of each row received."""
    send2_src: torch.Tensor
    """Phase 2: the phase-1 row forwarded, grouped by peer of this host."""
    send2_counts: list[int]
    """Phase 2: rows forwarded to each peer."""
    recv2_counts: list[int]
    """Phase 2: rows received from each peer (their carriers)."""
    recv2_pos: torch.Tensor
    """Phase 2: the receive-buffer row of each row forwarded to this rank."""
    cross_send: int
    """Rows this rank sends to other hosts per forward exchange (phase 1)."""
    cross_back: int
    """Rows this rank sends to other hosts per backward exchange (phase 1 reversed)."""

    @property
    def remote(self) -> list[bool]:
        """Per peer: on another host."""
        return [h != self.hosts[self.rank] for h in self.hosts]

    def cross_rows(self, in_counts) -> int:
        """Rows to other hosts among ``in_counts`` rows per peer (a direct exchange's counts)."""
        return sum(int(c) for c, far in zip(in_counts, self.remote) if far)

    def check(self, n_send: int, n_recv: int, unsupported: bool) -> None:
        """For an exchanger of ``n_send`` / ``n_recv`` rows (``unsupported``: quantised, stale or
        on a simulated link, which the routed exchange does not take)."""
        if (self.n_send, self.n_recv) != (n_send, n_recv):
            raise ValueError(f"the route moves {self.n_send} / {self.n_recv} rows but the exchanger {n_send} / "
                             f"{n_recv}: build both for the same layout and halo mode")
        if self.routed and unsupported:
            raise ValueError("the hosts route moves float32 rows, fresh, over real links: not quantised, stale "
                             "or simulated ones")

    def start(self, rows: torch.Tensor, direction: str, group, stats) -> "RoutedPending":
        """Post the routed exchange of ``rows`` (``[n_send, F]`` forward, ``[n_recv, F]``
        backward); ``.wait()`` gives the direct exchange's result. ``stats`` (a
        :class:`~graphdist.exchange.exchanger.CommStats`) counts the rows this rank sends."""
        rows = rows.contiguous()
        if direction == "forward":
            send = rows.index_select(0, self.send1_idx)
            out = rows.new_empty((int(self.recv1_pos.numel()),) + tuple(rows.shape[1:]))
            in_c, out_c, cross = self.send1_counts, self.recv1_counts, self.cross_send
        else:  # gradients of forwarded rows go back to their carriers first (phase 2 reversed)
            back = rows.index_select(0, self.recv2_pos)
            got = rows.new_empty((int(self.send2_src.numel()),) + tuple(rows.shape[1:]))
            _count(stats, back)
            comm.all_to_all_rows(got, back, self.send2_counts, self.recv2_counts, group)
            send = rows.index_select(0, self.recv1_pos)
            if got.shape[0]:
                send.index_add_(0, self.send2_src, got)
            out = rows.new_empty((int(self.send1_idx.numel()),) + tuple(rows.shape[1:]))
            in_c, out_c, cross = self.recv1_counts, self.send1_counts, self.cross_back
        _count(stats, send, cross)
        work = comm.all_to_all_rows(out, send, out_c, in_c, group, async_op=True)
        return RoutedPending(self, direction, work, out, send, group, stats)


def _count(stats, t: torch.Tensor, cross: int = 0) -> None:
    """``t`` sent, ``cross`` of its rows to other hosts."""
    stats.add(t)
    stats.host_bytes += cross * math.prod(t.shape[1:]) * t.element_size()


class RoutedPending:
    """A routed exchange in flight (phase 1 posted); :meth:`wait` finishes it: forward, the
    carriers forward their rows (phase 2) and the rows are placed in the direct layout;
    backward, the sums are placed in their send slots (zero in the others)."""

    def __init__(self, route: RankRoute, direction: str, work, out, keep, group, stats):
        self.route, self.direction, self.work, self.out, self.keep = route, direction, work, out, keep
        self.group, self.stats = group, stats
        self._rows = None

    def wait(self) -> torch.Tensor:
        if self._rows is None:
            self.work.wait()
            self.work = self.keep = None
            r, got = self.route, self.out
            self.out = None
            tail = tuple(got.shape[1:])
            if self.direction == "forward":
                fwd = got.index_select(0, r.send2_src)
                recv2 = got.new_empty((int(r.recv2_pos.numel()),) + tail)
                _count(self.stats, fwd)
                comm.all_to_all_rows(recv2, fwd, r.recv2_counts, r.send2_counts, self.group)
                rows = got.new_empty((r.n_recv,) + tail)
                rows[r.recv1_pos] = got
                rows[r.recv2_pos] = recv2
            else:
                rows = got.new_zeros((r.n_send,) + tail)
                rows[r.send1_idx] = got
            self._rows = rows
        return self._rows


def _order(*keys: torch.Tensor) -> torch.Tensor:
    """The stable permutation sorting by ``keys[0]``, then ``keys[1]``, ..."""
    o = torch.arange(keys[0].numel())
    for key in reversed(keys):
        o = o[torch.argsort(key[o], stable=True)]
    return o


def _starts(counts: torch.Tensor) -> torch.Tensor:
    """Exclusive prefix sums along the last axis."""
    return torch.cumsum(counts, -1) - counts


def build_routes(keys: list[torch.Tensor], counts: list[list[int]], hosts: list[int], *, routed: bool = True,
                 ranks=None) -> list[RankRoute]:
    """Route plans of ``ranks`` (default: all) from every rank's send lists: ``keys[s]`` the
    global id of each message row rank s sends (a raw row; -1: a partial sum, never shared),
    grouped by peer with ``counts[s][p]`` rows to peer p; ``hosts[s]`` the host of rank s.
    ``routed=False``: the direct exchange (phase 1 = every row, no phase 2)."""
    k = len(keys)
    if len(counts) != k or len(hosts) != k:
        raise ValueError(f"{k} ranks' send lists, {len(counts)} count lists and {len(hosts)} hosts")
    cnt = torch.tensor([[int(c) for c in row] for row in counts], dtype=torch.int64).reshape(k, k)
    for s in range(k):
        if int(cnt[s].sum()) != keys[s].numel():
            raise ValueError(f"rank {s}: {keys[s].numel()} send keys but its counts add up to {int(cnt[s].sum())}")
    host = torch.tensor([int(h) for h in hosts], dtype=torch.int64)
    if not routed:
        return [_direct(r, cnt, host) for r in (range(k) if ranks is None else ranks)]
    src = torch.repeat_interleave(torch.arange(k), cnt.sum(1))
    dst = torch.repeat_interleave(torch.arange(k).repeat(k), cnt.reshape(-1))
    key = torch.cat([kk.to(torch.int64).reshape(-1) for kk in keys]) if k else torch.zeros(0, dtype=torch.int64)
    m = key.numel()
    pos = torch.arange(m) - _starts(cnt.sum(1))[src]  # row of the sender's send buffer
    send_start, recv_start = _starts(cnt), _starts(cnt.t())  # [s, p], [p, s]
    final = recv_start[dst, src] + pos - send_start[src, dst]  # row of the receiver's buffer
    carrier_msg = torch.arange(m)
    cand = torch.nonzero((host[src] != host[dst]) & (key >= 0)).flatten()
    o = cand[_order(src[cand], host[dst[cand]], key[cand], dst[cand])]
    if o.numel():
        new = torch.ones(o.numel(), dtype=torch.bool)
        new[1:] = (src[o[1:]] != src[o[:-1]]) | (host[dst[o[1:]]] != host[dst[o[:-1]]]) | (key[o[1:]] != key[o[:-1]])
        first = o[new][torch.cumsum(new.to(torch.int64), 0) - 1]  # the group's lowest destination
        carrier_msg[o] = first
    direct = carrier_msg == torch.arange(m)
    d = torch.nonzero(direct).flatten()  # in (src, dst, pos) order
    d_recv = d[torch.argsort(dst[d], stable=True)]  # (dst, src, pos)
    recv1_index = torch.full((m,), -1, dtype=torch.int64)
    d_recv_start = _starts(torch.bincount(dst[d_recv], minlength=k))
    recv1_index[d_recv] = torch.arange(d_recv.numel()) - d_recv_start[dst[d_recv]]
    f = torch.nonzero(~direct).flatten()
    car = dst[carrier_msg[f]]
    f = f[_order(car, dst[f], src[f], pos[f])]  # (carrier, dst, src, pos)
    car = dst[carrier_msg[f]]
    f_recv = f[_order(dst[f], car, src[f], pos[f])]  # (dst, carrier, src, pos)
    car_recv = dst[carrier_msg[f_recv]]
    far = host[src] != host[dst]
    out = []
    for r in (range(k) if ranks is None else ranks):
        ds, dr = d[src[d] == r], d_recv[dst[d_recv] == r]
        fs, fr = f[car == r], f_recv[dst[f_recv] == r]
        out.append(RankRoute(
            rank=r, hosts=[int(h) for h in host], routed=routed, n_send=int(cnt[r].sum()), n_recv=int(cnt[:, r].sum()),
            send1_idx=pos[ds], send1_counts=torch.bincount(dst[ds], minlength=k).tolist(),
            recv1_counts=torch.bincount(src[dr], minlength=k).tolist(), recv1_pos=final[dr],
            send2_src=recv1_index[carrier_msg[fs]], send2_counts=torch.bincount(dst[fs], minlength=k).tolist(),
            recv2_counts=torch.bincount(car_recv[dst[f_recv] == r], minlength=k).tolist(), recv2_pos=final[fr],
            cross_send=int(far[ds].sum()), cross_back=int(far[dr].sum())))
    return out


def _direct(r: int, cnt: torch.Tensor, host: torch.Tensor) -> RankRoute:
    """Rank ``r``'s direct exchange as a plan (``cnt[s, p]``: rows rank s sends to p): every row
    on its rank pair, in the buffers' own order, no phase 2. It needs the counts only, so a job
    that does not route never gathers the send lists."""
    far = host != host[r]
    empty = torch.zeros(0, dtype=torch.int64)
    n_send, n_recv = int(cnt[r].sum()), int(cnt[:, r].sum())
    return RankRoute(
        rank=r, hosts=[int(h) for h in host], routed=False, n_send=n_send, n_recv=n_recv,
        send1_idx=torch.arange(n_send), send1_counts=cnt[r].tolist(), recv1_counts=cnt[:, r].tolist(),
        recv1_pos=torch.arange(n_recv), send2_src=empty, send2_counts=[0] * len(host), recv2_counts=[0] * len(host),
        recv2_pos=empty, cross_send=int(cnt[r][far].sum()), cross_back=int(cnt[:, r][far].sum()))


def send_keys(lg, halo: str) -> tuple[torch.Tensor, list[int]]:
    """``(keys, counts)``: the send list of ``lg``'s exchange in ``halo`` mode (the global id of
    each raw row sent, -1 for each partial sum; rows per peer)."""
    lay = lg.exchange_layout(halo)
    keys = torch.full((sum(lay.send_counts),), -1, dtype=torch.int64)
    raw = lg.send_idx if halo == "plain" else lg.send_idx[lg.send_raw]
    keys[lay.send_raw_pos] = lg.owned[raw]
    return keys, list(lay.send_counts)


def host_of_rank(rank: int) -> int:
    """This rank's host from the launcher's placement: torchrun's ``GROUP_RANK`` (the node's
    rank), else ``rank // LOCAL_WORLD_SIZE`` (ranks of a node are contiguous)."""
    if os.environ.get("GROUP_RANK", "") != "":
        return int(os.environ["GROUP_RANK"])
    return rank // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "") or 1))


def gather_route(lg, halo: str, routed: bool, group=None) -> tuple[RankRoute, dict]:
    """This rank's plan on a running job (collective: every rank calls it): the send lists and
    hosts of all ranks gathered, then :func:`build_routes`. Also ``{"hosts", "ranks_per_host",
    "rows_between_hosts", "rows_between_hosts_direct"}`` (rows per forward exchange, all ranks).
    With one host or one rank per host the route is the direct one (``routed`` False)."""
    rank = comm.world(group)[0]
    counts = list(lg.exchange_layout(halo).send_counts)
    seen = comm.all_gather_object([host_of_rank(rank), counts], group)
    hosts = [s[0] for s in seen]
    per_host = {h: hosts.count(h) for h in hosts}
    routed = routed and len(per_host) > 1 and max(per_host.values()) > 1
    if routed:
        every = comm.all_gather_rows(send_keys(lg, halo)[0], group)
        all_keys = list(torch.split(every, [sum(s[1]) for s in seen]))
        route = build_routes(all_keys, [s[1] for s in seen], hosts, ranks=[rank])[0]
    else:  # the direct route: the counts say it all
        cnt = torch.tensor([s[1] for s in seen], dtype=torch.int64)
        route = _direct(rank, cnt, torch.tensor(hosts, dtype=torch.int64))
    direct = sum(int(c) for s, sc in enumerate(seen) for p, c in enumerate(sc[1]) if hosts[p] != hosts[s])
    moved = int(comm.all_reduce_sum(torch.tensor([route.cross_send], dtype=torch.float64), group)[0])
    info = {"hosts": len(per_host), "ranks_per_host": sorted(set(per_host.values())),
            "rows_between_hosts": moved, "rows_between_hosts_direct": direct}
    return route, info
