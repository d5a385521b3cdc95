"""The memory model of a ``train-gcn`` rank (``graphdist plan`` and the check before a run):
the arrays it holds plus the largest bytes of activations and gradients live at one time in an
epoch, replayed tensor by tensor (:func:`activation_peak`, :mod:`graphdist.gnn.plan_replay`,
checked against torch's allocation record in ``tests/test_memory_record.py``), with the allocator's
slack on top
(:data:`ALLOC_SLACK`), over the process's own footprint (:data:`RUNTIME_BYTES`); and what the route
across hosts holds (``--halo-route hosts``, :func:`route_bytes`): its plan, built before training,
and the buffers of its two phases in every exchange."""
from __future__ import annotations

from graphdist.gnn.plan_replay import Epoch, Replay
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
the footprint was 0.985-1.010 of the measured one. (Fitted on the replay before it was checked
against the allocator's record, issue 47 item 8; not refitted since.)"""


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
    forward, backward, evaluation), replayed tensor by tensor (:func:`activation_replay`), with
    the allocator's slack; ``train=False``: of the evaluation pass alone (``graphdist infer``)."""
    rp = activation_replay(ps, layers, cfg, mode, active, k, per_host)
    return int((rp.peak() if train else rp.phase_peak("eval", static=False)) * ALLOC_SLACK)


def activation_replay(ps: PartStats, layers: list[dict], cfg, mode: str, active: bool, k: int = 1,
                      per_host: int = 0) -> Replay:
    """The tensors of one epoch as the layers allocate and free them (:mod:`graphdist.gnn.models`,
    :mod:`graphdist.exchange.spmm`): the training forward and backward, the evaluation forward.
    ``per_host`` > 1: the exchanges take the route across hosts (``--halo-route hosts``), whose
    two phases hold, beside the direct exchange's buffers, a copy of the rows sent, the rows
    received and those forwarded (at most ``per_host - 1`` copies of each row received)."""
    ep = Epoch(ps, cfg, mode, active, k, per_host)
    ep.carried(layers)
    logits = ep.train(layers)
    ep.evaluation(layers)
    ep.free(logits)  # the training pass's logits: held until the next epoch's
    return ep


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
    # the route's plan is built before training: its build peak stands beside the part's CSR
    # (let go once the net is built), where the activations will stand later
    build = route_peak - route_held + ps.edges * 4 + (n + 1) * 8 if routed else 0
    total = (RUNTIME_BYTES + feats + resident + ps.plan_bytes + adj + kept + params * 4 + optimizer + route_held
             + max(act, build))
    return {"owned_rows": n, "halo_rows": ps.halo, "message_rows_in": ps.recv.get(mode, 0) if active else 0,
            "features_bytes": feats, "held_halo_bytes": resident, "adjacency_bytes": adj, "activation_bytes": act + kept,
            "optimizer_bytes": params * 4 + optimizer, "plan_bytes": ps.plan_bytes, "runtime_bytes": RUNTIME_BYTES,
            "route_plan_bytes": route_peak, "peak_bytes": int(total)}
