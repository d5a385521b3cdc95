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
    phase ``"carried"`` (what the previous epoch left held: live as the epoch starts),
    ``"train"`` (forward, loss, backward) or ``"eval"``. :meth:`peak` is the model's
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
        those named in ``without``; the static ones only with ``static``): what an allocator's
        record of that phase alone shows (a buffer of an earlier phase freed in it not counted)."""
        live = top = 0
        mine = self.buffers(phase)
        for ph, name, b in self.events:
            if ph == phase and name in mine and name not in without and (static or name not in self.static):
                live += b
                top = max(top, live)
        return top

    def peak(self) -> int:
        """The most bytes of activations and gradients live at one time in the epoch, its
        events in order from what the previous epoch left held (the static buffers left out)."""
        live = top = 0
        for _, name, b in self.events:
            if name not in self.static:
                live += b
                top = max(top, live)
        return top

    def at_peak(self, phase: str, within: int = 0) -> set[str]:
        """The buffers of ``phase`` live at every moment it comes within ``within`` bytes of its
        :meth:`phase_peak` (leaving one of them out lowers every such moment by its size)."""
        top, live, now, common = self.phase_peak(phase), 0, set(), None
        mine = self.buffers(phase)
        for ph, name, b in self.events:
            if ph != phase or name not in mine:
                continue
            live += b
            (now.add if b > 0 else now.discard)(name)
            if live >= top - within:
                common = set(now) if common is None else common & now
        return common or set()


class Epoch(Replay):
    """One epoch's tensors over one rank's part (``k`` ranks, the exchange in ``mode``; the
    message rows only where ``active``), as :mod:`graphdist.gnn.models` and
    :mod:`graphdist.exchange.spmm` allocate and free them: :meth:`carried`, :meth:`train`,
    :meth:`evaluation` (:func:`graphdist.gnn.plan_memory.activation_replay`)."""

    def __init__(self, ps: PartStats, cfg, mode: str, active: bool, k: int = 1, per_host: int = 0):
        super().__init__()
        self.n, self.cfg, self.k, self.active = ps.n, cfg, k, active
        self.ms, self.mr = (ps.send.get(mode, 0), ps.recv.get(mode, 0)) if active else (0, 0)
        self.halo, self.mvc = (ps.halo if active else 0), mode == "mvc"
        self.to, self.frm = ps.send_to.get(mode), ps.recv_from.get(mode)
        self.rounds = max(1, int(getattr(cfg, "halo_rounds", 1) or 1)) if active else 1
        self.per_host = per_host if active and per_host > 1 else 0
        self.sage = cfg.model == "sage"
        self.stale = bool(active and getattr(cfg, "halo_staleness", 0))
        self.smooth = self.stale and getattr(cfg, "staleness_smoothing", 0.0) > 0
        self.dropped: str | None = None
        """the kept dropped-out features' name (:meth:`keeps_dropped`), from :meth:`carried`"""
        self.held: dict = {}
        """stale halos: (direction, layer) -> the names of the rows held until the next epoch
        (send, received, smoothed)"""

    def rows(self, r: int, w: int, what: str) -> str:
        """``r`` rows of ``w`` float32 columns."""
        return self.alloc(r * w * 4, what)

    def keeps_dropped(self, layers: list[dict]) -> bool:
        """Whether the model keeps the features it dropped out between epochs
        (``GNN._keeps_dropped`` in :mod:`graphdist.gnn.models`): when its first layer keeps its
        input for the backward anyway and that input needs no gradient."""
        cfg = self.cfg
        return cfg.dropout > 0 and cfg.label_rate == 0 and (self.sage or not layers[0]["train_first"])

    def carried(self, layers: list[dict]) -> None:
        """What the previous epoch left held: the dropped-out features the model writes over
        (:meth:`keeps_dropped`); ``--halo-staleness``: the previous epoch's exchanges (the rows
        sent, in flight, the rows received, the smoothed rows), one per layer and direction."""
        self.phase = "carried"
        self.dropped = self.rows(self.n, layers[0]["f_in"], "dropped-out features (kept)") \
            if self.keeps_dropped(layers) else None
        if not self.stale:
            return
        for i, lay in enumerate(layers):
            w = lay["train_width"]
            for d, s, q in (("forward", self.ms, self.mr), ("backward", self.mr, self.ms)):
                if d == "forward" or lay["needs_input_grad"]:
                    self.held[(d, i)] = [self.rows(s, w, f"L{i} {d} held send"), self.rows(q, w, f"L{i} {d} held recv")]
                    if self.smooth:
                        self.held[(d, i)].append(self.rows(q, w, f"L{i} {d} smoothed"))

    def exchange(self, w: int, sent: int, got: int, what: str, key=None) -> str:
        """One product with its exchange in ``rounds`` rounds (:mod:`graphdist.exchange.spmm`): a
        round's send rows and receive buffer, the owned product (kept: the output), then per
        round the next round posted, the send rows let go at the wait, the halo block's product
        added into the output in place, the received rows let go. Stale (``key``: the layer and
        direction of a training exchange): the rows posted now are held for the next epoch and
        the held ones used and let go. Returns the output's name."""
        if key is not None and self.stale:
            return self._stale(w, sent, got, what, key)
        rounds, tag = self.rounds, f"{what} "
        s, q = self._per_round(sent, self.to), self._per_round(got, self.frm)
        if sent != self.ms:  # the backward: the rows go the other way
            s, q = self._per_round(sent, self.frm), self._per_round(got, self.to)
        bufs = (self.rows(s[0], w, tag + "send"), self.rows(q[0], w, tag + "recv"))
        if self.per_host:  # the route's two phases: the rows sent, received and forwarded
            self.free(self.rows(s[0] + q[0] + (self.per_host - 1) * max(s[0], q[0]), w, tag + "route phases"))
        out = self.rows(self.n, w, tag + "product")
        for r in range(rounds):
            nxt = (self.rows(s[r + 1], w, tag + "send"), self.rows(q[r + 1], w, tag + "recv")) if r + 1 < rounds else None
            self.free(bufs[0])
            self.free(bufs[1])
            bufs = nxt
        return out

    def _per_round(self, total: int, peers: list | None) -> list[int]:
        """Rows of each round (:func:`graphdist.exchange.rounds.round_of`: of ``c`` rows for a
        peer, round ``r`` takes ``floor(c (r+1) / R) - floor(c r / R)``); without the counts per
        peer, ``ceil(total / R)`` plus one row per rank, a bound."""
        R = self.rounds
        if R == 1 or not total:
            return [total] * R
        if peers is None or sum(peers) != total:
            return [-(-total // R) + self.k] * R
        return [sum(c * (r + 1) // R - c * r // R for c in peers) for r in range(R)]

    def _stale(self, w: int, sent: int, got: int, what: str, key) -> str:
        new = [self.rows(sent, w, f"{what} send (held)"), self.rows(got, w, f"{what} recv (held)")]
        old = self.held.get(key, [])
        if old:
            self.free(old[0])  # the held exchange's wait lets its send rows go
        if self.smooth:  # s = gamma s' + (1 - gamma) rows: a new tensor, the old ones let go
            new.append(self.rows(got, w, f"{what} smoothed"))
            for name in old[1:]:
                self.free(name)
        out = self.rows(self.n, w, f"{what} product")
        if old and not self.smooth:
            self.free(old[1])  # used, then let go
        self.held[key] = new
        return out

    def dropout(self, r: int, w: int, what: str) -> str:
        """:func:`graphdist.gnn.models.keyed_dropout` into a new tensor (a block of rows at a
        time: the compare's scratch of one block, let go at once)."""
        out = self.rows(r, w, what)
        self.scratch(r, w, f"{what}: scratch")
        return out

    def scratch(self, r: int, w: int, what: str) -> None:
        """The dropout's compare of one block of rows (:func:`graphdist.keyed.blocks`), made and
        let go."""
        from graphdist.keyed import BLOCK
        self.free(self.rows(min(r, max(1, BLOCK // max(w, 1))), w, what))

    def held_prop(self, i: int, w: int) -> tuple[str, str]:
        """The first layer's product of held halo rows (``--input-halo resident``): their
        dropped-out copy, in mvc the message rows formed from it; nothing sent. Returns the
        product and what the layer lets go at its end."""
        drop = self.dropout(self.halo, w, f"L{i} held rows dropped out")
        if self.mvc:
            msg = self.rows(self.mr, w, f"L{i} held message rows")
            self.free(drop)
            drop = msg
        return self.rows(self.n, w, f"L{i} forward product"), drop

    def forward(self, layers: list[dict]) -> tuple[list, str]:
        """The training forward: per layer what it keeps for the backward (``early``: let go once
        the layer's own gradients are through; ``late``: once the ReLU/dropout before it is;
        ``bn``: its batch norm's, once the gradient is through that), and the logits."""
        n, cfg = self.n, self.cfg
        h = None
        if self.dropped is not None:  # written over, a block at a time
            self.scratch(n, layers[0]["f_in"], "dropped-out features: scratch")
        elif cfg.dropout > 0:
            h = self.dropout(n, layers[0]["f_in"], "dropped-out features")
        saved = []
        for i, lay in enumerate(layers):
            fi, fo = lay["f_in"], lay["f_out"]
            keep = {"early": [], "late": [], "bn": []}
            if i > 0:  # the ReLU (and dropout, in place, a block at a time) of the last output
                if cfg.dropout > 0:
                    self.scratch(n, fi, f"L{i} ReLU/dropout scratch")
                keep["late"].append(h)  # kept by the ReLU/dropout (and the weight gradient)
            root = self.rows(n, fo, f"L{i} root h W_r^T") if self.sage else None
            if lay["train_first"]:
                pending = None
                if lay.get("train_held", False):
                    prod, pending = self.held_prop(i, fi)
                else:
                    prod = self.exchange(fi, self.ms, self.mr, f"L{i} forward", ("forward", i))
                out = self.rows(n, fo, f"L{i} linear")
                if self.sage:  # (A h) W_l^T + b + root: a new tensor
                    lin, out = out, self.rows(n, fo, f"L{i} output")
                    self.free(lin)
                keep["early"].append(prod)  # A h, for the weight gradient
                if i == 0 and h is not None:
                    keep["early"].append(h) if self.sage else self.free(h)  # the root's weight gradient reads h
                self.free(pending)
            else:
                z = self.rows(n, fo, f"L{i} h W^T")
                out = self.exchange(fo, self.ms, self.mr, f"L{i} forward", ("forward", i))
                self.free(z)
                if i == 0 and h is not None:
                    keep["early"].append(h)  # h, for the weight gradient
            self.free(root)  # added in place
            if cfg.batch_norm and i < len(layers) - 1:
                out = self._batch_norm(i, fo, out, keep)
            saved.append(keep)
            h = out
        return saved, h

    def _batch_norm(self, i: int, w: int, x: str, keep: dict) -> str:
        """:class:`graphdist.gnn.models.GlobalBatchNorm1d` in training: ``d = x - mean``, ``d d``
        (summed, let go), ``d rsqrt(var)``, times the weight, plus the bias; keeps ``d`` and
        ``d rsqrt(var)``."""
        n = self.n
        d = self.rows(n, w, f"L{i} batch norm x - mean")
        self.free(self.rows(n, w, f"L{i} batch norm d^2"))
        dr = self.rows(n, w, f"L{i} batch norm normalised")
        dw = self.rows(n, w, f"L{i} batch norm scaled")
        out = self.rows(n, w, f"L{i} batch norm output")
        self.free(dw)
        self.free(x)
        keep["bn"] += [d, dr]
        return out

    def _batch_norm_grad(self, i: int, w: int, g: str, bn: list) -> str:
        """The gradient back through layer ``i``'s batch norm, as torch's autograd of
        :meth:`_batch_norm` allocates it: two products at a time, the saved tensors let go on
        the way."""
        self.alloc(4 * 2 * w, f"L{i} batch norm weight gradients", static=True)
        m = [self.rows(self.n, w, f"L{i} batch norm gradient {j}") for j in range(2)]
        for x in (g, m[0], bn[1]):
            self.free(x)
        m += [self.rows(self.n, w, f"L{i} batch norm gradient {j}") for j in range(2, 4)]
        self.free(m[1])
        self.free(m[2])
        m += [self.rows(self.n, w, f"L{i} batch norm gradient {j}") for j in range(4, 6)]
        for x in (m[3], m[4], bn[0]):
            self.free(x)
        out = self.rows(self.n, w, f"L{i} batch norm input gradient")
        self.free(m[5])
        return out

    def backward(self, layers: list[dict], saved: list) -> None:
        """The loss gradient, then per layer: its own gradients (the sparse product's with its
        exchange, the linear's, the root's), the ReLU/dropout's before it, the batch norm's;
        what a layer saved goes once the gradients that read it are through."""
        n, cfg = self.n, self.cfg
        g = self.rows(n, layers[-1]["f_out"], "loss gradient")
        for i in range(len(layers) - 1, -1, -1):
            lay = layers[i]
            fi, fo = lay["f_in"], lay["f_out"]
            into = i > 0 or cfg.label_rate > 0  # the layer's input needs a gradient (not the raw features)
            dh = (self._prop_first_grad if lay["train_first"] else self._lin_first_grad)(i, fi, fo, g, into)
            for x in saved[i]["early"]:
                self.free(x)
            if i > 0:  # through the ReLU / dropout before this layer
                g = self.rows(n, fi, f"L{i} ReLU/dropout gradient")
                self.free(dh)
                for x in saved[i]["late"]:
                    self.free(x)
                if saved[i - 1]["bn"]:
                    g = self._batch_norm_grad(i - 1, fi, g, saved[i - 1]["bn"])
            else:
                self.free(dh)

    def _weight_grads(self, i: int, fi: int, fo: int) -> None:
        """The layer's weight and bias gradients (counted with the optimizer: static)."""
        self.alloc(4 * (fi * fo * (2 if self.sage else 1) + fo), f"L{i} weight gradients", static=True)

    def _lin_first_grad(self, i: int, fi: int, fo: int, g: str, into: bool) -> str | None:
        """``A (h W^T)``'s gradients: the product's (rows out and back, ``T^T`` added in mvc),
        then the input's (and the root's, GraphSAGE), the incoming gradient let go once read."""
        n = self.n
        gp = self.exchange(fo, self.mr, self.ms, f"L{i} backward", ("backward", i))
        if not self.sage:
            self.free(g)
        self._weight_grads(i, fi, fo)
        dh = self.rows(n, fi, f"L{i} input gradient") if into else None
        self.free(gp)
        if self.sage:
            root = self.rows(n, fi, f"L{i} root gradient") if into else None
            self.free(g)
            self.free(root)  # added into the input's gradient
        return dh

    def _prop_first_grad(self, i: int, fi: int, fo: int, g: str, into: bool) -> str | None:
        """``(A h) W^T``'s gradients: the product's (then through the exchange), the root's."""
        n = self.n
        self._weight_grads(i, fi, fo)
        if not into:
            self.free(g)
            return None
        dp = self.rows(n, fi, f"L{i} linear gradient")
        if not self.sage:
            self.free(g)
        dh = self.exchange(fi, self.mr, self.ms, f"L{i} backward", ("backward", i))
        self.free(dp)
        if self.sage:
            root = self.rows(n, fi, f"L{i} root gradient")
            self.free(g)
            self.free(root)
        return dh

    def train(self, layers: list[dict]) -> str:
        """The training forward, then the backward; returns the logits' name (the epoch's own
        variable until the next epoch's)."""
        self.phase = "train"
        saved, logits = self.forward(layers)
        self.backward(layers, saved)
        return logits

    def evaluation(self, layers: list[dict]) -> None:
        """Nothing saved: a layer's input, its product and its output live at a time."""
        n, prev = self.n, None
        self.phase = "eval"
        for i, lay in enumerate(layers):
            fo, w = lay["f_out"], lay["eval_width"]
            root = self.rows(n, fo, f"L{i} eval root h W_r^T") if self.sage else None
            if lay["eval_first"]:
                kept = i == 0 and lay["eval_reuse"] and (not self.active or lay.get("eval_held", False))
                prod = None if kept else self.exchange(w, self.ms, self.mr, f"L{i} eval")  # kept: with the arrays
                out = self.rows(n, fo, f"L{i} eval linear")
                if self.sage:
                    lin, out = out, self.rows(n, fo, f"L{i} eval output")
                    self.free(lin)
                self.free(prod)
            else:
                z = self.rows(n, fo, f"L{i} eval h W^T")
                out = self.exchange(fo, self.ms, self.mr, f"L{i} eval")
                self.free(z)
            self.free(root)
            if self.cfg.batch_norm and i < len(layers) - 1:  # running statistics: one new tensor
                bn, out = out, self.rows(n, fo, f"L{i} eval batch norm")
                self.free(bn)
            self.free(prev)
            prev = out
        self.free(prev)
