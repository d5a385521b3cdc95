"""The one module that calls torch.distributed collectives.

Metric and control collectives (:func:`all_reduce_sum`, :func:`all_reduce_max`,
:func:`all_gather_rows`, :func:`barrier`, ...) take tensors on any device and run them on the
process group's device (NCCL needs CUDA tensors, gloo CPU ones), returning results on the
caller's device. They are no-ops without a process group or at world size 1.

Halo exchange (:class:`HaloExchanger`): one asynchronous ``all_to_all_single`` per layer and
direction moves *message rows* whose layout the plan fixes (``plain``: raw halo rows; ``mvc``:
raw rows and pre-aggregated partial sums, see :mod:`graphdist.halo.local`). The training path
fuses it with the SpMM (:class:`graphdist.halo.spmm.SparseAdj`): it builds the send buffer,
calls :meth:`HaloExchanger.post`, multiplies the owned block while rows travel, then
``wait()``s; backward mirrors it with :meth:`HaloExchanger.post_reverse`. With ``bits < 32`` the
rows travel quantised (:mod:`graphdist.halo.quant`: per-row offset and scale, stochastic
rounding, packed bytes), forward activations and backward gradients alike.

``exchanger(h)`` (autograd) returns ``[h ; halo rows]`` in one tensor for callers that index
rows directly (the recommender's per-batch tables); ``all_to_all`` moves a plain tensor.

Everything here is a no-op at world size 1 (or without a process group), so the model code
is plain single-device code with the exchange injected.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from graphdist.errors import ConfigError, DistributedError


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


class CommStats:
    """Counters of halo traffic sent by this rank (rows and bytes, reset per epoch) and the
    quantisation error of the rows sent (kept across epochs)."""

    def __init__(self):
        self.rows = 0
        self.bytes = 0
        self.errors: dict = {}
        """``{(direction, tag): [squared error, squared norm]}`` of quantised rows sent."""

    def reset(self):
        self.rows = 0
        self.bytes = 0

    def add(self, t: torch.Tensor):
        self.rows += int(t.shape[0])
        self.bytes += int(t.numel() * t.element_size())

    def add_error(self, direction: str, tag: int, err2: float, norm2: float) -> None:
        e = self.errors.setdefault((direction, int(tag)), [0.0, 0.0])
        e[0] += err2
        e[1] += norm2


class _HaloExchangeFn(torch.autograd.Function):
    """``[h ; halo rows]`` with autograd (gradients of halo rows go home), plain float rows."""

    @staticmethod
    def forward(ctx, h, ex):
        ctx.ex = ex
        full = h.new_empty((h.shape[0] + ex.n_recv,) + tuple(h.shape[1:]))
        full[:h.shape[0]] = h
        full[h.shape[0]:] = ex.all_to_all(h.index_select(0, ex.send_idx), ex.send_counts, ex.recv_counts, ex.n_recv)
        return full

    @staticmethod
    def backward(ctx, g):
        ex = ctx.ex
        n_own = g.shape[0] - ex.n_recv
        g_owned = g[:n_own].clone()
        back = ex.all_to_all(g[n_own:].contiguous(), ex.recv_counts, ex.send_counts, ex.n_send)
        if back.shape[0]:
            g_owned.index_add_(0, ex.send_idx, back)
        return g_owned, None


class HaloExchanger:
    """Moves a rank's message rows to the peers that need them, asynchronously.

    ``HaloExchanger(send_idx, send_counts, recv_counts)`` is the plain exchange of a plan (rows
    ``h[send_idx]``); :meth:`from_local_graph` builds it for a halo mode (``plain`` or ``mvc``,
    whose send rows come from the adjacency's send operator) and a wire format (``bits``: 32 =
    float32; 16, 8, 4, 2 = quantised with stochastic rounding whose noise is keyed by (seed,
    step, rank, exchange), see :meth:`set_step`).
    ``stats`` counts the rows and bytes this rank sends (quantisation parameters included)
    and, with ``measure = True``, the relative error of the quantised rows per layer.
    """

    def __init__(self, send_idx: torch.Tensor | None, send_counts: list[int], recv_counts: list[int],
                 device: torch.device | str = "cpu", group=None, *, bits: int = 32, seed: int = 0,
                 mode: str | None = None):
        from graphdist.halo.quant import BITS
        if bits not in BITS:
            raise ConfigError(f"--halo-bits {bits} is not supported (choose from {', '.join(map(str, BITS))})")
        self.send_idx = None if send_idx is None else send_idx.to(device)
        self.send_counts = [int(c) for c in send_counts]
        self.recv_counts = [int(c) for c in recv_counts]
        self.n_send = sum(self.send_counts)
        self.n_recv = sum(self.recv_counts)
        self.group = group
        self.stats = CommStats()
        self.active = world()[1] > 1 and len(self.send_counts) > 1
        self.mode = mode or "plain"
        self.bits, self.seed, self.measure = int(bits), int(seed), False
        self._tag = 0
        self._step, self._calls = 0, 0
        if bits < 32 and self.active and dist.get_backend(group) not in ("gloo", "nccl"):
            raise ConfigError(f"--halo-bits {bits}: the {dist.get_backend(group)} backend cannot carry "
                              "quantised halo rows (gloo or nccl needed); use --halo-bits 32")

    @classmethod
    def from_local_graph(cls, lg, device="cpu", group=None, *, halo: str = "plain", bits: int = 32,
                         seed: int = 0) -> "HaloExchanger":
        """The exchanger of ``lg``'s plan in ``halo`` mode (pair it with
        ``SparseAdj.for_model(lg, model, device, halo)``)."""
        if halo == "plain":
            return cls(lg.send_idx, lg.send_counts, lg.recv_counts, device, group, bits=bits, seed=seed)
        lay = lg.exchange_layout(halo)
        return cls(None, lay.send_counts, lay.recv_counts, device, group, bits=bits, seed=seed, mode=halo)

    def set_step(self, step: int) -> None:
        """Rounding noise from now on is keyed by (seed, step, rank, n-th exchange of the step):
        runs and resumed runs repeat."""
        self._step, self._calls = int(step), 0

    def start_pass(self) -> None:
        """A forward pass begins: its exchanges are tagged 0, 1, ... (= the layers)."""
        self._tag = 0

    def next_tag(self) -> int:
        """Tag of the next forward exchange (its backward uses the same tag)."""
        t = self._tag
        self._tag += 1
        return t

    def all_to_all(self, send: torch.Tensor, in_counts, out_counts, n_out) -> torch.Tensor:
        """Blocking all-to-all of a plain tensor (counted in ``stats``)."""
        out = send.new_empty((n_out,) + tuple(send.shape[1:]))
        self.stats.add(send)
        dist.all_to_all_single(out, send, output_split_sizes=out_counts,
                               input_split_sizes=in_counts, group=self.group)
        return out

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """``[h ; halo rows]`` as one tensor with autograd (plain rows, float)."""
        if not self.active:
            return h
        if self.send_idx is None:
            raise ValueError("exchanger(h) needs a plain plan (send_idx)")
        return _HaloExchangeFn.apply(h.contiguous(), self)

    def post(self, rows: torch.Tensor, tag: int | None = None) -> "Pending":
        """Start sending message rows ``[n_send, F]`` (peer order); ``.wait()`` gives the rows
        received ``[n_recv, F]``. Runs in the background (gloo thread / NCCL stream)."""
        return self._start(rows, self.send_counts, self.recv_counts, self.n_recv, "forward", tag)

    def post_reverse(self, rows: torch.Tensor, tag: int | None = None) -> "Pending":
        """The reverse direction (gradients of received rows go home): ``[n_recv, F]`` in,
        ``.wait()`` gives ``[n_send, F]``."""
        return self._start(rows, self.recv_counts, self.send_counts, self.n_send, "backward", tag)

    def _start(self, rows, in_counts, out_counts, n_out, direction, tag) -> "Pending":
        from graphdist.halo import quant
        rows = rows.contiguous()
        decode = None
        if self.bits == 32:
            buf = rows
        else:
            from graphdist.halo.keyed import key32
            self._calls += 1
            buf = quant.encode(rows, self.bits, key32(self.seed, self._step, world(self.group)[0], self._calls))
            width, dtype, bits = rows.shape[1], rows.dtype, self.bits
            decode = lambda out: quant.decode(out, bits, width, dtype)  # noqa: E731
            if self.measure and tag is not None and rows.numel():
                err = decode(buf) - rows
                self.stats.add_error(direction, tag, float((err * err).sum()), float((rows * rows).sum()))
        out = buf.new_empty((n_out,) + tuple(buf.shape[1:]))
        self.stats.add(buf)
        work = dist.all_to_all_single(out, buf, output_split_sizes=out_counts,
                                      input_split_sizes=in_counts, group=self.group, async_op=True)
        return Pending(work, out, buf, decode)


class Pending:
    """An exchange in flight; keeps its send buffer alive until ``wait()``, then decodes."""

    def __init__(self, work, out: torch.Tensor, keep: torch.Tensor, decode=None):
        self.work, self.out, self.keep, self.decode = work, out, keep, decode

    def wait(self) -> torch.Tensor:
        self.work.wait()
        self.keep = None
        return self.out if self.decode is None else self.decode(self.out)


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
    padded = t.new_zeros((max(sizes),) + tuple(t.shape[1:]), device=dev)
    padded[:t.shape[0]] = t
    bufs = [torch.empty_like(padded) for _ in range(ws)]
    dist.all_gather(bufs, padded, group=group)
    return torch.cat([b[:s] for b, s in zip(bufs, sizes)]).to(t.device)


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


def _store():
    from torch.distributed.distributed_c10d import _get_default_store
    return _get_default_store()


def publish_error(message: str) -> None:
    """Leave this rank's one-line error in the rendezvous store, so that the rank reporting the
    resulting collective failure can say what happened here (best effort)."""
    if world()[1] == 1:
        return
    try:
        _store().set(f"graphdist/error/{world()[0]}", message[:500])
    except Exception:  # noqa: BLE001 - the store may be gone too
        pass


def publish_failure(exc: BaseException) -> None:
    """:func:`publish_error` for an exception about to end this rank (call it before the
    process group is destroyed): user errors as their message, anything else as type: message."""
    from graphdist.errors import USER_ERRORS, Interrupted
    if isinstance(exc, (Interrupted, KeyboardInterrupt)):
        return
    text = str(exc) if isinstance(exc, USER_ERRORS) else f"{type(exc).__name__}: {str(exc)[:200]}"
    publish_error(text.strip().splitlines()[0] if text.strip() else type(exc).__name__)


def _published_errors(ws: int) -> dict[int, str]:
    out = {}
    try:
        store = _store()
        for r in range(ws):
            key = f"graphdist/error/{r}"
            if store.check([key]):
                out[r] = store.get(key).decode(errors="replace")
    except Exception:  # noqa: BLE001
        pass
    return out


def find_dead_ranks(tag: str, wait_s: float = 3.0) -> list[int] | None:
    """After a failed collective: every surviving rank checks in through the rendezvous store;
    ranks that have not checked in within ``wait_s`` are dead. ``None`` if the store itself is
    unreachable (it lives with rank 0 / the launcher)."""
    rank, ws = world()
    try:
        store = _store()
        store.set(f"graphdist/alive/{tag}/{rank}", "1")
        keys = [f"graphdist/alive/{tag}/{r}" for r in range(ws)]
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
    rank, ws = world()
    dead = find_dead_ranks(where)
    told = {r: m for r, m in _published_errors(ws).items() if r != rank}
    if told:
        r, m = min(told.items())
        who = f"rank {r} failed: {m}"
    elif dead is None:
        who = "the job's rendezvous store is unreachable (the node hosting it is gone)"
    elif dead:
        who = "rank" + ("s " if len(dead) > 1 else " ") + ", ".join(map(str, dead)) + " stopped responding"
    else:
        who = "all ranks are alive"
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    raise DistributedError(f"rank {rank}: collective failed during {where}: {who} ({first})") from exc


def check_same(value, what: str, group=None) -> None:
    """Raise :class:`DistributedError` unless every rank passes an equal ``value`` (a plan hash,
    a fingerprint); the message names the ranks that differ and their values."""
    vals = all_gather_object(value, group)
    if any(v != vals[0] for v in vals):
        diff = ", ".join(f"rank {r}: {v}" for r, v in enumerate(vals) if v != vals[0])
        raise DistributedError(f"{what} differs between ranks (rank 0: {vals[0]}; {diff}); every rank "
                               "must build the same plan")
