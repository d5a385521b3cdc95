"""The tensors of one ``train-gcn`` epoch on a rank, replayed by name as the layers allocate and
free them (:class:`Replay`, :class:`Epoch`): the memory model's activations
(:func:`graphdist.gnn.plan_memory.activation_peak`), checked against torch's own allocation record
of a real epoch (``tests/test_memory_record.py``)."""
from __future__ import annotations

from graphdist.gnn.stats import PartStats

__all__ = ["Replay", "Epoch"]


class Replay:
    """The tensors an epoch allocates and frees, in order: ``events`` are ``(phase, name, bytes)``
    (``bytes`` > 0 when the buffer is allocated, < 0 when it is freed; a buffer keeps its name),
    phase ``"train"`` (forward, loss, backward) or ``"eval"``. :meth:`peak` is the model's
    figure; :meth:`phase_peak` is what an allocator's record of one phase shows, which
    ``tests/test_memory_record.py`` compares it with (and shows that leaving one buffer out is
    caught)."""

    def __init__(self):
        self.events: list[tuple[str, str, int]] = []
        self.phase = "train"
        self.static: set[str] = set()
        """buffers counted elsewhere (the weights' gradients, with the optimizer's state): in
        :meth:`phase_peak` (the allocator's record holds them), not in :meth:`peak`"""
        self._size: dict[str, int] = {}

    def alloc(self, nbytes: int, what: str, static: bool = False) -> str:
        """A buffer of ``nbytes`` comes to life; returns its name (to free it by)."""
        name = f"{self.phase} {what} #{len(self._size)}"
        self._size[name] = int(nbytes)
        self.events.append((self.phase, name, int(nbytes)))
        if static:
            self.static.add(name)
        return name

    def free(self, name: str | None) -> None:
        if name is not None:
            self.events.append((self.phase, name, -self._size[name]))

    def buffers(self, phase: str) -> dict[str, int]:
        """``{name: bytes}`` of the buffers ``phase`` allocates."""
        return {name: b for ph, name, b in self.events if ph == phase and b > 0}

    def phase_peak(self, phase: str, without: frozenset = frozenset(), static: bool = True) -> int:
        """The most bytes live at one time among the buffers ``phase`` allocates (leaving out
        those named in ``without``; the static ones only with ``static``)."""
        live = top = 0
        for ph, name, b in self.events:
            if ph == phase and name not in without and (static or name not in self.static):
                live += b
                top = max(top, live)
        return top

    def peak(self) -> int:
        """The most bytes of activations and gradients live at one time in the epoch (the
        static buffers left out)."""
        return max(self.phase_peak(ph, static=False) for ph in ("train", "eval"))

    def live_at_peak(self, phase: str) -> dict[str, int]:
        """``{name: bytes}`` of the buffers live when ``phase`` first reaches its peak."""
        live, top, now, at = 0, -1, {}, {}
        for ph, name, b in self.events:
            if ph != phase:
                continue
            live += b
            if b > 0:
                now[name] = b
            else:
                now.pop(name, None)
            if live > top:
                top, at = live, dict(now)
        return at



