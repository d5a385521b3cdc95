"""``graphdist plan --model gat|gatv2|gin|gcn2|sage-max|transformer|MODULE:CLASS``: the halo
exchanges of a PyG model and their bytes per epoch, per rank and in total.

A plan is plain data built before any communication. The model is built as ``train-gcn`` builds
it (:func:`graphdist.gnn.pyg.models.build_model`, seeded with ``--seed``, graphdist's dropout
when its ``forward`` takes ``drop``) and run here, in one process, on a small ring graph with the
plan's feature and class counts: one training step (forward, backward) and one evaluation
forward (``model.eval()``, no gradient), as the trainer's epoch runs them. A probe (an identity
in autograd) sits wherever :func:`graphdist.gnn.pyg.distribute` exchanges the halo at k >= 2:

* a ``full`` / ``bipartite`` layer: its input ``x`` (plain), or the rows its ``propagate``
  aggregates when the layer runs ``mvc`` (a fixed linear map, no edge weights given): once a call;
* a ``hops`` layer (APPNP, TAGConv, SGConv, ChebConv, ARMAConv, MixHopConv, ...): every node
  argument each ``propagate`` reads at the source (plain), or the rows of each ``propagate``
  (``mvc``): once per propagation, as many as the layer really performs.

A probe records the width of the rows (values per node) and, when the backward pass reaches it,
that the rows' gradients go home as well. The bytes of one exchange are the message rows of the
part's plan in that halo mode (a rank sends ``send`` rows forward; backward, each rank sends the
gradients of the ``recv`` rows it got) times ``graphdist.exchange.quant.row_bytes(width, bits)``:
``--halo-bits`` in training, ``--eval-halo-bits`` in evaluation, as the exchangers count them.

Not modelled: a PyG model's memory (its activations depend on each layer's internals) and its
epoch time; the plan says so in one line (:data:`NOT_MODELLED`) and gives no figure for them.
"""
from __future__ import annotations

import contextlib
import inspect

import torch

from graphdist.errors import ConfigError

__all__ = ["NOT_MODELLED", "exchange_events", "plan_pyg", "layer_table"]

NOT_MODELLED = ("memory and epoch time are not modelled for a PyG model (its activations and compute "
                "depend on each layer's internals): measure them with train-gcn")
"""What ``plan`` does not predict for a PyG ``--model`` (printed, and ``plan/not_modelled`` in JSON)."""
PROBE_NODES = 12
"""Nodes of the graph the model is probed on (a ring, both directions, and chords)."""


class _Probe(torch.autograd.Function):
    """Identity; records that the backward pass reached the exchange ``event``."""

    @staticmethod
    def forward(ctx, h, event):
        ctx.event = event
        return h.clone()

    @staticmethod
    def backward(ctx, g):
        ctx.event["backward"] = True
        return g, None


def _probe_graph(n: int = PROBE_NODES) -> torch.Tensor:
    i = torch.arange(n)
    src = torch.cat([i, (i + 1) % n, i, (i + 5) % n])
    dst = torch.cat([(i + 1) % n, i, (i + 5) % n, i])
    return torch.stack([src, dst])


def _rows(v, nd: int) -> bool:
    """``v`` holds one row per node of the probe graph along ``nd`` (as ``propagating`` checks)."""
    return torch.is_tensor(v) and v.dim() > (nd if nd >= 0 else -nd - 1) and v.size(nd) == PROBE_NODES


