"""What a distributed model reports: per-layer halo modes, traffic and rounding keys (the rows' rounding
error over all ranks is :func:`graphdist.exchange.quant.rel_error`).

    summary(model)      {layer name: {"layer", "halo", "bits", "call"}}
    halo_layers(model)  [{"layer", "class", "halo", "why"}]   (train-gcn's ``halo/layers``)
    traffic(model)      halo rows and bytes sent since the last reset
    set_step(model, s)  key the rounding noise of quantised rows by step s
"""
from __future__ import annotations

from torch import nn

from graphdist.gnn.pyg.wrap import DistConv

__all__ = ["summary", "halo_layers", "traffic", "set_step", "exchangers", "num_layers"]


def _states(model: nn.Module):
    return [(n, m._graphdist) for n, m in model.named_modules() if isinstance(m, DistConv)]


def summary(model: nn.Module) -> dict:
    """``{layer name: {"layer": class, "halo": "plain"|"mvc", "bits": b, "call": "full"|"bipartite"|"hops",
    "exchanges": n}}`` for every wrapped layer; ``halo`` is the mode of its last call (before any
    call: the mode chosen), ``exchanges`` the halo exchanges of its last forward call (one per
    ``propagate`` for a ``hops`` layer: APPNP(K=10) makes 10; 0 at k = 1 or before a call; the
    backward pass sends as many)."""
    return {n: {"layer": st.cls.__name__, "halo": st.used, "bits": st.ctx.bits, "call": st.rule.call,
                "exchanges": st.exchanges} for n, st in _states(model)}


def halo_layers(model: nn.Module) -> list[dict]:
    """``[{"layer": name, "class": class, "halo": "mvc"|"plain", "why": reason, "exchanges": n}]``
    per wrapped layer in order: the mode of its last call and why (under ``halo="mvc"`` a layer
    whose aggregation is not a fixed linear map runs plain), and the halo exchanges of its last
    forward call (as :func:`summary`; ``graphdist plan`` predicts them)."""
    return [{"layer": n, "class": st.cls.__name__, "halo": st.used,
             "why": "called with edge weights or attributes" if st.linear and st.used == "plain" else st.why,
             "exchanges": st.exchanges}
            for n, st in _states(model)]


def num_layers(model: nn.Module) -> int:
    """Wrapped message-passing layers of ``model``."""
    return len(_states(model))


def exchangers(model: nn.Module, training_only: bool = False) -> list:
    """The distinct halo exchangers of ``model``'s layers (training and evaluation sets)."""
    seen = {}
    for _, st in _states(model):
        for e in (st.ctx.training_exchangers() if training_only else st.ctx.exchangers()):
            seen[id(e)] = e
    return list(seen.values())


def traffic(model: nn.Module, reset: bool = False) -> dict:
    """Halo rows and bytes this rank has sent for ``model``'s layers (forward and backward,
    quantisation parameters included) since the last reset."""
    exs = exchangers(model)
    out = {"rows": sum(e.stats.rows for e in exs), "bytes": sum(e.stats.bytes for e in exs)}
    if reset:
        for e in exs:
            e.stats.reset()
    return out


def set_step(model: nn.Module, step: int) -> None:
    """Key the rounding noise of quantised rows by ``step`` from now on (runs repeat exactly)."""
    for e in exchangers(model):
        e.set_step(step)
