"""Which PyG layers run exact on a rank's part, and how each one is called.

A rank holds every in-edge of every node it owns, and the rows of those edges' sources (its
halo). So a layer is exact on ``[owned | halo]`` rows when its output at node ``v`` is a
function of ``v``'s row and its in-neighbours' rows (and the edges' attributes): one hop, over
in-edges, with an aggregation that does not depend on the order of the neighbours. Each layer
graphdist knows is listed in :data:`RULES` with how to call it (:class:`LayerRule`); a layer
that reads further (``K`` hops in one call, global attention) is refused with one line naming
it, and so is every ``MessagePassing`` class not listed (:func:`register_local` lists a user's
own layer) and every layer that carries a loss of its own (:func:`own_loss`: on a part that loss
would be each rank's, summed k times).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn
from torch_geometric.nn import aggr as pyg_aggr
from torch_geometric.nn import conv as pyg_conv
from torch_geometric.nn.conv import MessagePassing

from graphdist.errors import ConfigError

__all__ = ["LayerRule", "RULES", "register_local", "rule_for", "check_module", "own_loss", "CALLS"]

CALLS = ("full", "bipartite", "hops")


@dataclass(frozen=True)
class LayerRule:
    """How graphdist calls one kind of message-passing layer on a rank's rows."""

    call: str = "full"
    """``full``: the layer gets ``x = [owned ; halo]`` rows and its output is cut to the owned
    rows; ``bipartite``: it gets ``x = ([owned ; halo], owned)`` and returns owned rows only (for
    layers that apply a module to their output rows, such as GIN's MLP, so that a batch norm in
    it sees the owned rows only). Both are exact: owned columns come first, and both see the
    halo rows once (a second ``propagate`` in one call is stopped). ``hops``: the layer runs on
    the owned rows and the halo rows are exchanged before each of its ``propagate`` calls (for
    layers that propagate several times: APPNP, TAGConv, ...; :mod:`graphdist.gnn.pyg.hops`)."""
    gcn_norm: Callable[[nn.Module], tuple[bool, bool] | None] | None = None
    """For layers that normalise with PyG's ``gcn_norm``: ``(improved, add_self_loops)`` of this
    layer, or None when it does not normalise. graphdist then passes weights computed from the
    global degrees (a halo column has none of its in-edges on this rank)."""
    node_args: tuple[str, ...] = ()
    """Other forward arguments holding one row per node that the layer reads at the node itself
    (GCN2Conv's ``x_0``): padded with zeros for the halo rows in a ``full`` call."""
    linear: Callable[[nn.Module], str | None] | None = None
    """The layer's aggregation as a fixed linear map for ``halo="mvc"``: ``gcn`` (``D^-1/2 (A+I)
    D^-1/2``), ``sage`` (mean over in-neighbours) or ``sum``; None: this configuration runs plain."""
    check: Callable[[nn.Module], str | None] | None = None
    """A reason this configuration of the layer is not local, or None."""
    edge_args: tuple[str, ...] = field(default=("edge_weight", "edge_attr"))
    """Forward arguments holding one value per edge (passed through; with one given, ``mvc`` runs
    the layer plain)."""
    prepare: Callable | None = None
    """``prepare(conv, arguments, part)`` before a call: sets whole-graph values the layer would
    compute from the part alone (ChebConv's ``lambda_max``); a collective."""


def _aggr_kind(conv) -> str | None:
    a = conv.aggr
    return {"add": "sum", "sum": "sum", "mean": "sage"}.get(a) if isinstance(a, str) else None


def _gcn_args(conv):
    return (bool(conv.improved), bool(conv.add_self_loops)) if conv.normalize else None


def _gcn_linear(conv) -> str | None:
    if conv.aggr != "add":
        return None
    if not conv.normalize:
        return "sum"
    return "gcn" if conv.add_self_loops and not conv.improved else None


def _gcn2_linear(conv) -> str | None:
    return "gcn" if conv.normalize and conv.add_self_loops and conv.aggr == "add" else None


