"""The halo exchange: message rows of a rank's layout moved to the peers that need them.

:class:`HaloExchanger`: one asynchronous all-to-all (:func:`graphdist.comm.all_to_all_rows`)
per layer and direction moves *message rows* whose order the layout fixes (``plain``: raw halo
rows; ``mvc``: raw rows and pre-aggregated partial sums, see :mod:`graphdist.partition.local`). The
training path fuses it with the SpMM (:class:`graphdist.exchange.spmm.SparseAdj`): it builds the
send buffer, calls :meth:`HaloExchanger.post`, multiplies the owned block while rows travel,
then ``wait()``s; backward mirrors it with :meth:`HaloExchanger.post_reverse`. With
``bits < 32`` the rows travel quantised (:mod:`graphdist.exchange.quant`: per-row offset and scale,
stochastic rounding, packed bytes), forward activations and backward gradients alike.

With a :class:`~graphdist.exchange.route.RankRoute` of the ``hosts`` route (``--halo-route hosts``) each
exchange goes in two phases: a raw row crosses to another host once, to one rank there that
forwards it inside its host (:mod:`graphdist.exchange.route`; float rows, one round, fresh halos);
with a direct route's plan the exchange is today's and the plan counts the bytes between hosts.

With a :class:`~graphdist.exchange.link.Link` (``--link-gbps``) every exchange arrives no earlier than
its simulated transfer time; with stale buffers (:mod:`graphdist.exchange.stale`, ``--halo-staleness
1``) ``post`` hands back the rows of the previous epoch's exchange and leaves this one in flight.

Its modes are its own: stale buffers, the statistics it counts into, the link and the widths
are constructor arguments; widths per layer (:meth:`HaloExchanger.set_widths`), calibration
(:meth:`~HaloExchanger.start_calibration` / :meth:`~HaloExchanger.end_calibration`), error
measurement (:meth:`~HaloExchanger.measure_errors`) and rounds (:meth:`~HaloExchanger.in_rounds`)
change through its methods. No public attribute is assigned after construction (it raises).

``exchanger(h)`` (autograd) returns ``[h ; halo rows]`` in one tensor for callers that index
rows directly (the recommender's per-batch tables); ``all_to_all`` moves a plain tensor.

Everything here is a no-op at world size 1 (or without a process group), so the model code
is plain single-device code with the exchange injected. The collectives themselves are
:mod:`graphdist.comm`'s.
"""
from __future__ import annotations

import time

import torch

from graphdist import comm
from graphdist.errors import ConfigError
from graphdist.exchange import quant
from graphdist.keyed import key32
from graphdist.exchange.quant import BITS
from graphdist.exchange.stale import Staleness, StaleHalos

__all__ = ["CommStats", "HaloExchanger", "Pending"]


