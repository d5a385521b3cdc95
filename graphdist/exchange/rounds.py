"""The halo exchange in rounds (``--halo-rounds R``): a layer's message rows move in ``R``
smaller all-to-alls, and each round's rows are multiplied into the output as soon as they
arrive and then freed, so a rank holds about two rounds of send and receive buffers instead of
the whole exchange (SAR, Mostafa, MLSys 2022, aggregates one peer's rows at a time for the same
reason). At products size the mvc exchange brings a k = 4 rank twice as many message rows as
it owns, so its buffers, not its part, set the peak.

Round ``r`` carries, of the ``c_p`` message rows a rank sends to (receives from) peer ``p``,
rows ``floor(c_p r / R) .. floor(c_p (r+1) / R) - 1`` of that peer's block. Sender and receiver
compute the same slices from the same count, so nothing more is exchanged::

    message rows    [ peer 0: round 0 | round 1 | round 2 ][ peer 1: round 0 | round 1 | round 2 ]
    round 1 buffer  [ peer 0's round-1 slice | peer 1's round-1 slice ]

The received-rows operator ``A_halo`` is split by columns into one block per round (columns
renumbered to the round's buffer), the send operator ``T`` (mvc) or the gather index (plain) by
rows. The pipeline of one product (:class:`graphdist.exchange.spmm.SparseAdj`)::

    post round 0 ; out = A_own h ; for r: post round r+1 ; wait round r ; out += A_halo[r] recv_r

and its backward mirrors it. The sum is the one-round sum in another order: exact up to float
rounding. ``R = 1`` is the single all-to-all.
"""
from __future__ import annotations

import torch

from graphdist.sparse import ptr2index

__all__ = ["round_of", "split_columns", "split_rows", "in_rounds"]


def in_rounds(rounds: int, adj, *exchangers) -> None:
    """Split ``adj`` (:meth:`SparseAdj.in_rounds`) and each distinct exchanger of it (training's
    and evaluation's may be one object) into ``rounds`` rounds; the first exchanger's counts
    split the adjacency. ``rounds <= 1`` changes nothing."""
    if rounds <= 1:
        return
    for e in {id(e): e for e in exchangers}.values():
        e.in_rounds(rounds)
    adj.in_rounds(rounds, exchangers[0].send_counts, exchangers[0].recv_counts)


def round_of(counts: list[int], rounds: int) -> tuple[torch.Tensor, list[list[int]]]:
    """``(round of every message row [sum(counts)], rows per round and peer [R][k])`` for rows
    grouped by peer (``counts[p]`` rows for peer ``p``)."""
    rounds = max(1, int(rounds))
    counts = [int(c) for c in counts]
    per = [[c * (r + 1) // rounds - c * r // rounds for c in counts] for r in range(rounds)]
    parts = []
    for c in counts:
        j = torch.arange(c, dtype=torch.int64)
        parts.append(((j + 1) * rounds - 1) // max(c, 1))
    rnd = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)
    return rnd, per


def _positions(rnd: torch.Tensor, rounds: int) -> torch.Tensor:
    """Position of every message row within its round's buffer (rows keep their order)."""
    order = torch.argsort(rnd, stable=True)
    start = torch.cumsum(torch.bincount(rnd, minlength=rounds), 0) - torch.bincount(rnd, minlength=rounds)
    pos = torch.empty_like(rnd)
    pos[order] = torch.arange(rnd.numel(), dtype=rnd.dtype, device=rnd.device) - start[rnd[order]]
    return pos


def split_columns(pair, rnd: torch.Tensor, rounds: int) -> list:
    """``pair`` (a :class:`~graphdist.exchange.csr.CSRPair` ``[n, n_msg]``) as ``R`` pairs, the
    ``r``-th holding the columns of round ``r`` renumbered to that round's buffer."""
    return _split(pair, rnd, rounds, by_rows=False)


def split_rows(pair, rnd: torch.Tensor, rounds: int) -> list:
    """``pair`` (``[n_msg, n]``, the mvc send operator) as ``R`` pairs of the rows of each round."""
    return _split(pair, rnd, rounds, by_rows=True)


def _split(pair, rnd: torch.Tensor, rounds: int, by_rows: bool) -> list:
    from graphdist.exchange.csr import CSRPair
    a = pair.A
    rows = ptr2index(a.crow_indices().to(torch.int64), pair.nnz)
    cols, vals = a.col_indices().to(torch.int64), a.values()
    rnd, pos = rnd.to(cols.device), _positions(rnd, rounds).to(cols.device)
    msg = rows if by_rows else cols  # the message-row side of the operator
    er = rnd[msg]  # every entry's round, grouped by one stable sort (not a pass per round)
    order = torch.argsort(er, stable=True)
    ends = torch.cumsum(torch.bincount(er, minlength=rounds), 0).tolist()
    sizes = torch.bincount(rnd, minlength=rounds).tolist()
    del er
    out = []
    for r in range(rounds):
        keep = order[(ends[r - 1] if r else 0):ends[r]]
        size = sizes[r]
        # positions grow with the message row within a round: entries stay sorted by (row, col)
        if by_rows:
            out.append(CSRPair(pos[rows[keep]], cols[keep], vals[keep], size, pair.shape[1], a.device))
        else:
            out.append(CSRPair(rows[keep], pos[cols[keep]], vals[keep], pair.shape[0], size, a.device))
    return out
