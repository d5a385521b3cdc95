"""Rounds of a worker group that torch's agent restarts (``--max-restarts``), and the store that
outlives them.

A failed worker makes every node's agent stop its workers and start new ones, which meet again:
a new *round* of the group. What a round needs, and where torch (2.13) leaves it:

* **a key of its own in the job's store.** With torch's default (the agent's store shared with
  the workers, ``TORCHELASTIC_USE_AGENT_STORE=True``), the workers of every round meet at one
  TCPStore that the rendezvous of the first round's node 0 created and keeps for the whole job
  (``torch/distributed/elastic/rendezvous/dynamic_rendezvous.py``: ``next_rendezvous`` creates
  ``_shared_tcp_store_server`` once and hands its address to every later round). The keys the
  failed round's process group left are still there; a group formed again under the same keys
  reads a dead peer's address. (Only the *client* each worker opens is new per start,
  ``torch/distributed/rendezvous.py``'s "new TCPStore for every retry".) With
  ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (graphdist's own multi-node launch) each round meets
  at a fresh store of its rank 0, which holds no old keys.
* **the same key on every node.** Each node's agent counts only the restarts its own workers
  caused (``TORCHELASTIC_RESTART_COUNT``; ``torch/distributed/elastic/agent/server/api.py``: a
  node that restarts its healthy workers because another node waits, ``num_nodes_waiting``,
  does not spend one of its restarts), so after a worker of node 1 died node 0 says 0 and node 1
  says 1. :func:`agree_round` therefore takes the round from the store itself: rank 0 claims the
  next number (an atomic ``add``) and every other rank learns it, confirmed by a token only the
  current rank 0 can answer, so a number left by a finished round is never taken.

:func:`job_store` is the store for what must outlive a round (a failed rank's last words,
:mod:`graphdist.comm`); :func:`group_restarts` the restarts of the group, the most any node's
agent counted (agreed as the group formed, :mod:`graphdist.procgroup`).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from graphdist.errors import DistributedError

__all__ = ["JobRound", "restart_count", "agree_round", "set_current", "current", "job_store", "group_restarts",
           "round_key"]

POLL_S = 0.02
"""How often a rank looks at the store while it waits for the round (seconds)."""
ANSWER_S = 2.0
"""How long a rank waits for rank 0 to confirm a round number before it reads the number again."""


@dataclass(frozen=True)
class JobRound:
    """This round of the worker group, as every rank agreed on it."""

    store: object
    """the store that outlives the round (torch ``Store``), or None without one"""
    round: int
    """the round's number in that store: 0, 1, ... (the same on every rank)"""
    restarts: int
    """restarts of the group so far: the most any node's agent counted"""


_CURRENT: JobRound | None = None


def restart_count() -> int:
    """How many times this node's agent restarted its workers (``TORCHELASTIC_RESTART_COUNT``;
    0 on the first start or without an agent). Other nodes may say another number."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def agree_round(store, rank: int, world: int, timeout_s: float) -> int:
    """The number of this round of the worker group, the same on every rank: rank 0 claims the
    next one in ``store`` (``graphdist/rounds``, an atomic add) and publishes it
    (``graphdist/round``); every other rank reads it, leaves a token of its own under it and
    waits for rank 0 to answer that token. A number read before rank 0 published the new one is
    a finished round's: nobody answers, and the rank reads again. One line naming the ranks or
    the wait when it does not come together within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    if rank == 0:
        n = int(store.add("graphdist/rounds", 1)) - 1
        store.set("graphdist/round", str(n))
        _answer(store, n, world, deadline, timeout_s)
        return n
    token = os.urandom(8).hex()
    while time.monotonic() < deadline:
        if not store.check(["graphdist/round"]):
            time.sleep(POLL_S)
            continue
        n = int(store.get("graphdist/round"))
        store.set(f"graphdist/r{n}/hello/{rank}", token)
        answer = time.monotonic() + ANSWER_S
        while time.monotonic() < min(answer, deadline):
            if store.check([f"graphdist/r{n}/ok/{token}"]):
                return n
            time.sleep(POLL_S)
    raise DistributedError(f"rank {rank}: rank 0 of this round of the worker group did not answer within "
                           f"{timeout_s:.0f} s (the job's store at {os.environ.get('MASTER_ADDR')}:"
                           f"{os.environ.get('MASTER_PORT')})")


def _answer(store, n: int, world: int, deadline: float, timeout_s: float) -> None:
    """Rank 0: answer every other rank's token under round ``n`` (keys under a number this rank
    just claimed were written by ranks of this round only)."""
    waiting = set(range(1, world))
    while waiting:
        for r in sorted(waiting):
            key = f"graphdist/r{n}/hello/{r}"
            if store.check([key]):
                store.set(f"graphdist/r{n}/ok/{store.get(key).decode()}", "1")
                waiting.discard(r)
        if waiting:
            if time.monotonic() > deadline:
                names = ", ".join(map(str, sorted(waiting)))
                raise DistributedError(f"rank 0: rank(s) {names} did not join round {n} of the worker group within "
                                       f"{timeout_s:.0f} s")
            time.sleep(POLL_S)


def set_current(store, round_: int, restarts: int) -> JobRound:
    """Record this round (the process group's start does, :mod:`graphdist.procgroup`)."""
    global _CURRENT
    _CURRENT = JobRound(store, int(round_), int(restarts))
    return _CURRENT


def current() -> JobRound | None:
    """This round as agreed at the process group's start; None before (or without graphdist's
    start: a group the caller made)."""
    return _CURRENT


def job_store():
    """The store every rank of the job shares, for what must outlive one round of the worker
    group: the one graphdist's start opened (the agent's, under an agent); for a process group
    made by the caller, that group's own store; None without a process group."""
    if _CURRENT is not None and _CURRENT.store is not None:
        return _CURRENT.store
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.group.WORLD.get_group_store()
    return None


def group_restarts() -> int:
    """How many times this job's worker group has been restarted (``--max-restarts``): agreed by
    all ranks as the group formed (before that, or without graphdist's start, this node's
    count)."""
    return restart_count() if _CURRENT is None else _CURRENT.restarts


def round_key(*parts, round_: int | None = None) -> str:
    """A key of the job's store that belongs to one round (this one by default), so that a key a
    failed round left never speaks for the next: ``graphdist/<round>/<parts...>``."""
    n = (_CURRENT.round if _CURRENT is not None else 0) if round_ is None else round_
    return "/".join(["graphdist", str(n), *map(str, parts)])