class _Recorder:
    """Probes on every wrapped layer of one model; ``events`` in the order of the exchanges."""

    def __init__(self, convs, halo: str):
        self.events: list[dict] = []
        self.phase = "train"
        self.convs = [(name, conv, rule, rule.linear(conv) if halo == "mvc" and rule.linear is not None else None)
                      for name, conv, rule in convs]

    def probe(self, v, name, conv, mode: str, call: str, nd: int = 0):
        width = v.numel() // max(1, v.size(nd))
        ev = {"layer": name, "class": type(conv).__name__, "call": call, "halo": mode, "width": int(width),
              "phase": self.phase, "backward": False}
        self.events.append(ev)
        if not (torch.is_grad_enabled() and v.requires_grad):
            return v
        return _Probe.apply(v, ev)

    @contextlib.contextmanager
    def installed(self):
        from graphdist.gnn.pyg.hops import count_propagates
        handles, saved = [], []
        for name, conv, rule, kind in self.convs:
            sig = inspect.signature(type(conv).forward)
            sig = sig.replace(parameters=list(sig.parameters.values())[1:])
            state = {"mode": "plain"}

            def forward(*args, _conv=conv, _sig=sig, _rule=rule, _kind=kind, _name=name, _state=state,
                        _base=conv.forward, **kwargs):
                b = _sig.bind(*args, **kwargs)
                edges = any(b.arguments.get(n) is not None for n in _rule.edge_args)
                _state["mode"] = "mvc" if _kind and not edges else "plain"
                where = f"layer {_name or '<model>'} ({type(_conv).__name__})"
                if _rule.call != "hops" and _state["mode"] == "plain" and torch.is_tensor(b.arguments.get("x")):
                    b.arguments["x"] = self.probe(b.arguments["x"], _name, _conv, "plain", _rule.call)
                guard = count_propagates(_conv, where, type(_conv).__name__) if _rule.call != "hops" \
                    else contextlib.nullcontext()
                with guard:
                    return _base(*b.args, **b.kwargs)

            def pre(module, inputs, _conv=conv, _rule=rule, _name=name, _state=state):
                edge_index, size, kwargs = inputs
                if _rule.call != "hops" and _state["mode"] == "plain":
                    return None  # exchanged once, at the layer's input
                kwargs = dict(kwargs)
                if _state["mode"] == "mvc":  # A @ [h ; halo(h)]: the rows propagate aggregates
                    names = ["x"]
                else:  # hops, plain: every node argument read at the source
                    from graphdist.gnn.pyg.hops import source_args
                    names = sorted(source_args(_conv))
                nd = _conv.node_dim
                for arg in names:
                    v = kwargs.get(arg)
                    if _rows(v, nd):
                        kwargs[arg] = self.probe(v, _name, _conv, _state["mode"], _rule.call, nd)
                    elif isinstance(v, (tuple, list)) and len(v) == 2 and _rows(v[0], nd):
                        kwargs[arg] = (self.probe(v[0], _name, _conv, _state["mode"], _rule.call, nd), v[1])
                return edge_index, size, kwargs

            def edge_pre(module, inputs, _conv=conv, _rule=rule, _state=state, _pre=pre):
                if _rule.call == "hops" and _state["mode"] == "plain":
                    return _pre(module, inputs)
                return None

            conv.forward = forward  # the instance's, in front of the class's
            saved.append(conv)
            handles += [conv.register_propagate_forward_pre_hook(pre),
                        conv.register_edge_update_forward_pre_hook(edge_pre)]
        try:
            yield self
        finally:
            for h in handles:
                h.remove()
            for conv in saved:
                conv.__dict__.pop("forward", None)


def exchange_events(cfg, f_in: int, n_classes: int) -> tuple[list[dict], int]:
    """``(events, parameters)``: the halo exchanges of one epoch of ``cfg.model`` in the order the
    trainer's epoch makes them (training forward, then evaluation forward), each ``{"layer",
    "class", "call", "halo", "width", "phase": "train"|"eval", "backward"}``, and the model's
    number of parameters. Refuses (one line) what ``train-gcn`` refuses: a layer that is not
    local, a model without a message-passing layer, logits of the wrong shape."""
    import torch.nn.functional as F

    from graphdist.gnn.pyg.models import KeyedDropout, build_model, takes_drop
    from graphdist.gnn.pyg.wrap import scan_layers
    with torch.random.fork_rng():
        torch.manual_seed(cfg.seed)
        model = build_model(cfg.model, f_in, cfg.hidden, n_classes, cfg.layers, cfg.dropout)
        convs, _ = scan_layers(model)
        if not convs:
            raise ConfigError(f"--model {cfg.model}: the model has no message-passing layer (a PyG "
                              "MessagePassing module), so it never reads a neighbour")
        n = PROBE_NODES
        x = torch.rand(n, f_in)
        ei = _probe_graph(n)
        drop = KeyedDropout(torch.arange(n), cfg.seed) if takes_drop(model) else None
        call = (lambda: model(x, ei, drop=drop)) if drop is not None else (lambda: model(x, ei))
        rec = _Recorder(convs, cfg.halo)
        with rec.installed():
            model.train()
            out = call()
            if not torch.is_tensor(out) or tuple(out.shape) != (n, n_classes):
                got = tuple(out.shape) if torch.is_tensor(out) else type(out).__name__
                raise ConfigError(f"--model {cfg.model}: forward(x, edge_index) must return logits [{n}, {n_classes}] "
                                  f"(one row per node, one column per class), got {got}")
            F.cross_entropy(out, torch.arange(n) % n_classes).backward()
            rec.phase = "eval"
            model.eval()
            with torch.no_grad():
                call()
    return rec.events, sum(p.numel() for p in model.parameters() if p.requires_grad)


def layer_table(events: list[dict]) -> list[dict]:
    """Per wrapped layer, in the order of its first exchange: ``{"layer", "class", "call", "halo",
    "exchanges", "widths", "backward"}`` of the training forward (``exchanges``: per forward,
    as ``halo/layers`` of a train-gcn report counts them; ``backward``: how many send gradients)."""
    out: dict[str, dict] = {}
    for ev in events:
        if ev["phase"] != "train":
            continue
        row = out.setdefault(ev["layer"], {"layer": ev["layer"], "class": ev["class"], "call": ev["call"],
                                           "halo": ev["halo"], "exchanges": 0, "widths": [], "backward": 0})
        row["exchanges"] += 1
        row["widths"].append(ev["width"])
        row["backward"] += int(ev["backward"])
    return list(out.values())


