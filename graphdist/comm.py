"""The one module that calls torch.distributed collectives.

Metric and control collectives (:func:`all_reduce_sum`, :func:`all_reduce_max`,
:func:`all_gather_rows`, :func:`barrier`, ...) take tensors on any device and run them on the
process group's device (NCCL needs CUDA tensors, gloo CPU ones), returning results on the
caller's device. They are no-ops without a process group or at world size 1.

Data movement: :func:`all_to_all_rows` (blocking or asynchronous ``all_to_all_single`` of
row blocks, the halo exchange's wire, :mod:`graphdist.exchange.exchanger`),
:func:`all_to_all_varied` (rows whose counts the receivers learn first: edges to the owners of
their destinations, :mod:`graphdist.partition.build`), :func:`all_reduce_mean_coalesced` and
:func:`all_gather_rows` (replica synchronisation of sharded tables: the touched row ids, then
those rows).

Failures: :func:`is_collective_failure`, :func:`raise_peer_failure` and the published-error
store keys that let a rank name what happened on a peer.
"""
from __future__ import annotations

import os
import re
import time

import torch
import torch.distributed as dist

from graphdist.errors import DistributedError
from graphdist.runtime import restart_round


def world(group=None) -> tuple[int, int]:
    """``(rank, world_size)`` in ``group`` (default: the whole job); ``(0, 1)`` without a
    process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def collective_device(group=None) -> torch.device:
    """Where tensors must be for ``group``'s backend: the current CUDA device for NCCL, else CPU."""
    if dist.is_available() and dist.is_initialized() and dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def backend(group=None) -> str | None:
    """The backend of ``group`` (``gloo``, ``nccl``, ...); None without a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_backend(group)
    return None


def all_to_all_rows(out: torch.Tensor, send: torch.Tensor, out_counts, in_counts, group=None,
                    async_op: bool = False):
    """Rows ``send[in_counts[0] rows for rank 0 | ... ]`` to every rank; ``out`` receives
    ``out_counts[r]`` rows from rank r, in rank order. With ``async_op`` returns the work
    handle (``.wait()``); the caller keeps ``send`` and ``out`` alive until then."""
    return dist.all_to_all_single(out, send, output_split_sizes=list(out_counts),
                                  input_split_sizes=list(in_counts), group=group, async_op=async_op)


def all_to_all_varied(send: torch.Tensor, counts) -> tuple[torch.Tensor, list[int]]:
    """Rows ``send[counts[0] rows for rank 0 | ...]`` to every rank when the receivers do not
    know how many come: the counts go first (one small all-to-all), then the rows. Returns
    ``(rows received in rank order, how many from each rank)``. Blocking, on the group's device."""
    rank, ws = world()
    if ws == 1:
        return send[:int(counts[0])].clone(), [int(counts[0])]
    dev = collective_device()
    c_out = torch.tensor([int(c) for c in counts], dtype=torch.int64, device=dev)
    c_in = torch.empty_like(c_out)
    dist.all_to_all_single(c_in, c_out)
    got = [int(c) for c in c_in.tolist()]
    s = send.contiguous() if send.device == dev else send.contiguous().to(dev)
    out = torch.empty((sum(got),) + tuple(send.shape[1:]), dtype=send.dtype, device=dev)
    all_to_all_rows(out, s, got, [int(c) for c in counts])
    return out.to(send.device), got


def all_reduce_mean_coalesced(tensors: list[torch.Tensor], group) -> None:
    """In place: every tensor becomes its mean over ``group`` (one coalesced all-reduce; the
    tensors must share a dtype and device)."""
    if not tensors or world(group)[1] == 1:
        return
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = dist.ReduceOp.AVG
    group.allreduce_coalesced(tensors, opts=opts).wait()


class _AllReduceSumFn(torch.autograd.Function):
    """Sum over ranks; the gradient of a sum of per-rank losses is again a sum over ranks."""

    @staticmethod
    def forward(ctx, t):
        t = t.clone()
        dist.all_reduce(t)
        return t

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        dist.all_reduce(g)
        return g


def all_reduce_sum_autograd(t: torch.Tensor) -> torch.Tensor:
    """Differentiable all-reduce (sum), e.g. for batch-norm statistics over all ranks."""
    return _AllReduceSumFn.apply(t) if world()[1] > 1 else t


def _all_reduce(t: torch.Tensor, op, group) -> torch.Tensor:
    if world(group)[1] == 1:
        return t
    dev = collective_device(group)
    if t.device == dev:
        dist.all_reduce(t, op=op, group=group)
    else:
        buf = t.to(dev)
        dist.all_reduce(buf, op=op, group=group)
        t.copy_(buf)
    return t