class CommStats:
    """Counters of halo traffic sent by this rank (rows and bytes, reset per epoch) and the
    quantisation error of the rows sent (kept across epochs)."""

    def __init__(self):
        self.rows = 0
        self.bytes = 0
        self.host_bytes = 0
        """Bytes of those sent to ranks of other hosts (counted where the exchanger has a route)."""
        self.errors: dict = {}
        """``{(direction, tag): [squared error, squared norm]}`` of quantised rows sent."""
        self.calib: dict = {}
        """``{(direction, tag): [rows sent, rows received, width, squared norm, expected squared
        error at 16, 8, 4, 2 bits, seconds to encode and decode them at 16, 8, 4, 2 bits, seconds
        of compute between post and wait]}`` of the rows sent while calibrating (``--halo
        auto``: what the rows would lose and cost at each width, and how much transfer the
        layer's compute hides)."""

    def reset(self):
        self.rows = 0
        self.bytes = 0
        self.host_bytes = 0

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

    ``HaloExchanger(send_idx, send_counts, recv_counts)`` is the plain exchange of a layout (rows
    ``h[send_idx]``); :meth:`from_local_graph` builds it for a halo mode (``plain`` or ``mvc``,
    whose send rows come from the adjacency's send operator) and a wire format (``bits``: 32 =
    float32; 16, 8, 4, 2 = quantised with stochastic rounding whose noise is keyed by (seed,
    step, rank, exchange), see :meth:`set_step`).
    ``stats`` counts the rows and bytes this rank sends (quantisation parameters included)
    and, after :meth:`measure_errors`, the relative error of the quantised rows per layer; a
    :class:`CommStats` given as ``stats`` is shared (counted into by several exchangers).
    ``stale``: hold each exchange for the next epoch (:class:`~graphdist.exchange.stale.StaleHalos`
    of this exchanger's row counts, ``--halo-staleness 1``). ``route``: a
    :class:`~graphdist.exchange.route.RankRoute` of this layout (:func:`graphdist.exchange.route.gather_route`):
    routed, the two-level exchange across hosts; direct, today's exchange whose bytes to other
    hosts ``stats.host_bytes`` counts.

    Public attributes are read-only once it is built (assigning one raises ``AttributeError``):
    its modes change only through its methods.
    """

    def __init__(self, send_idx: torch.Tensor | None, send_counts: list[int], recv_counts: list[int],
                 device: torch.device | str = "cpu", group=None, *, bits: int = 32, seed: int = 0,
                 mode: str | None = None, link=None, stats: CommStats | None = None,
                 stale: Staleness | None = None, route=None):
        if bits not in BITS:
            raise ConfigError(f"--halo-bits {bits} is not supported (choose from {', '.join(map(str, BITS))})")
        self.send_idx = None if send_idx is None else send_idx.to(device)
        self.send_counts = [int(c) for c in send_counts]
        self.recv_counts = [int(c) for c in recv_counts]
        self.n_send = sum(self.send_counts)
        self.n_recv = sum(self.recv_counts)
        self.device = torch.device(device)
        self.group = group
        self.stats = CommStats() if stats is None else stats
        self.active = comm.world()[1] > 1 and len(self.send_counts) > 1
        self.mode = mode or "plain"
        self.bits, self.seed = int(bits), int(seed)
        self.link = link
        """:class:`~graphdist.exchange.link.Link` that delays each exchange (None: no delay)."""
        self._measure = False
        self._tag = 0
        self._step, self._calls = 0, 0
        self._widths: dict = {}
        self._calibrating = False
        self._stale = None if stale is None else StaleHalos(
            {"forward": self.n_recv, "backward": self.n_send}, stale.layers, stale.width, stale.gamma, device)
        self._rounds = 1
        self._round_counts = [(self.send_counts, self.recv_counts)]
        self._round_idx = [self.send_idx]
        if bits < 32 and self.active and comm.backend(group) not in ("gloo", "nccl"):
            raise ConfigError(f"--halo-bits {bits}: the {comm.backend(group)} backend cannot carry "
                              "quantised halo rows (gloo or nccl needed); use --halo-bits 32")
        self.route = route
        """:class:`~graphdist.exchange.route.RankRoute` (None: no host map, the direct exchange)."""
        if route is not None:
            route.check(self.n_send, self.n_recv, bits < 32 or stale is not None or link is not None)
        self._built = True

    def __setattr__(self, name: str, value) -> None:
        if not name.startswith("_") and getattr(self, "_built", False):
            raise AttributeError(f"HaloExchanger.{name} is read-only once the exchanger is built: pass it to the "
                                 "constructor or use a method (set_widths, start_calibration, measure_errors, "
                                 "in_rounds)")
        object.__setattr__(self, name, value)

    @property
    def routed(self) -> bool:
        """Whether exchanges take the two-level route across hosts (``--halo-route hosts``)."""
        return self.route is not None and self.route.routed

    @property
    def stale(self) -> StaleHalos | None:
        """:class:`~graphdist.exchange.stale.StaleHalos` (``--halo-staleness 1``) or None."""
        return self._stale

    @property
    def rounds(self) -> int:
        """All-to-alls per exchange (:meth:`in_rounds`, :mod:`graphdist.exchange.rounds`)."""
        return self._rounds

    @property
    def layer_bits(self) -> dict:
        """``{(direction, tag): bits}``: the wire width of one layer's exchange in one direction
        where it differs from ``bits`` (:meth:`set_widths`)."""
        return dict(self._widths)

    @property
    def measure(self) -> bool:
        """Whether the error of quantised rows is recorded in ``stats.errors`` (:meth:`measure_errors`)."""
        return self._measure

    @property
    def calibrating(self) -> bool:
        """Whether each tagged exchange records in ``stats.calib`` what it would cost and err at
        every width (:meth:`start_calibration`)."""
        return self._calibrating

    def set_widths(self, widths: dict) -> None:
        """Move each layer's exchange in each direction at ``widths[(direction, tag)]`` bits
        (``--halo auto``'s choice, :mod:`graphdist.gnn.auto`); the others at ``bits``."""
        for (direction, tag), b in widths.items():
            if int(b) not in BITS:
                raise ValueError(f"{direction} exchange {tag}: {b} bits is not one of {BITS}")
        self._widths = {(d, int(t)): int(b) for (d, t), b in widths.items() if int(b) != self.bits}

    def measure_errors(self, on: bool) -> None:
        """Record (or stop recording) the relative error of the quantised rows sent, per layer
        and direction, in ``stats.errors``."""
        self._measure = bool(on)

    def start_calibration(self) -> None:
        """From now on every tagged exchange records in ``stats.calib`` what its rows would lose
        and cost at each width (``--halo auto``'s first epoch)."""
        self._calibrating = True

    def end_calibration(self) -> dict:
        """Stop calibrating; the records taken since :meth:`start_calibration` (``stats.calib``,
        which is emptied)."""
        self._calibrating = False
        calib, self.stats.calib = self.stats.calib, {}
        return calib

    @classmethod
    def from_local_graph(cls, lg, device="cpu", group=None, *, halo: str = "plain", bits: int = 32,
                         seed: int = 0, link=None, stale: Staleness | None = None, route=None) -> "HaloExchanger":
        """The exchanger of ``lg``'s layout in ``halo`` mode (pair it with
        ``SparseAdj.for_model(lg, model, device, halo)``); ``route``: its plan across hosts
        (:func:`graphdist.exchange.route.gather_route` of the same ``halo`` mode)."""
        if halo == "plain":  # a copy: lg's tensors may be pages of a mapped part file, freed with lg
            return cls(lg.send_idx.clone(), lg.send_counts, lg.recv_counts, device, group, bits=bits, seed=seed,
                       link=link, stale=stale, route=route)
        lay = lg.exchange_layout(halo)
        return cls(None, lay.send_counts, lay.recv_counts, device, group, bits=bits, seed=seed, mode=halo, link=link,
                   stale=stale, route=route)

    def restricted(self, send_idx: torch.Tensor, send_counts: list[int], recv_counts: list[int]) -> "HaloExchanger":
        """A plain exchanger of a subset of this one's rows (boundary sampling,
        :mod:`graphdist.exchange.boundary`) that shares its counters, link and rounding keys."""
        if self._rounds != 1:
            raise ValueError("an exchanger in rounds has no restricted (sampled) form: sampled exchanges move whole")
        if self.routed:
            raise ValueError("a routed exchanger has no restricted (sampled) form")
        sub = HaloExchanger(send_idx, send_counts, recv_counts, self.device, self.group, bits=self.bits,
                            seed=self.seed, mode=self.mode, link=self.link, stats=self.stats)
        object.__setattr__(sub, "route", self.route)  # a direct route's host map: the bytes between hosts
        sub._widths, sub._measure, sub._calibrating = self._widths, self._measure, self._calibrating
        sub._tag, sub._step, sub._calls = self._tag, self._step, self._calls
        return sub

    def in_rounds(self, rounds: int) -> "HaloExchanger":
        """This exchanger moving each exchange in ``rounds`` all-to-alls of a slice of every
        peer's rows (:mod:`graphdist.exchange.rounds`; pair it with ``SparseAdj.in_rounds``). Not
        with stale halos or a restricted (sampled) exchanger."""
        from graphdist.exchange.rounds import round_of
        rounds = int(rounds)
        if rounds <= 1 or rounds == self._rounds:
            return self
        if self._stale is not None:
            raise ValueError("an exchanger with stale buffers moves each exchange whole, not in rounds")
        if self.routed:
            raise ValueError(f"a routed exchanger moves each exchange in one round, not in {rounds}")
        s_rnd, s_per = round_of(self.send_counts, rounds)
        _, r_per = round_of(self.recv_counts, rounds)
        self._round_counts = list(zip(s_per, r_per))
        if self.send_idx is not None:
            s_rnd = s_rnd.to(self.send_idx.device)
            self._round_idx = [self.send_idx[s_rnd == r] for r in range(rounds)]
        else:
            self._round_idx = [None] * rounds
        self._rounds = rounds
        return self

    def round_counts(self, rnd: int) -> tuple[int, int]:
        """``(message rows sent, received)`` by this rank in round ``rnd``."""
        s, r = self._round_counts[rnd]
        return sum(s), sum(r)

    def round_send_idx(self, rnd: int) -> torch.Tensor:
        """Plain mode: the owned rows sent in round ``rnd``, peer by peer."""
        return self.send_idx if self._rounds == 1 else self._round_idx[rnd]

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
        arrival = self.link.post(time.perf_counter(), _nbytes(send), _nbytes(out)) if self.link is not None else 0.0
        comm.all_to_all_rows(out, send, out_counts, in_counts, self.group)
        if self.link is not None:
            self.link.hold_until(arrival)
        return out

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """``[h ; halo rows]`` as one tensor with autograd (plain rows, float)."""
        if not self.active:
            return h
        if self.send_idx is None:
            raise ValueError("exchanger(h) needs a plain layout (send_idx)")
        if self.routed:
            raise ValueError("exchanger(h) moves its rows directly: the route across hosts is post / post_reverse's")
        return _HaloExchangeFn.apply(h.contiguous(), self)

    def post(self, rows: torch.Tensor, tag: int | None = None, rnd: int = 0) -> "Pending":
        """Start sending message rows ``[n_send, F]`` (peer order; in rounds: round ``rnd``'s
        rows); ``.wait()`` gives the rows received ``[n_recv, F]``. Runs in the background
        (gloo thread / NCCL stream)."""
        send, recv = self._round_counts[rnd]
        pending = self._start(rows, send, recv, sum(recv), "forward", tag, rnd)
        return pending if self._stale is None else self._stale.swap("forward", tag, pending)

    def post_reverse(self, rows: torch.Tensor, tag: int | None = None, rnd: int = 0) -> "Pending":
        """The reverse direction (gradients of received rows go home): ``[n_recv, F]`` in,
        ``.wait()`` gives ``[n_send, F]``."""
        send, recv = self._round_counts[rnd]
        pending = self._start(rows, recv, send, sum(send), "backward", tag, rnd)
        return pending if self._stale is None else self._stale.swap("backward", tag, pending)

    def _start(self, rows, in_counts, out_counts, n_out, direction, tag, rnd=0) -> "Pending":
        if self.routed:  # the two-level route (float rows, one round: checked when built)
            return self.route.start(rows, direction, self.group, self.stats)
        rows = rows.contiguous()
        decode = None
        bits = self.bits if tag is None else self._widths.get((direction, int(tag)), self.bits)
        on_wait = self._calibrate(rows, n_out, direction, int(tag)) if self._calibrating and tag is not None else None
        if bits == 32:
            buf = rows
        else:
            self._calls += 1
            buf = quant.encode(rows, bits, key32(self.seed, self._step, comm.world(self.group)[0], self._calls))
            width, dtype = rows.shape[1], rows.dtype
            decode = lambda out: quant.decode(out, bits, width, dtype)  # noqa: E731
            if self._measure and tag is not None and rows.numel():
                err = decode(buf) - rows
                self.stats.add_error(direction, tag, float((err * err).sum()), float((rows * rows).sum()))
        out = buf.new_empty((n_out,) + tuple(buf.shape[1:]))
        self.stats.add(buf)
        if self.route is not None and buf.shape[0]:
            self.stats.host_bytes += self.route.cross_rows(in_counts) * (_nbytes(buf) // buf.shape[0])
        t0 = time.perf_counter()
        work = comm.all_to_all_rows(out, buf, out_counts, in_counts, self.group, async_op=True)
        # the simulated link queues every exchange (later rounds too) behind those still on it
        arrival = self.link.post(t0, _nbytes(buf), _nbytes(out)) if self.link is not None else 0.0
        return Pending(work, out, buf, decode, self.link, t0, arrival, on_wait)

    def _calibrate(self, rows: torch.Tensor, n_out: int, direction: str, tag: int):
        """Record ``rows``' costs at every width; returns what the exchange's ``wait()`` calls
        with the seconds of compute since it was posted."""
        c = self.stats.calib.setdefault((direction, tag), [0, 0, int(rows.shape[1])] + [0.0] * 10)
        c[0] += int(rows.shape[0])
        c[1] += int(n_out)
        if rows.numel():
            c[3] += sum(float(b.double().square().sum()) for b in rows.split(1 << 15))
            for i, b in enumerate(BITS[1:]):  # 16, 8, 4, 2
                c[4 + i] += quant.expected_sq_error(rows, b)
                t0 = time.perf_counter()
                quant.decode(quant.encode(rows, b), b, rows.shape[1], rows.dtype)
                c[8 + i] += time.perf_counter() - t0

        def hidden(seconds: float) -> None:
            c[12] += seconds
        return hidden


def _nbytes(t: torch.Tensor) -> int:
    return int(t.numel() * t.element_size())


class Pending:
    """An exchange in flight; keeps its send buffer alive until ``wait()``, then decodes. With
    a ``link`` it returns no earlier than the simulated arrival of ``nbytes`` posted at ``t0``;
    ``on_wait(seconds since t0)`` is called when ``wait()`` is first called.
    ``wait()`` may be called again: it returns the same rows."""

    def __init__(self, work, out: torch.Tensor, keep: torch.Tensor, decode=None, link=None,
                 t0: float = 0.0, arrival: float = 0.0, on_wait=None):
        self.work, self.out, self.keep, self.decode = work, out, keep, decode
        self.link, self.t0, self.arrival, self.on_wait = link, t0, arrival, on_wait
        self._rows = None

    def wait(self) -> torch.Tensor:
        if self._rows is None:
            if self.on_wait is not None:  # calibration: the compute the transfer had to hide behind
                self.on_wait(time.perf_counter() - self.t0)
            self.work.wait()
            if self.link is not None:
                self.link.hold_until(self.arrival)
            # the work object holds both buffers: let it go, so the send rows are freed now
            self.work = self.keep = None
            self._rows = self.out if self.decode is None else self.decode(self.out)
            self.out = None
        return self._rows
