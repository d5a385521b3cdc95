"""The memory model of a ``train-gcn`` rank (``graphdist plan`` and the check before a run):
the arrays it holds plus the largest bytes of activations and gradients live at one time in an
epoch, replayed tensor by tensor (:func:`activation_peak`), with the allocator's slack on top
(:data:`ALLOC_SLACK`), over the process's own footprint (:data:`RUNTIME_BYTES`); and what the route
across hosts holds (``--halo-route hosts``, :func:`route_bytes`): its plan, built before training,
and the buffers of its two phases in every exchange."""
from __future__ import annotations

from graphdist.gnn.stats import PartStats, layer_plan
from graphdist.memory import PROCESS_BYTES

RUNTIME_BYTES = PROCESS_BYTES
"""A trainer process before its part arrives (the one footprint every memory check adds,
:data:`graphdist.memory.PROCESS_BYTES`)."""

ALLOC_SLACK = 1.05
"""Allocator overhead on the activations (freed blocks not yet returned, page rounding): measured
1.037-1.067 (``(peak - a 400-node run's peak - predicted arrays) / replayed activations`` on 40k-
and 80k-node SBM graphs at k = 1 and 2, hidden 256 and 512: ``python benchmarks/memory_constants.py``,
BENCHMARKS.md "Memory model constants"), the middle of that range; with it the predicted peak above
the footprint was 0.985-1.010 of the measured one."""


def route_bytes(ps: PartStats, mode: str, per_host: int) -> tuple[int, int]:
    """``(bytes of the route plan's index tensors, held while training; most bytes the plan takes
    while it is built, those included)`` of a rank routed across hosts with ``per_host`` ranks on
    its host (:mod:`graphdist.exchange.route_plan`: bounded by the rank's own message rows)."""
    from graphdist.exchange.route_plan import plan_index_bytes, plan_peak_bytes
    sent, got = ps.send.get(mode, 0), ps.recv.get(mode, 0)
    return plan_index_bytes(sent, got, per_host), plan_peak_bytes(sent, got, per_host)


