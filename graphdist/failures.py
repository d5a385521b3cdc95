"""What a rank says when a collective fails: whether an exception is a failed collective (a
peer died, a link or the store failed) rather than this rank's own error, which peer it was, and
what that peer said about itself.

A rank that stops on an error of its own leaves a one-line message in the job's store
(:func:`publish_error`, under this round's keys, :mod:`graphdist.restarts`); a rank whose
collective then fails names the rank that published (:func:`raise_peer_failure`), else the ranks
that stopped answering (:func:`find_dead_ranks`: every survivor checks in through the store), else
the store's own node. After a restart of the worker group, :func:`restart_cause` reads what the
failed round's ranks said. A store behind a cut link is silent, not refusing: every read here
is bounded (:func:`_within`).
"""
from __future__ import annotations

import os
import re
import time

import torch
import torch.distributed as dist

from graphdist import restarts
from graphdist.comm import world
from graphdist.errors import DistributedError

__all__ = ["broken", "is_collective_failure", "first_sentences", "publish_error", "publish_failure", "restart_cause",
           "find_dead_ranks", "raise_peer_failure"]


_FAILURE_MARKS = ("gloo", "NCCL", "nccl", "Connection closed by peer", "Connection reset by peer",
                  "Broken pipe", "timed out", "Timed out", "Socket Timeout", "TCPStore", "DistStore",
                  "ProcessGroup")


_BROKEN = [False]


def broken() -> bool:
    """True once a collective of this process failed (:func:`raise_peer_failure`): its process
    group may hold threads stuck on a dead peer or a cut link, which tearing it down (or the
    interpreter's exit) would abort on ("terminate called without an active exception"); the
    worker leaves without touching it (:mod:`graphdist.worker`)."""
    return _BROKEN[0]


def is_collective_failure(exc: BaseException) -> bool:
    """True when ``exc`` is a failed collective (a peer died, a network or store error, a
    timeout), not an error of this rank's own computation (OOM, a bug)."""
    dist_errors = tuple(getattr(dist, n) for n in ("DistError", "DistBackendError", "DistNetworkError",
                                                   "DistStoreError") if hasattr(dist, n))
    if isinstance(exc, dist_errors):
        return True
    if isinstance(exc, torch.OutOfMemoryError) or not isinstance(exc, RuntimeError):
        return False
    return any(m in str(exc) for m in _FAILURE_MARKS)


def first_sentences(text: str, limit: int = 200) -> str:
    """The first line of ``text``, cut to at most about ``limit`` characters and never mid-word:
    as many whole sentences as fit; a first sentence longer than ``limit`` whole up to ``2 *
    limit`` characters; else its words up to ``limit``, then ``...``. Empty text gives ``""``."""
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    if len(line) <= limit:
        return line
    ends = [m.end() for m in re.finditer(r"[.!?](?=\s)", line)]
    fit = [e for e in ends if e <= limit]
    if fit:
        return line[:fit[-1]]
    if ends and ends[0] <= 2 * limit:
        return line[:ends[0]]
    cut = line.rfind(" ", 0, limit)
    return (line[:cut] if cut > 0 else line[:limit]).rstrip(" ,;:") + " ..."


def _store():
    return restarts.job_store()


def _key(*parts, round_: int | None = None) -> str:
    """A store key of one worker group's round: the agent's store outlives a restart, so a key
    left by the failed group must not speak for the new one (:func:`graphdist.restarts.round_key`)."""
    return restarts.round_key(*parts, round_=round_)


def publish_error(message: str) -> None:
    """Leave this rank's one-line error in the rendezvous store, so that the rank reporting the
    resulting collective failure can say what happened here (best effort)."""
    if world()[1] == 1:
        return
    key = _key("error", world()[0])

    def put():
        try:
            _store().set(key, message[:500])
        except Exception:  # noqa: BLE001 - the store may be gone too
            pass
    _within(2.0, put, None)


