"""The halo exchange under ``torch.jit.trace`` (what ``SummaryWriter.add_graph`` runs).

The tracer records every tensor operation the model runs; the exchange's collective takes a
``ProcessGroup`` object, which the tracer refuses (``Tried to trace <...ProcessGroup...>``). While
tracing, graphdist runs each exchange as one opaque operator instead, ``graphdist::halo_exchange
(Tensor rows, int which) -> Tensor``: the trace records that node (TensorBoard draws it), and
the operator's body, the exchange itself, runs below the tracer, so its collectives are not
traced. ``which`` names the exchange (an exchanger and what is done with it) in this process,
so the traced graph runs again here (``torch.jit.trace`` runs it once to check it) on every rank
at once, as the model does; it is not a graph to save and load elsewhere. The exchange has no
gradient in a trace (tracing is for the picture: training runs the model, not the trace).

Collectives that compute constants of the part (the whole graph's out-degrees, ChebConv's
``lambda_max``) run with the tracer paused (:func:`graphdist.torch_internals.untraced`): the trace holds their values.
"""
from __future__ import annotations

from typing import Callable, Hashable

import torch

from graphdist.torch_internals import untraced

_FNS: list[Callable[[torch.Tensor], torch.Tensor]] = []
_KEYS: dict[Hashable, int] = {}


@torch.library.custom_op("graphdist::halo_exchange", mutates_args=())
def _halo_exchange(rows: torch.Tensor, which: int) -> torch.Tensor:
    with torch.no_grad(), untraced():
        out = _FNS[which](rows)
    return out.clone() if out.data_ptr() == rows.data_ptr() else out


def exchange_op(fn: Callable[[torch.Tensor], torch.Tensor], rows: torch.Tensor, key: Hashable) -> torch.Tensor:
    """``fn(rows)`` as one ``graphdist::halo_exchange`` node of the trace; ``key`` names ``fn``
    (the same key, the same node, so that the two traces ``torch.jit.trace`` compares agree).
    ``fn``'s objects stay alive with the registry (one entry per exchanger and use)."""
    if key not in _KEYS:
        _KEYS[key] = len(_FNS)
        _FNS.append(fn)
    return _halo_exchange(rows, _KEYS[key])