def _bytes(events: list[dict], cfg, rows) -> int:
    """Bytes of ``events`` over one epoch; ``rows(mode)``: ``(forward rows, backward rows)``."""
    from graphdist.exchange.quant import row_bytes
    total = 0
    for ev in events:
        fwd, bwd = rows(ev["halo"])
        if ev["phase"] == "train":
            total += fwd * row_bytes(ev["width"], cfg.halo_bits)
            if ev["backward"]:
                total += bwd * row_bytes(ev["width"], cfg.halo_bits)
        else:
            total += fwd * row_bytes(ev["width"], cfg.eval_halo_bits)
    return total


def plan_pyg(cfg, parts: list, f_in: int, n_classes: int, k: int, source: str) -> dict:
    """The plan of a PyG ``--model``: ``comm/*`` keys as a train-gcn report's, per rank sizes and
    halo bytes sent and received per epoch, the exchanges per layer (``halo/layers``,
    ``comm/halo_exchanges_per_forward``); memory, time and ``fits`` None (:data:`NOT_MODELLED`).
    Under ``--halo auto`` (k >= 2) the mode is train-gcn's choice at start-up: the bytes of both
    modes are given (``comm/halo_bytes_per_epoch_by_mode``), the chosen mode's None."""
    import dataclasses
    for flag, on in (("--hosts", cfg.hosts), ("--intra-gbps", cfg.intra_gbps), ("--compute-s", cfg.compute_s),
                     ("--spmm-rate", cfg.spmm_rate), ("--mem-per-rank", cfg.mem_per_rank),
                     ("--halo-staleness", cfg.halo_staleness), ("--boundary-rate", cfg.boundary_rate < 1.0)):
        if on:
            raise ConfigError(f"{flag} applies to --model gcn|sage only: for --model {cfg.model} plan counts the "
                              "halo exchanges and bytes; " + NOT_MODELLED)
    active = k > 1
    modes = [m for m in ("plain", "mvc") if all(m in p.send for p in parts)]
    per_mode, params = {}, 0
    for m in modes:  # a layer's mode follows from the run's --halo (mvc: where its hop is a fixed linear map)
        per_mode[m], params = exchange_events(dataclasses.replace(cfg, halo=m), f_in, n_classes)
    chosen = cfg.halo if cfg.halo in per_mode else "plain" if not active else None
    events = per_mode[chosen or "plain"]

    def rows(p, back: bool):  # (forward rows, backward rows) a rank sends (or, back: receives) per mode
        return lambda mode: (p.recv.get(mode, 0), p.send.get(mode, 0)) if back else \
            (p.send.get(mode, 0), p.recv.get(mode, 0))

    by_mode = {m: sum(_bytes(evs, cfg, rows(p, False)) for p in parts) if active else 0 for m, evs in per_mode.items()}
    ranks = []
    for p in parts:
        known = active and chosen is not None
        ranks.append({"owned_rows": p.n, "halo_rows": p.halo,
                      "message_rows_in": p.recv.get(chosen or "plain", 0) if active else 0,
                      "features_bytes": p.n * f_in * 4, "optimizer_bytes": params * 4 * 4,
                      "halo_bytes_sent_per_epoch": _bytes(events, cfg, rows(p, False)) if known else 0 if not active else None,
                      "halo_bytes_received_per_epoch": _bytes(events, cfg, rows(p, True)) if known else 0 if not active else None})
    table = layer_table(events)
    if not active:  # one rank: nothing to exchange (halo/layers of a k = 1 run counts 0)
        for row in table:
            row["exchanges"], row["backward"] = 0, 0
    note = NOT_MODELLED
    if chosen is None:
        note += ("; --halo auto: train-gcn picks plain or mvc at start-up (graphdist's gcn estimate over the "
                 "measured link), so the bytes of both are given")
    return {"comm/halo_bytes_per_epoch": by_mode.get(chosen) if chosen else None,
            "comm/halo_bytes_per_epoch_by_mode": by_mode, "comm/halo": chosen or cfg.halo,
            "comm/halo_bits": cfg.halo_bits, "comm/eval_halo_bits": cfg.eval_halo_bits,
            "comm/halo_exchanges_per_forward": sum(r["exchanges"] for r in table),
            "halo/layers": table, "model/parameters": int(params),
            "mem/peak_bytes": None, "mem/peak_bytes_per_rank": None, "time/epoch_s": None, "fits": None,
            "plan/not_modelled": note, "world_size": k, "source": source, "features": f_in, "classes": n_classes,
            "ranks": ranks}