def publish_failure(exc: BaseException) -> None:
    """:func:`publish_error` for an exception about to end this rank (call it before the
    process group is destroyed): user errors as their message, anything else as type: message."""
    from graphdist.errors import USER_ERRORS, Interrupted
    if isinstance(exc, (Interrupted, KeyboardInterrupt)):
        return
    text = str(exc) if isinstance(exc, USER_ERRORS) else f"{type(exc).__name__}: {first_sentences(str(exc))}"
    publish_error(text.strip().splitlines()[0] if text.strip() else type(exc).__name__)


def _published_errors(ws: int, round_: int | None = None) -> dict[int, str]:
    """The one-line errors ranks published in a round of the worker group (this one by default);
    what could be read within 3 s."""
    out: dict[int, str] = {}
    _within(3.0, lambda: _read_errors(ws, round_, out), None)
    return dict(out)


def _read_errors(ws: int, round_: int | None, out: dict) -> None:
    try:
        store = _store()
        for r in range(ws):
            key = _key("error", r, round_=round_)
            if store.check([key]):
                out[r] = store.get(key).decode(errors="replace")
    except Exception:  # noqa: BLE001
        pass


def restart_cause() -> str:
    """Why the previous round of this worker group ended, in the words of its failed ranks (what
    they published), or a default when none said anything (killed, out of memory, a lost link)."""
    now = restarts.current()
    told = _published_errors(world()[1], round_=now.round - 1) if now is not None and now.round > 0 else {}
    if not told:
        return "no rank said why: killed, out of memory, or its peers lost"
    return "; ".join(f"rank {r} failed: {m}" for r, m in sorted(told.items()))


def _within(seconds: float, fn, default):
    """``fn()``, or ``default`` when it has not returned within ``seconds``: a store behind a cut
    link does not refuse, it is silent, and each of its operations would wait out the store's own
    timeout (the thread is left to finish on its own; it holds nothing the caller needs)."""
    import threading
    box = [default]

    def run():
        box[0] = fn()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    return box[0] if not t.is_alive() else default


def find_dead_ranks(tag: str, wait_s: float = 3.0) -> list[int] | None:
    """After a failed collective: every surviving rank checks in through the rendezvous store;
    ranks that have not checked in within ``wait_s`` are dead. ``None`` if the store itself is
    unreachable (it lives with rank 0 / the launcher) or silent for ``wait_s`` + 2 s."""
    return _within(wait_s + 2.0, lambda: _find_dead_ranks(tag, wait_s), None)


def _find_dead_ranks(tag: str, wait_s: float) -> list[int] | None:
    rank, ws = world()
    try:
        store = _store()
        store.set(_key("alive", tag, rank), "1")
        keys = [_key("alive", tag, r) for r in range(ws)]
        deadline = time.monotonic() + wait_s
        while True:
            missing = [r for r, k in enumerate(keys) if not store.check([k])]
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.1)
    except Exception:  # noqa: BLE001
        return None


def raise_peer_failure(exc: BaseException, where: str) -> None:
    """Turn a failed collective into a :class:`DistributedError` naming the failed rank(s) and,
    when a rank published its own error (:func:`publish_error`), what it was."""
    _BROKEN[0] = True
    rank, ws = world()
    dead = find_dead_ranks(where)
    told = {r: m for r, m in _published_errors(ws).items() if r != rank}
    if told:
        r, m = min(told.items())
        who = f"rank {r} failed: {m}"
    elif dead is None:
        at = f" ({os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']})" if "MASTER_PORT" in os.environ else ""
        who = f"the node hosting the job's store{at} is gone"
    elif dead:
        who = "rank" + ("s " if len(dead) > 1 else " ") + ", ".join(map(str, dead)) + " stopped responding"
    else:
        who = "all ranks are alive"
    first = first_sentences(str(exc)) or type(exc).__name__
    raise DistributedError(f"rank {rank}: collective failed during {where}: {who} ({first})") from exc
