"""The route plan of one rank on a running job, in memory bounded by the rank's own message rows.

:func:`graphdist.exchange.route.build_routes` builds every rank's plan from every rank's send
lists, which on a job would mean gathering all of them onto every rank (int64 arrays the size
of all message rows of the job, on every rank). Nothing a rank's plan holds needs that:

- **as a sender**, rank ``s`` picks the carrier of each raw row it sends to another host (the
  lowest-numbered rank of that host it sends the row to) from its own send list alone, so its
  phase-1 rows (``send1_idx``) are its own business;
- **as a receiver**, rank ``r`` needs to know, for each row it receives from a rank of another
  host, whether it comes directly or through a carrier (and which): only the sender knows;
- **as a carrier**, rank ``c`` needs, for each row it forwards, the rank of its host it goes to
  and which of its own received rows it is: only the sender knows that too.

So each sender computes those answers and one all-to-all (:func:`graphdist.comm.all_to_all_varied`)
hands every rank exactly its own: per row it receives from another host, its carrier (-1:
direct), and per row it will forward, ``(destination, row within the carrier's block from this
sender)``. What a rank sends and receives is at most its own send and receive rows (plus the
rows it forwards), so the plan's peak follows the rank's part, not the job
(:func:`plan_peak_bytes`). The result is :func:`~graphdist.exchange.route.build_routes`'s plan
for that rank, field by field (``tests/test_halo_route.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SenderPlan", "sender_plan", "receiver_plan", "plan_peak_bytes", "plan_index_bytes"]

PEAK_PER_SEND_ROW = 56
"""Bytes per message row sent of the plan's build, at most: the keys (8), the part's owned ids and
send positions they are read from (16, pages of a mapped part file), :func:`sender_plan`'s working
set on one other host's raw rows at a time and its phase-1 rows (the whole build, sender, receiver
and carrier together, measured 87-147 bytes per row sent on parts of the products-shaped SBM at a
quarter of its nodes, k = 4 and 8, ``benchmarks/route_plan.py``, BENCHMARKS.md "The route plan's
memory")."""
PEAK_PER_RECV_ROW = 32
"""Bytes per message row received: the message (int32 pairs), each row's carrier, the positions
of the rows received directly and through a carrier (:func:`receiver_plan`)."""
PEAK_PER_FORWARDED_ROW = 32
"""Bytes per row a carrier forwards: its destination, its row among the carrier's received rows,
their order and the plan's copy (at most ``ranks_per_host - 1`` per row received)."""


@dataclass
class SenderPlan:
    """What rank ``s`` decides alone from its send list (:func:`sender_plan`)."""

    send1_idx: torch.Tensor
    """Rows of the send buffer sent in phase 1 (grouped by peer, in send order)."""
    send1_counts: list[int]
    """Phase-1 rows to each peer."""
    cross_send: int
    """Of those, rows to ranks of other hosts."""
    message: torch.Tensor
    """``[n, 2]`` int32 (int64 from 2^31 rows): to each peer ``p``, first (if ``p`` is on another host) one row per
    message row of the ``s -> p`` block, ``(carrier, 0)`` (carrier -1: it goes directly), then
    one row per row ``p`` carries for ``s``, ``(destination, row in s's phase-1 block to p)``."""
    message_counts: list[int]
    """Rows of ``message`` to each peer."""