class Epoch(Replay):
    """One epoch's tensors over one rank's part (``k`` ranks, the exchange in ``mode``; the
    message rows only where ``active``): :meth:`train`, then :meth:`evaluation`."""

    def __init__(self, ps: PartStats, cfg, mode: str, active: bool, k: int = 1, per_host: int = 0):
        super().__init__()
        self.n, self.cfg, self.k = ps.n, cfg, k
        self.ms, self.mr = (ps.send.get(mode, 0), ps.recv.get(mode, 0)) if active else (0, 0)
        self.rounds = max(1, int(getattr(cfg, "halo_rounds", 1) or 1)) if active else 1
        self.active, self.per_host = active, (per_host if active and per_host > 1 else 0)

    def rows(self, r: int, w: int, what: str) -> str:
        """``r`` rows of ``w`` float32 columns."""
        return self.alloc(r * w * 4, what)

    def exchange(self, w: int, sent: int, got: int, what: str) -> str:
        """One product with its exchange in ``rounds`` rounds (:mod:`graphdist.exchange.spmm`): a
        round's send rows and receive buffer, the owned product (kept: the output), then per
        round the next round posted, the send rows let go at the wait, the halo block's product
        added into the output in place, the received rows let go. Returns the output's name."""
        rounds, k = self.rounds, self.k
        s = -(-sent // rounds) + (k if rounds > 1 and sent else 0)  # a round takes ceil(c/R) of a peer's rows
        q = -(-got // rounds) + (k if rounds > 1 and got else 0)
        bufs = (self.rows(s, w, f"{what} send"), self.rows(q, w, f"{what} recv"))
        if self.per_host:  # the route's two phases: the rows sent, received and forwarded
            self.free(self.rows(s + q + (self.per_host - 1) * max(s, q), w, f"{what} route phases"))
        out = self.rows(self.n, w, f"{what} product")
        for r in range(rounds):
            nxt = (self.rows(s, w, f"{what} send"), self.rows(q, w, f"{what} recv")) if r + 1 < rounds else None
            self.free(bufs[0])
            self.free(bufs[1])
            bufs = nxt
        return out

    def prop(self, i: int, w: int, held: bool = False) -> str:
        """Layer ``i``'s forward product at width ``w`` (``held``: the pass's message rows are
        held, nothing is sent)."""
        return self.exchange(w, 0 if held else self.ms, self.mr, f"L{i} forward")

    def train(self, layers: list[dict]) -> None:
        """The training forward, then the backward."""
        n, cfg = self.n, self.cfg
        saved: list = []
        inp = None  # the current input, when the forward made it
        for i, lay in enumerate(layers):
            fi, fo = lay["f_in"], lay["f_out"]
            if i == 0 and cfg.dropout > 0:
                inp = self.rows(n, fi, "dropped-out features")
            if lay["train_first"]:
                prod = self.prop(i, fi, lay.get("train_held", False))
                out = self.rows(n, fo, f"L{i} linear")
                saved.append(prod)  # A h, for the weight gradient
                if i == 0 or inp is None:
                    self.free(inp)
                else:
                    saved.append(inp)
            else:
                z = self.rows(n, fo, f"L{i} h W^T")
                out = self.prop(i, fo)
                self.free(z)
                saved.append(inp)  # h, for the weight gradient
            if cfg.batch_norm and i < len(layers) - 1:
                saved.append(self.rows(2 * n, fo, f"L{i} batch norm"))
            inp = out
        self.backward(layers, saved)

    def backward(self, layers: list[dict], saved: list) -> None:
        """The loss gradient, then per layer: the sparse product's gradient (with its exchange),
        the linear's, the ReLU/dropout's; each freed once the next one exists."""
        n, cfg = self.n, self.cfg
        g = self.rows(n, layers[-1]["f_out"], "loss gradient")
        for i in range(len(layers) - 1, -1, -1):
            lay = layers[i]
            fi, fo, first = lay["f_in"], lay["f_out"], lay["train_first"]
            into = i > 0 or cfg.label_rate > 0  # the layer's input needs a gradient (not the raw features)
            steps = ([fi, fi] if into else []) if first else [fo] + ([fi] if into else [])
            for j, width in enumerate(steps):
                if (first and j == 1) or (not first and j == 0):  # rows out and back, T^T added (mvc)
                    nxt = self.exchange(width, self.mr, self.ms, f"L{i} backward")
                else:
                    nxt = self.rows(n, width, f"L{i} linear gradient")
                self.free(g)
                g = nxt
            if i > 0:  # through the ReLU / dropout before this layer
                nxt = self.rows(n, fi, f"L{i} ReLU/dropout gradient")
                self.free(g)
                g = nxt
            self.free(saved.pop() if saved else None)

    def evaluation(self, layers: list[dict]) -> None:
        """Nothing saved: a layer's input, its product and its output live at a time."""
        n, prev = self.n, None
        for i, lay in enumerate(layers):
            fo, w = lay["f_out"], lay["eval_width"]
            if lay["eval_first"]:
                kept = i == 0 and lay["eval_reuse"] and (not self.active or lay.get("eval_held", False))
                prod = None if kept else self.prop(i, w)  # kept: counted with the arrays
                out = self.rows(n, fo, f"L{i} eval linear")
                self.free(prod)
            else:
                z = self.rows(n, fo, f"L{i} eval h W^T")
                out = self.prop(i, fo)
                self.free(z)
            self.free(prev)
            prev = out
