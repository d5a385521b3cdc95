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

PEAK_PER_SEND_ROW = 72
"""Bytes per message row sent of :func:`sender_plan`'s largest working set: the int64 keys,
destinations, sort key, sort order, carrier and row-in-block arrays and the two-column message
(the int64 keys and the boolean masks are counted once each; ``benchmarks/route_plan.py``
measures it)."""
PEAK_PER_RECV_ROW = 56
"""Bytes per message row received of :func:`receiver_plan`'s largest working set: the two-column
message received, the direct mask, positions and carriers of the forwarded rows and their order."""


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
    """``[n, 2]`` int64: to each peer ``p``, first (if ``p`` is on another host) one row per
    message row of the ``s -> p`` block, ``(carrier, 0)`` (carrier -1: it goes directly), then
    one row per row ``p`` carries for ``s``, ``(destination, row in s's phase-1 block to p)``."""
    message_counts: list[int]
    """Rows of ``message`` to each peer."""


def _starts(counts: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(counts, 0) - counts


def sender_plan(rank: int, keys: torch.Tensor, counts: list[int], hosts: list[int], n_keys: int) -> SenderPlan:
    """Rank ``rank``'s side of the plan from its own send list (``keys``: global id per message
    row, -1 for a partial sum; ``counts[p]`` rows to peer ``p``); ``hosts[p]`` the host of rank
    ``p``; ``n_keys``: above every key (the graph's node count)."""
    k = len(hosts)
    cnt = torch.tensor([int(c) for c in counts], dtype=torch.int64)
    host = torch.tensor([int(h) for h in hosts], dtype=torch.int64)
    m = int(cnt.sum())
    dst = torch.repeat_interleave(torch.arange(k), cnt)
    far_peer = host != host[rank]
    far = far_peer[dst]
    carrier = torch.arange(m)  # message row of the copy that crosses (itself when direct)
    cand = torch.nonzero(far & (keys >= 0)).flatten()
    if cand.numel():
        # groups (destination host, key): the lowest destination (send order) carries the row
        o = cand[torch.argsort(host[dst[cand]] * int(n_keys) + keys[cand], stable=True)]
        hk = host[dst[o]] * int(n_keys) + keys[o]
        new = torch.ones(o.numel(), dtype=torch.bool)
        new[1:] = hk[1:] != hk[:-1]
        del hk
        carrier[o] = o[new][torch.cumsum(new.to(torch.int64), 0) - 1]
        del o, new
    del cand
    direct = carrier == torch.arange(m)
    send1_idx = torch.nonzero(direct).flatten()
    send1_counts = torch.bincount(dst[send1_idx], minlength=k)
    j = torch.full((m,), -1, dtype=torch.int64)  # row within this sender's phase-1 block to its peer
    j[send1_idx] = torch.arange(send1_idx.numel()) - _starts(send1_counts)[dst[send1_idx]]
    fwd = torch.nonzero(~direct).flatten()  # forwarded rows, in (destination, position) order
    via = dst[carrier[fwd]]
    # to each peer on another host: the carrier of each row of its block (-1 directly)
    tell = torch.where(direct, torch.full_like(dst, -1), dst[carrier])[far]
    told = torch.where(far_peer, cnt, torch.zeros_like(cnt))
    order = torch.argsort(via, stable=True)  # each carrier's rows, in (destination, position) order
    work = torch.stack([dst[fwd][order], j[carrier[fwd]][order]], 1)
    work_counts = torch.bincount(via, minlength=k)
    tell_at, work_at = _starts(told), _starts(work_counts)
    message = torch.empty((tell.numel() + work.shape[0], 2), dtype=torch.int64)
    out_at = _starts(told + work_counts)
    for p in range(k):  # per peer: [its rows' carriers | what it forwards]
        a, t, w = int(out_at[p]), int(told[p]), int(work_counts[p])
        message[a:a + t, 0] = tell[int(tell_at[p]):int(tell_at[p]) + t]
        message[a:a + t, 1] = 0
        message[a + t:a + t + w] = work[int(work_at[p]):int(work_at[p]) + w]
    return SenderPlan(send1_idx=send1_idx, send1_counts=send1_counts.tolist(),
                      cross_send=int(far[send1_idx].sum()), message=message,
                      message_counts=(told + work_counts).tolist())


def receiver_plan(rank: int, recv_counts: list[int], hosts: list[int], got: torch.Tensor,
                  got_counts: list[int]) -> dict:
    """Rank ``rank``'s receiving and forwarding side from the messages of every sender
    (``got``: the :attr:`SenderPlan.message` rows to this rank, in rank order, ``got_counts``
    from each); ``recv_counts[s]``: message rows this rank receives from ``s`` (its layout).
    Returns the :class:`~graphdist.exchange.route.RankRoute` fields of that side."""
    k = len(hosts)
    cnt = torch.tensor([int(c) for c in recv_counts], dtype=torch.int64)
    host = torch.tensor([int(h) for h in hosts], dtype=torch.int64)
    far_peer = host != host[rank]
    n_recv = int(cnt.sum())
    src = torch.repeat_interleave(torch.arange(k), cnt)
    told = torch.where(far_peer, cnt, torch.zeros_like(cnt))
    at = _starts(torch.tensor([int(c) for c in got_counts], dtype=torch.int64))
    via = torch.full((n_recv,), -1, dtype=torch.int64)  # carrier of each received row (-1: direct)
    far_rows = far_peer[src]
    pieces = [got[int(at[s]):int(at[s]) + int(told[s]), 0] for s in range(k)]
    via[far_rows] = torch.cat(pieces) if pieces else via[:0]
    direct = via < 0
    recv1_pos = torch.nonzero(direct).flatten()
    recv1_counts = torch.bincount(src[recv1_pos], minlength=k)
    fwd = torch.nonzero(~direct).flatten()  # in (source, position) order
    order = torch.argsort(via[fwd], stable=True)  # (carrier, source, position)
    recv2_pos = fwd[order]
    recv2_counts = torch.bincount(via[fwd], minlength=k)
    # as a carrier: each sender's (destination, row in its phase-1 block to this rank)
    work = [got[int(at[s]) + int(told[s]):int(at[s]) + int(got_counts[s])] for s in range(k)]
    base = _starts(recv1_counts)
    dest = torch.cat([w[:, 0] for w in work]) if k else torch.zeros(0, dtype=torch.int64)
    src2 = torch.cat([base[s] + w[:, 1] for s, w in enumerate(work)]) if k else dest
    order = torch.argsort(dest, stable=True)  # (destination, source, position)
    return {"recv1_counts": recv1_counts.tolist(), "recv1_pos": recv1_pos, "recv2_counts": recv2_counts.tolist(),
            "recv2_pos": recv2_pos, "send2_src": src2[order], "send2_counts": torch.bincount(dest, minlength=k).tolist(),
            "cross_back": int(far_rows[recv1_pos].sum())}


def plan_index_bytes(n_send: int, n_recv: int, ranks_per_host: int) -> int:
    """Bytes of a routed plan's index tensors, at most: its phase-1 rows (at most every row
    sent), its received rows (phase 1 and 2 together: every row received) and the rows it
    forwards (each row it receives from another host to at most the ``ranks_per_host - 1``
    other ranks of its host)."""
    return 8 * (int(n_send) + int(n_recv) + max(int(ranks_per_host) - 1, 0) * int(n_recv))


def plan_peak_bytes(n_send: int, n_recv: int, ranks_per_host: int) -> int:
    """The most bytes :func:`graphdist.exchange.route.gather_route` holds at once for a routed
    plan of a rank that sends ``n_send`` and receives ``n_recv`` message rows per exchange (its
    layout's), on top of what the rank held before: the sender's working set, then the
    receiver's beside the sender's result, and the plan it keeps."""
    send = PEAK_PER_SEND_ROW * int(n_send)
    recv = PEAK_PER_RECV_ROW * int(n_recv) + 16 * max(int(ranks_per_host) - 1, 0) * int(n_recv)
    return max(send, recv + 24 * int(n_send)) + plan_index_bytes(n_send, n_recv, ranks_per_host)