def _cheb_lambda_max(conv, a, part) -> None:
    """ChebConv's default ``lambda_max`` (``2 max L``) over the whole graph's Laplacian."""
    if a.get("lambda_max") is not None or a.get("edge_weight") is not None:
        return
    from graphdist import comm
    from graphdist.gnn.pyg.hops import laplacian_edges
    x = a.get("x")
    dtype = x.dtype if torch.is_tensor(x) else torch.float32
    _, w = laplacian_edges(part, conv.normalization, dtype)
    from graphdist.torch_internals import untraced
    with untraced():  # a constant of the part (under torch.jit.trace: of the trace)
        m = torch.tensor([float(w.max()) if w.numel() else float("-inf")], dtype=torch.float64, device=part.device)
        a["lambda_max"] = 2.0 * float(comm.all_reduce_max(m)[0])


def _gcn_hop(conv):
    from graphdist.gnn.pyg.hops import gcn_hop
    return gcn_hop(conv)


def _sum_hop(conv):
    from graphdist.gnn.pyg.hops import sum_hop
    return sum_hop(conv)


_HOPS = LayerRule(call="hops")
_GCN_HOPS = LayerRule(call="hops", linear=_gcn_hop)
RULES: dict[type, LayerRule] = {
    pyg_conv.GCNConv: LayerRule(gcn_norm=_gcn_args, linear=_gcn_linear),
    pyg_conv.GCN2Conv: LayerRule(gcn_norm=lambda c: (False, bool(c.add_self_loops)) if c.normalize else None,
                                 node_args=("x_0",), linear=_gcn2_linear),
    pyg_conv.TAGConv: _HOPS,
    pyg_conv.APPNP: _GCN_HOPS,
    pyg_conv.SGConv: _GCN_HOPS,
    pyg_conv.SSGConv: _GCN_HOPS,
    pyg_conv.ChebConv: LayerRule(call="hops", prepare=_cheb_lambda_max),
    pyg_conv.ARMAConv: _HOPS,
    pyg_conv.MixHopConv: _GCN_HOPS,
    pyg_conv.GatedGraphConv: LayerRule(call="hops", linear=_sum_hop),
    pyg_conv.GATConv: LayerRule(),
    pyg_conv.GATv2Conv: LayerRule(),
    pyg_conv.TransformerConv: LayerRule(),
    pyg_conv.GINConv: LayerRule(call="bipartite", linear=_aggr_kind),
    pyg_conv.GINEConv: LayerRule(call="bipartite"),
    pyg_conv.SAGEConv: LayerRule(call="bipartite", linear=_aggr_kind),
    pyg_conv.GraphConv: LayerRule(call="bipartite", linear=_aggr_kind),
}
"""The layers graphdist runs exact (parity-tested against the whole-graph layer in
``tests/test_pyg_parity.py``, ``tests/test_pyg_hops.py``), with how each is called."""

_ORDER_FREE = (pyg_aggr.SumAggregation, pyg_aggr.MeanAggregation, pyg_aggr.MaxAggregation,
               pyg_aggr.MinAggregation, pyg_aggr.MulAggregation, pyg_aggr.VarAggregation,
               pyg_aggr.StdAggregation, pyg_aggr.SoftmaxAggregation, pyg_aggr.PowerMeanAggregation)
"""Aggregations that are functions of the set of in-neighbour messages (any edge order)."""