def _starts(counts: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(counts, 0) - counts


def _carriers(keys: torch.Tensor, at: list[int], peers: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Of the raw rows sent to ``peers`` (the ranks of one other host, ascending; ``at[p]``: where
    peer ``p``'s block starts in the send list): ``(rows that are not the first copy of their key,
    the row of that first copy)``, the first copy being the lowest peer's (send order)."""
    idx = torch.cat([torch.arange(at[p], at[p + 1]) for p in peers])  # ascending
    kk = keys[idx]
    raw = kk >= 0
    idx, kk = idx[raw], kk[raw]
    del raw
    o = torch.argsort(kk, stable=True)  # by key, then send order: the lowest peer first
    idx, kk = idx[o], kk[o]
    del o
    first = torch.ones(idx.numel(), dtype=torch.bool)
    first[1:] = kk[1:] != kk[:-1]
    del kk
    lead = idx[first][torch.cumsum(first, 0) - 1]
    return idx[~first], lead[~first]


def sender_plan(rank: int, keys: torch.Tensor, counts: list[int], hosts: list[int], n_keys: int = 0) -> SenderPlan:
    """Rank ``rank``'s side of the plan from its own send list (``keys``: global id per message
    row, -1 for a partial sum; ``counts[p]`` rows to peer ``p``); ``hosts[p]`` the host of rank
    ``p``. Works one other host at a time, on that host's raw rows only (``n_keys``: unused,
    kept for callers that pass the graph's node count)."""
    k = len(hosts)
    cnt = [int(c) for c in counts]
    at = [0]
    for c in cnt:
        at.append(at[-1] + c)
    m = at[-1]
    far = [hosts[p] != hosts[rank] for p in range(k)]
    fwd, via = [], []  # rows that go through a carrier, and the carrier's row
    for h in sorted({hosts[p] for p in range(k) if far[p]}):
        peers = [p for p in range(k) if hosts[p] == h and cnt[p]]
        if peers:
            f, c = _carriers(keys, at, peers)
            fwd.append(f)
            via.append(c)
    fwd = torch.cat(fwd) if fwd else torch.zeros(0, dtype=torch.int64)
    via = torch.cat(via) if via else fwd
    o = torch.argsort(fwd)  # send order: (destination, position)
    fwd, via = fwd[o], via[o]
    del o
    direct = torch.ones(m, dtype=torch.bool)
    direct[fwd] = False
    send1_idx = torch.nonzero(direct).flatten()
    send1_counts = [int(direct[at[p]:at[p + 1]].sum()) for p in range(k)]
    del direct
    bounds = torch.tensor(at[1:], dtype=torch.int64)
    dst = torch.searchsorted(bounds, fwd, right=True)  # destination of each forwarded row
    car = torch.searchsorted(bounds, via, right=True)  # and its carrier
    s1_at = torch.tensor([0] + send1_counts, dtype=torch.int64).cumsum(0)
    j = torch.searchsorted(send1_idx, via) - s1_at[car]  # the carrier's copy among its phase-1 rows
    del via
    small = torch.int32 if m < 2**31 - 1 else torch.int64
    told = [cnt[p] if far[p] else 0 for p in range(k)]
    work = torch.bincount(car, minlength=k).tolist()
    message = torch.zeros((sum(told) + sum(work), 2), dtype=small)
    row = 0
    for p in range(k):  # per peer: [the carrier of each of its rows (-1: direct) | what it forwards]
        if told[p]:
            t = message[row:row + told[p], 0]
            t.fill_(-1)
            mine = dst == p
            t[fwd[mine] - at[p]] = car[mine].to(small)
            row += told[p]
        if work[p]:
            sel = car == p
            message[row:row + work[p], 0] = dst[sel].to(small)
            message[row:row + work[p], 1] = j[sel].to(small)
            row += work[p]
    cross = sum(send1_counts[p] for p in range(k) if far[p])
    return SenderPlan(send1_idx=send1_idx, send1_counts=send1_counts, cross_send=cross, message=message,
                      message_counts=[t + w for t, w in zip(told, work)])


def receiver_plan(rank: int, recv_counts: list[int], hosts: list[int], got: torch.Tensor,
                  got_counts: list[int]) -> dict:
    """Rank ``rank``'s receiving and forwarding side from the messages of every sender
    (``got``: the :attr:`SenderPlan.message` rows to this rank, in rank order, ``got_counts``
    from each); ``recv_counts[s]``: message rows this rank receives from ``s`` (its layout).
    Returns the :class:`~graphdist.exchange.route.RankRoute` fields of that side."""
    k = len(hosts)
    cnt = [int(c) for c in recv_counts]
    n_recv = sum(cnt)
    far = [hosts[s] != hosts[rank] for s in range(k)]
    told = [cnt[s] if far[s] else 0 for s in range(k)]
    at = [0]
    for c in got_counts:
        at.append(at[-1] + int(c))
    via = torch.full((n_recv,), -1, dtype=got.dtype)  # carrier of each received row (-1: direct)
    pos = 0
    for s in range(k):
        if told[s]:
            via[pos:pos + cnt[s]] = got[at[s]:at[s] + told[s], 0]
        pos += cnt[s]
    direct = via < 0
    recv1_pos = torch.nonzero(direct).flatten()
    r_at = [0]
    for c in cnt:
        r_at.append(r_at[-1] + c)
    recv1_counts = [int(direct[r_at[s]:r_at[s + 1]].sum()) for s in range(k)]
    del direct
    fwd = torch.nonzero(via >= 0).flatten()  # in (source, position) order
    by = via[fwd]
    del via
    order = torch.argsort(by, stable=True)  # (carrier, source, position)
    recv2_pos = fwd[order]
    recv2_counts = torch.bincount(by.to(torch.int64), minlength=k).tolist()
    del fwd, by, order
    # as a carrier: each sender's (destination, row in its phase-1 block to this rank)
    base = [0]
    for c in recv1_counts:
        base.append(base[-1] + c)
    dest = torch.cat([got[at[s] + told[s]:at[s + 1], 0] for s in range(k)]).to(torch.int64)
    src2 = torch.cat([got[at[s] + told[s]:at[s + 1], 1].to(torch.int64) + base[s] for s in range(k)])
    order = torch.argsort(dest, stable=True)  # (destination, source, position)
    cross_back = sum(recv1_counts[s] for s in range(k) if far[s])
    return {"recv1_counts": recv1_counts, "recv1_pos": recv1_pos, "recv2_counts": recv2_counts,
            "recv2_pos": recv2_pos, "send2_src": src2[order], "send2_counts": torch.bincount(dest, minlength=k).tolist(),
            "cross_back": cross_back}


def plan_index_bytes(n_send: int, n_recv: int, ranks_per_host: int) -> int:
    """Bytes of a routed plan's index tensors, at most: its phase-1 rows (at most every row
    sent), its received rows (phase 1 and 2 together: every row received) and the rows it
    forwards (each row it receives from another host to at most the ``ranks_per_host - 1``
    other ranks of its host)."""
    return 8 * (int(n_send) + int(n_recv) + max(int(ranks_per_host) - 1, 0) * int(n_recv))


def plan_peak_bytes(n_send: int, n_recv: int, ranks_per_host: int) -> int:
    """The most bytes :func:`graphdist.exchange.route.gather_route` holds at once for a routed
    plan of a rank that sends ``n_send`` and receives ``n_recv`` message rows per exchange (its
    layout's), on top of what the rank held before, the plan it keeps included: the sender's
    side, the receiver's and the carrier's added up (an upper bound: 1.07-1.42x the peaks measured
    at k = 4 and 1.23-2.07x at k = 8 on parts of the products-shaped SBM at a quarter of its
    nodes, BENCHMARKS.md "The route plan's memory")."""
    return (PEAK_PER_SEND_ROW * int(n_send) + PEAK_PER_RECV_ROW * int(n_recv)
            + PEAK_PER_FORWARDED_ROW * max(int(ranks_per_host) - 1, 0) * int(n_recv))