def activation_peak(ps: PartStats, layers: list[dict], cfg, mode: str, active: bool, k: int = 1,
                    per_host: int = 0, train: bool = True) -> int:
    """Largest bytes of activations and gradients live at one time in an epoch (training
    forward, backward, evaluation), replaying the tensors the layers allocate and free;
    ``train=False``: of the evaluation pass alone (``graphdist infer``).
    ``per_host`` > 1: the exchanges take the route across hosts (``--halo-route hosts``), whose
    two phases hold, beside the direct exchange's buffers, a copy of the rows sent, the rows
    received and those forwarded (at most ``per_host - 1`` copies of each row received)."""
    n, f4 = ps.n, 4
    ms, mr = (ps.send.get(mode, 0), ps.recv.get(mode, 0)) if active else (0, 0)
    rounds = max(1, int(getattr(cfg, "halo_rounds", 1) or 1)) if active else 1
    routed = active and per_host > 1
    live = peak = 0

    def alloc(b):
        nonlocal live, peak
        live += b
        peak = max(peak, live)

    def exchange(w, sent, got):
        """One product with its exchange in ``rounds`` rounds (``graphdist.exchange.spmm``): a
        round's send rows and receive buffer, the owned product (kept: the output), then per
        round the next round posted, the send rows let go at the wait, the halo block's product
        added into the output in place, the received rows let go."""
        s = -(-sent // rounds) + (k if rounds > 1 and sent else 0)  # a round takes ceil(c/R) of a peer's rows
        q = -(-got // rounds) + (k if rounds > 1 and got else 0)
        alloc((s + q) * w * f4)
        two = (s + q + (per_host - 1) * max(s, q)) * w * f4 if routed else 0  # the route's phase buffers
        alloc(two)
        alloc(-two)
        alloc(n * w * f4)
        for r in range(rounds):
            if r + 1 < rounds:
                alloc((s + q) * w * f4)
            alloc(-s * w * f4)
            alloc(-q * w * f4)

    def prop(w, held=False):
        exchange(w, 0, mr) if held else exchange(w, ms, mr)  # held: the pass's message rows, no send

    saved = []
    inp = 0  # bytes of the current input tensor that the forward owns
    for i, lay in enumerate(layers):
        fi, fo, w = lay["f_in"], lay["f_out"], lay["train_width"]
        if i == 0 and cfg.dropout > 0:
            alloc(n * fi * f4)  # the dropped-out copy of the features
            inp = n * fi * f4
        if lay["train_first"]:
            prop(fi, lay.get("train_held", False))
            alloc(n * fo * f4)  # the linear's output
            saved.append(n * fi * f4)  # A h, for the weight gradient
            if i == 0 or not inp:
                alloc(-inp)
            else:
                saved.append(inp)
        else:
            alloc(n * fo * f4)  # h W^T
            prop(fo)
            alloc(-n * fo * f4)
            saved.append(inp)  # h, for the weight gradient
        if cfg.batch_norm and i < len(layers) - 1:
            alloc(2 * n * fo * f4)
            saved.append(2 * n * fo * f4)
        inp = n * fo * f4
    # backward: the loss gradient, then per layer: the sparse product's gradient (with its
    # exchange), the linear's, the ReLU/dropout's; each freed once the next one exists
    g = n * layers[-1]["f_out"] * f4
    alloc(g)
    for i in range(len(layers) - 1, -1, -1):
        lay = layers[i]
        fi, fo, first = lay["f_in"], lay["f_out"], lay["train_first"]
        into = i > 0 or cfg.label_rate > 0  # the layer's input needs a gradient (not the raw features)
        steps = ([fi] if into else []) + ([fi] if into else []) if first else [fo] + ([fi] if into else [])
        for j, width in enumerate(steps):
            sparse = (first and j == 1) or (not first and j == 0)
            if sparse:  # gradient rows out and back, then the send operator's product added (mvc)
                exchange(width, mr, ms)
            else:
                alloc(n * width * f4)
            alloc(-g)
            g = n * width * f4
        if i > 0:  # through the ReLU / dropout before this layer
            alloc(n * fi * f4)
            alloc(-g)
            g = n * fi * f4
        alloc(-saved.pop() if saved else 0)
    train_peak = peak if train else 0
    # evaluation: nothing saved; a layer's input, its product and its output live at a time
    live = peak = prev = 0
    for i, lay in enumerate(layers):
        fo, w = lay["f_out"], lay["eval_width"]
        if lay["eval_first"]:
            kept = i == 0 and lay["eval_reuse"] and (not active or lay.get("eval_held", False))  # counted with the arrays
            if not kept:
                prop(w)
            alloc(n * fo * f4)
            alloc(0 if kept else -n * w * f4)
        else:
            alloc(n * fo * f4)  # h W^T
            prop(fo)
            alloc(-n * fo * f4)
        alloc(-prev)
        prev = n * fo * f4
    return int(max(train_peak, peak) * ALLOC_SLACK)


def adjacency_bytes(ps: PartStats, model: str, mode: str, active: bool) -> int:
    """Bytes of the model's normalised adjacency of a part: the owned block (one CSR where GCN's
    is symmetric, else it and its transpose) and, with an exchange, the halo block (and mvc's
    send operator)."""
    n = ps.n
    own_nnz = ps.own_edges - (ps.loops if model == "gcn" else 0) + (n if model == "gcn" else 0)
    sym = ps.symmetric and model == "gcn"
    adj = own_nnz * 8 * (1 if sym else 2) + 4 * (n + 1) * (1 if sym else 2)
    if active:
        adj += ps.halo_entries.get(mode, 0) * 8 * 2 + 4 * (n + ps.recv.get(mode, 0) + 2)
        if mode == "mvc":
            adj += ps.send_entries * 8 * 2 + 4 * (n + ps.send.get(mode, 0) + 2)
    return adj


def rank_memory(ps: PartStats, cfg, f_in: int, n_classes: int, k: int, mode: str, held: bool,
                per_host: int = 0) -> dict:
    """Bytes of one rank, by what holds them (the exchange in ``cfg.halo_rounds`` rounds; ``held``:
    the input's halo rows are held, ``--input-halo resident`` as resolved). ``per_host``: ranks on
    this rank's host (0: not known); with ``--halo-route hosts``, several ranks on a host and more
    than one host, the route's plan and the buffers of its two phases count too
    (``route_plan_bytes``: the plan's index tensors, held throughout, plus what building it takes
    at once, before the activations exist)."""
    active = k > 1
    routed = active and getattr(cfg, "halo_route", "direct") == "hosts" and 1 < per_host < k
    layers = layer_plan(cfg, f_in, n_classes, active, held)
    n = ps.n
    adj = adjacency_bytes(ps, cfg.model, mode, active)
    feats = n * f_in * 4
    held = active and (layers[0].get("eval_held", False) or layers[0].get("train_held", False))
    kept = n * f_in * 4 if layers[0]["eval_reuse"] and (not active or layers[0].get("eval_held", False)) else 0
    # held halo rows of the input (--input-halo resident): the rows, and in mvc the receiver's copy
    # of the partial sums' entries (at most the plain halo block's entries)
    resident = (ps.halo * f_in * 4 + (ps.halo_entries.get("plain", 0) * 8 if mode == "mvc" else 0)) if held else 0
    widths = [f_in] + [cfg.hidden] * (cfg.layers - 1) + [n_classes]
    params = sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))
    optimizer = params * 4 * 3  # gradient and two Adam moments
    act = activation_peak(ps, layers, cfg, mode, active, k, per_host if routed else 0)
    route_held, route_peak = route_bytes(ps, mode, per_host) if routed else (0, 0)
    if active and getattr(cfg, "halo_staleness", 0):  # last epoch's rows held per layer and direction
        smooth = 2 if getattr(cfg, "staleness_smoothing", 0.0) > 0 else 1
        act += smooth * 4 * sum(lay["train_width"] * (ps.recv.get(mode, 0) + (ps.send.get(mode, 0) if lay["needs_input_grad"] else 0))
                                for lay in layers)
    # the route's plan is built before training: its build peak stands beside the part's CSR
    # (let go once the net is built), where the activations will stand later
    build = route_peak - route_held + ps.edges * 4 + (n + 1) * 8 if routed else 0
    total = (RUNTIME_BYTES + feats + resident + ps.plan_bytes + adj + kept + params * 4 + optimizer + route_held
             + max(act, build))
    return {"owned_rows": n, "halo_rows": ps.halo, "message_rows_in": ps.recv.get(mode, 0) if active else 0,
            "features_bytes": feats, "held_halo_bytes": resident, "adjacency_bytes": adj, "activation_bytes": act + kept,
            "optimizer_bytes": params * 4 + optimizer, "plan_bytes": ps.plan_bytes, "runtime_bytes": RUNTIME_BYTES,
            "route_plan_bytes": route_peak, "peak_bytes": int(total)}