_NOT_LOCAL: dict[str, str] = {
    "GPSConv": "mixes every node with every other by global attention",
    "MultiheadAttention": "attends over all nodes, not only in-neighbours",
    "Transformer": "attends over all nodes, not only in-neighbours",
    "TransformerEncoderLayer": "attends over all nodes, not only in-neighbours",
    "GraphNorm": "normalises with statistics of the whole graph",
    "InstanceNorm": "normalises with statistics of the whole graph",
    "PairNorm": "normalises with statistics of the whole graph",
    "MeanSubtractionNorm": "subtracts the mean of the whole graph",
    "GraphSizeNorm": "normalises by the number of nodes of the whole graph",
    "HeteroConv": "works on heterogeneous graphs, which a part does not hold",
    "BatchNorm2d": "normalises with statistics over all nodes (only BatchNorm1d is made global)",
    "BatchNorm3d": "normalises with statistics over all nodes (only BatchNorm1d is made global)",
    "SyncBatchNorm": "normalises with statistics over all nodes (only BatchNorm1d is made global)",
    "InstanceNorm1d": "normalises with statistics over all nodes",
}
"""Modules refused, by their name in ``torch_geometric.nn`` or ``torch.nn``, with the reason."""


def _refused() -> dict[type, str]:
    import torch_geometric.nn as gnn
    out = {}
    for name, why in _NOT_LOCAL.items():
        for ns in (gnn, pyg_conv, torch.nn):
            cls = getattr(ns, name, None)
            if isinstance(cls, type):
                out[cls] = why
    return out


_REFUSED = _refused()


def register_local(cls: type, *, call: str | None = None, node_args: tuple[str, ...] = (),
                   gcn_norm: Callable | None = None, linear: Callable | None = None) -> None:
    """Declare a ``MessagePassing`` class local (its output at ``v`` depends only on ``v``'s row,
    its in-neighbours' rows and those edges' attributes, through ``propagate``), so
    :func:`distribute` wraps it. Every argument as in :class:`LayerRule`:

    * ``call``: ``"full"`` (default: the layer sees ``[owned ; halo]`` rows once; a second
      ``propagate`` in one call is stopped in one line), ``"bipartite"`` (``x = ([owned ; halo],
      owned)``, for a layer applying a module such as an MLP with batch norm to its output rows)
      or ``"hops"`` (owned rows; the halo is exchanged before each ``propagate``: layers that
      propagate several times). A class graphdist already lists keeps its rule unless ``call``
      (or another argument) is given.
    * ``node_args``: other forward arguments with one row per node read at the node itself
      (``full`` calls pad them with zeros for the halo rows).
    * ``gcn_norm``: ``conv -> (improved, add_self_loops)`` or None, for a layer with a
      ``normalize`` attribute and an ``edge_weight`` argument: graphdist passes the global-degree
      weights and switches ``normalize`` off for the call. Not needed for a layer that calls
      PyG's ``gcn_norm`` / ``get_laplacian`` itself: those calls get the whole graph's degrees.
    * ``linear``: ``conv -> "gcn" | "sage" | "sum" | None``, the aggregation as a fixed linear map
      for ``halo="mvc"``."""
    if not (isinstance(cls, type) and issubclass(cls, MessagePassing)):
        raise ConfigError(f"register_local: {cls!r} is not a MessagePassing class")
    loss = own_loss(cls)
    if loss is not None:
        raise ConfigError(f"register_local: {cls.__name__} is not local: {_loss_reason(cls.__name__, loss)}")
    if call is None and not node_args and gcn_norm is None and linear is None and cls in RULES:
        return  # already listed: its own rule
    call = "full" if call is None else call
    if call not in CALLS:
        raise ConfigError(f"register_local: call must be one of {', '.join(CALLS)}, got {call!r}")
    if gcn_norm is not None and "edge_weight" not in inspect.signature(cls.forward).parameters:
        raise ConfigError(f"register_local: {cls.__name__} with gcn_norm needs a forward(..., edge_weight) "
                          "argument (and a `normalize` attribute), as GCNConv has")
    RULES[cls] = LayerRule(call=call, node_args=tuple(node_args), gcn_norm=gcn_norm, linear=linear)