def all_reduce_sum(t: torch.Tensor, group=None) -> torch.Tensor:
    """In-place all-reduce (sum) of a metrics tensor on any device; returns it."""
    return _all_reduce(t, dist.ReduceOp.SUM, group)


def all_reduce_max(t: torch.Tensor, group=None) -> torch.Tensor:
    """In-place all-reduce (max) of a metrics tensor on any device; returns it."""
    return _all_reduce(t, dist.ReduceOp.MAX, group)


def broadcast(t: torch.Tensor, src: int = 0, group=None) -> torch.Tensor:
    """In place: every rank ends with rank ``src``'s ``t`` (same shape everywhere), any device."""
    if world(group)[1] == 1:
        return t
    dev = collective_device(group)
    buf = t if t.device == dev else t.to(dev)
    dist.broadcast(buf, src, group=group)
    if buf is not t:
        t.copy_(buf)
    return t


def all_gather_rows(t: torch.Tensor, group=None) -> torch.Tensor:
    """Concatenate every rank's ``t [n_r, ...]`` (``n_r`` may differ) in rank order, on
    ``t``'s device: sizes first, then one padded all-gather."""
    ws = world(group)[1]
    if ws == 1:
        return t
    dev = collective_device(group)
    n = torch.tensor([t.shape[0]], dtype=torch.int64, device=dev)
    sizes = [torch.zeros_like(n) for _ in range(ws)]
    dist.all_gather(sizes, n, group=group)
    sizes = [int(s) for s in sizes]
    if max(sizes) == 0:
        return t.new_zeros((0,) + tuple(t.shape[1:]))
    padded = t.new_zeros((max(sizes),) + tuple(t.shape[1:]), device=dev)
    padded[:t.shape[0]] = t
    bufs = [torch.empty_like(padded) for _ in range(ws)]
    dist.all_gather(bufs, padded, group=group)
    return torch.cat([b[:s] for b, s in zip(bufs, sizes)]).to(t.device)


def shift_rows(send: torch.Tensor, dst: int, out: torch.Tensor, src: int, group=None) -> torch.Tensor:
    """Point-to-point: ``send`` goes to rank ``dst`` while ``out`` (preallocated, its shape
    agreed beforehand) is filled from rank ``src``; every rank calls it at the same time (e.g.
    ``dst = r + t``, ``src = r - t``: a shift by ``t``). Returns ``out``."""
    if world(group)[1] == 1 or (dst == src == world(group)[0]):
        out.copy_(send)
        return out
    dev = collective_device(group)
    s = send if send.device == dev else send.to(dev)
    o = out if out.device == dev else torch.empty_like(out, device=dev)
    ops = ([dist.P2POp(dist.isend, s.contiguous(), dst, group)] if s.numel() else []) + \
          ([dist.P2POp(dist.irecv, o, src, group)] if o.numel() else [])  # sizes agreed: empty ends skip
    for w in (dist.batch_isend_irecv(ops) if ops else []):
        w.wait()
    if o is not out:
        out.copy_(o)
    return out


def all_reduce_grads(params) -> None:
    """Sum the gradients of ``params`` over ranks (one flat buffer, one collective)."""
    if world()[1] == 1:
        return
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    off = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[off:off + n].view_as(g))
        off += n


def broadcast_module(module: torch.nn.Module, src: int = 0) -> None:
    """Copy parameters and buffers of rank ``src`` to every rank (identical initialisation)."""
    if world()[1] == 1:
        return
    with torch.no_grad():
        for t in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(t.data, src)


def all_gather_object(obj, group=None) -> list:
    ws = world(group)[1]
    if ws == 1:
        return [obj]
    out = [None] * ws
    dist.all_gather_object(out, obj, group=group)
    return out


def barrier(group=None) -> None:
    if world(group)[1] > 1:
        dist.barrier(group)


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
    from graphdist.runtime import job_store
    return job_store()


def _key(*parts, round_: int | None = None) -> str:
    """A store key of one worker group's round: the agent's store outlives a restart, so a key
    left by the failed group must not speak for the new one."""
    return "/".join(["graphdist", str(restart_round() if round_ is None else round_), *map(str, parts)])


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
    told = _published_errors(world()[1], round_=restart_round() - 1)
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


def check_same(value, what: str, group=None) -> None:
    """Raise :class:`DistributedError` unless every rank passes an equal ``value`` (a plan hash,
    a fingerprint); the message names the ranks that differ and their values."""
    vals = all_gather_object(value, group)
    if any(v != vals[0] for v in vals):
        diff = ", ".join(f"rank {r}: {v}" for r, v in enumerate(vals) if v != vals[0])
        raise DistributedError(f"{what} differs between ranks (rank 0: {vals[0]}; {diff}); every rank "
                               "must build the same plan")
