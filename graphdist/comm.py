"""The one module that calls torch.distributed collectives.

Metric and control collectives (:func:`all_reduce_sum`, :func:`all_reduce_max`,
:func:`all_gather_rows`, :func:`barrier`, ...; :func:`wait_for_all`, a barrier through the job's
store that the collective timeout does not bound) take tensors on any device and run them on the
process group's device (NCCL needs CUDA tensors, gloo CPU ones), returning results on the
caller's device. They are no-ops without a process group or at world size 1.

Data movement: :func:`all_to_all_rows` (blocking or asynchronous ``all_to_all_single`` of
row blocks, the halo exchange's wire, :mod:`graphdist.exchange.exchanger`),
:func:`all_to_all_varied` (rows whose counts the receivers learn first: edges to the owners of
their destinations, :mod:`graphdist.partition.build`), :func:`all_reduce_mean_coalesced` and
:func:`all_gather_rows` (replica synchronisation of sharded tables: the touched row ids, then
those rows).

Small values between ranks (a count, a digest, a host's identity): :func:`all_gather_json`, as
JSON text in a byte tensor, parsed on arrival. Nothing a peer sends is unpickled: a process that
reaches the job's network can send wrong numbers, not code (what torch's own store and
checkpointing still trust the network for: the multi-node guide, "What the network is trusted
with").

What a rank says when a collective fails (naming a failed peer): :mod:`graphdist.failures`.
"""
from __future__ import annotations

import json

import torch
import torch.distributed as dist

from graphdist.errors import DistributedError


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


def all_to_all_varied(send: torch.Tensor, counts, group=None) -> tuple[torch.Tensor, list[int]]:
    """Rows ``send[counts[0] rows for rank 0 | ...]`` to every rank when the receivers do not
    know how many come: the counts go first (one small all-to-all), then the rows. Returns
    ``(rows received in rank order, how many from each rank)``. Blocking, on the group's device."""
    rank, ws = world(group)
    if ws == 1:
        return send[:int(counts[0])].clone(), [int(counts[0])]
    dev = collective_device(group)
    c_out = torch.tensor([int(c) for c in counts], dtype=torch.int64, device=dev)
    c_in = torch.empty_like(c_out)
    dist.all_to_all_single(c_in, c_out, group=group)
    got = [int(c) for c in c_in.tolist()]
    s = send.contiguous() if send.device == dev else send.contiguous().to(dev)
    out = torch.empty((sum(got),) + tuple(send.shape[1:]), dtype=send.dtype, device=dev)
    all_to_all_rows(out, s, got, [int(c) for c in counts], group)
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


def all_gather_json(value, group=None) -> list:
    """Every rank's ``value`` in rank order: anything :mod:`json` writes (numbers, strings, None,
    booleans, lists, dicts with string keys; tuples come back as lists, also at world size 1),
    sent as UTF-8 JSON text in a byte tensor and parsed with :func:`json.loads` (never
    unpickled). ``rank0_value if rank == 0 else None`` and ``[0]`` make a broadcast."""
    data = json.dumps(value, separators=(",", ":"), default=_plain).encode()
    if world(group)[1] == 1:
        return [json.loads(data)]
    return [json.loads(b) for b in all_gather_bytes(data, group)]


def _plain(o):
    """A numpy scalar as the Python number it holds (JSON's encoder takes no numpy types)."""
    import numpy as np
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"{type(o).__name__} is not JSON: send numbers, strings, lists or dicts")


def all_gather_bytes(data: bytes, group=None) -> list[bytes]:
    """Every rank's ``data`` in rank order (lengths first, then one padded all-gather)."""
    ws = world(group)[1]
    if ws == 1:
        return [bytes(data)]
    dev = collective_device(group)
    n = torch.tensor([len(data)], dtype=torch.int64, device=dev)
    sizes = [torch.zeros_like(n) for _ in range(ws)]
    dist.all_gather(sizes, n, group=group)
    sizes = [int(s) for s in sizes]
    padded = torch.zeros(max(max(sizes), 1), dtype=torch.uint8)
    if data:
        padded[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    padded = padded.to(dev)
    bufs = [torch.empty_like(padded) for _ in range(ws)]
    dist.all_gather(bufs, padded, group=group)
    return [b[:s].cpu().numpy().tobytes() for b, s in zip(bufs, sizes)]


def barrier(group=None) -> None:
    if world(group)[1] > 1:
        dist.barrier(group)


WAIT_LIMIT_S = 7 * 24 * 3600.0
"""How long :func:`wait_for_all` waits at most: a week, i.e. as long as the slowest rank's work."""
_WAITS: dict[str, int] = {}
"""How many times this process has waited under each tag: the n-th wait of a tag has keys of its
own (every rank waits in the same order), so a tag may be used again."""


def wait_for_all(tag: str) -> None:
    """A barrier through the job's store that the collective timeout (``--timeout``, 300 s) does
    not bound: for a wait as long as the slowest rank's own work (a Criteo cache built by the first
    rank of each file system, minutes for the 45M-line Kaggle file), where a dead peer ends the
    job through its launcher rather than a timeout here. ``tag``: what is waited for (a tag used
    again is a new wait). Without a process group, or at world size 1, it returns at once."""
    import datetime

    from graphdist import restarts
    n = world()[1]
    store = restarts.job_store()
    if n == 1 or store is None:
        return
    _WAITS[tag] = _WAITS.get(tag, 0) + 1
    done = restarts.round_key("wait", tag, _WAITS[tag], "done")
    if int(store.add(restarts.round_key("wait", tag, _WAITS[tag], "count"), 1)) == n:
        store.set(done, "1")
    store.wait([done], datetime.timedelta(seconds=WAIT_LIMIT_S))


def check_same(value, what: str, group=None) -> None:
    """Raise :class:`DistributedError` unless every rank passes an equal ``value`` (a plan hash,
    a fingerprint); the message names the ranks that differ and their values."""
    vals = all_gather_json(value, group)
    if any(v != vals[0] for v in vals):
        diff = ", ".join(f"rank {r}: {v}" for r, v in enumerate(vals) if v != vals[0])
        raise DistributedError(f"{what} differs between ranks (rank 0: {vals[0]}; {diff}); every rank "
                               "must build the same plan")