def rule_for(name: str, conv: MessagePassing) -> LayerRule:
    """The rule of ``conv`` (its exact class, not a parent's: a subclass may read further), or a
    :class:`~graphdist.errors.ConfigError` of one line naming the layer and why it is refused."""
    cls = type(conv)
    where = f"layer {name or '<model>'} ({cls.__name__})"
    rule = RULES.get(cls)
    if rule is None:
        if cls in _REFUSED:
            raise ConfigError(f"{where} is not local: it {_REFUSED[cls]}; a rank holds its nodes' 1-hop "
                              "in-neighbours only")
        if own_loss(cls) is not None:
            raise ConfigError(f"{where} is not local: {_loss_reason(cls.__name__, own_loss(cls))}")
        raise ConfigError(f"{where} is not in graphdist's list of local layers; if its output at a node "
                          "depends only on that node's row and its in-neighbours' rows, declare it with "
                          f"graphdist.gnn.pyg.register_local({cls.__name__})")
    if conv.flow != "source_to_target":
        raise ConfigError(f"{where} has flow={conv.flow!r}: it aggregates over out-neighbours, which a rank "
                          "does not hold (use flow='source_to_target' on a reversed graph)")
    agg = getattr(conv, "aggr_module", None)
    if agg is not None and not _order_free(agg):
        raise ConfigError(f"{where} aggregates with {type(agg).__name__}, which depends on the order of the "
                          "neighbours (it differs between a part and the whole graph); use an order-free "
                          "aggregation (sum, mean, max, min, softmax, ...)")
    why = rule.check(conv) if rule.check is not None else None
    if why:
        raise ConfigError(f"{where} is not local: {why}")
    if rule.gcn_norm is not None and not hasattr(conv, "normalize"):
        raise ConfigError(f"{where} is registered with gcn_norm but has no `normalize` attribute: graphdist passes "
                          "the whole graph's gcn_norm weights as its edge_weight and sets normalize=False for the "
                          "call, which this layer would not honour; give it a `normalize` attribute its forward "
                          "follows, as GCNConv's, or register it without gcn_norm (a layer that calls PyG's "
                          "gcn_norm itself needs none)")
    return rule


def own_loss(cls: type) -> str | None:
    """The method through which a layer hands a loss of its own to the training script
    (``SuperGATConv.get_attention_loss``), or None: any method of the class, below
    ``MessagePassing``, with ``loss`` in its name."""
    for k in cls.__mro__:
        if k in (MessagePassing, nn.Module, object):
            continue
        for name, v in vars(k).items():
            if callable(v) and "loss" in name.lower():
                return name
    return None


def _loss_reason(cls_name: str, method: str) -> str:
    return (f"it carries a loss of its own ({cls_name}.{method}()), which on a part would be each rank's mean over "
            "its own nodes and edges (negatives sampled among its owned and halo nodes), summed over the ranks "
            "by gd.sync_grads: k times its weight, and not the whole graph's loss; graphdist cannot make such a "
            "loss global, so the layer is refused")


def _order_free(agg) -> bool:
    if isinstance(agg, pyg_aggr.MultiAggregation):
        return all(_order_free(a) for a in agg.aggrs)
    return type(agg) in _ORDER_FREE


def check_module(name: str, module: nn.Module) -> None:
    """Refuse (one line) a module that is not a message-passing layer but mixes the rows of
    different nodes in a way a part cannot reproduce (global attention, graph-level norms)."""
    cls = type(module).__name__
    if type(module) in _REFUSED:
        raise ConfigError(f"layer {name or '<model>'} ({cls}) is not local: it {_REFUSED[type(module)]}")
    from torch_geometric.nn.norm import LayerNorm
    if isinstance(module, LayerNorm) and getattr(module, "mode", None) == "graph":
        raise ConfigError(f"layer {name} (LayerNorm mode='graph') is not local: it normalises with statistics "
                          "of the whole graph; use mode='node'")
    if isinstance(module, pyg_aggr.Aggregation):
        raise ConfigError(f"layer {name} ({cls}) aggregates over nodes outside a message-passing layer (a "
                          "readout over the whole graph), which a part cannot do alone")


def is_batch_norm(module: nn.Module) -> bool:
    """A ``torch.nn.BatchNorm1d`` (also inside PyG's ``BatchNorm`` and ``MLP``)."""
    return type(module) is torch.nn.BatchNorm1d
