"""The PyG models ``train-gcn --model`` builds, and how it builds a user's ``MODULE:CLASS``.

Every model here is written for one device against the same protocol a user's class follows::

    model = cls(in_channels, hidden, out_channels, num_layers, dropout)
    logits = model(x, edge_index)                  # x [n, in_channels] -> [n, out_channels]
    logits = model(x, edge_index, drop=drop)       # if forward takes `drop`: graphdist's dropout

``drop(h, p, layer, training)`` is :class:`KeyedDropout`: a mask drawn from (seed, epoch, layer,
global node id), so k ranks draw exactly the masks of one process. Without ``drop`` a model's
own ``F.dropout`` draws from torch's generator, which graphdist seeds per (seed, epoch, rank):
runs and resumed runs repeat, but k ranks differ from one process. The built-in models:

    gat          GATConv, 8 heads of `hidden` channels (concatenated) per hidden layer, ELU
    gatv2        the same with GATv2Conv
    transformer  the same with TransformerConv
    gin          GINConv (sum) with an MLP (Linear, ReLU, Linear; `hidden` wide) per layer, ReLU
    sage-max     SAGEConv(aggr="max"), ReLU
    gcn2         GCNII: Linear, `num_layers` GCN2Conv (alpha 0.1, theta 0.5), Linear; ReLU;
                 --weight-decay on the GCN2Conv layers (not on the first layer, as elsewhere)

Dropout (``drop``) comes before every layer, the input included (as graphdist's GCN). The
attention layers run with their own attention dropout off: it would draw from the rank's
generator, and a layer's internals are not graphdist's to key.

Two multi-hop models for ``--model MODULE:CLASS`` (and ``graphdist plan``'s guide):
``graphdist.gnn.pyg.models:APPNPNet`` (PyG's citation APPNP) and ``...:TAGNet`` (TAGConv, K = 3).
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

from graphdist.errors import ConfigError
from graphdist.gnn.models import Reused, keyed_dropout
from graphdist.keyed import key32

__all__ = ["KeyedDropout", "BUILTIN", "model_class", "build_model", "takes_drop", "HEADS", "SIGNATURE", "APPNPNet",
           "TAGNet"]

HEADS = 8
"""Attention heads of the hidden layers of gat, gatv2 and transformer (the output layer has one)."""

SIGNATURE = "cls(in_channels, hidden, out_channels, num_layers, dropout)"


class KeyedDropout:
    """``drop(h, p, layer, training=True)``: dropout with a mask that is a function of
    ``(seed, step, layer, global node id of the row, column)`` (:func:`graphdist.gnn.models.keyed_dropout`),
    so a node's row is dropped alike on whichever rank owns it. ``node_ids``: the global id of
    each row of ``h``; ``step``: set by the trainer each epoch."""

    def __init__(self, node_ids: torch.Tensor, seed: int = 0, step: int = 0):
        self.node_ids, self.seed, self.step = node_ids, int(seed), int(step)
        self._kept: dict[int, Reused] = {}
        """layer -> its dropped-out input of the last pass, when that input needed no gradient
        (the features): written over by the next pass once nobody holds it (:class:`Reused`)"""

    def __call__(self, h: torch.Tensor, p: float, layer: int, training: bool = True) -> torch.Tensor:
        if not training or p <= 0:
            return h
        if h.shape[0] != self.node_ids.shape[0]:
            raise ConfigError(f"drop(h, ...) takes one row per owned node ({self.node_ids.shape[0]}), "
                              f"got {h.shape[0]} rows")
        key = key32(self.seed, self.step, layer)
        if h.requires_grad or not torch.is_grad_enabled():
            return keyed_dropout(h, p, self.node_ids, key)
        kept = self._kept.setdefault(layer, Reused())
        return kept.give(keyed_dropout(h, p, self.node_ids, key, out=kept.buffer(h.shape, h.dtype, h.device)))


def _torch_dropout(h, p, layer, training=True):
    return F.dropout(h, p, training)


def _dims(f_in, hidden, f_out, layers, width):
    """``[(in, out)]`` of ``layers`` layers; hidden layers output ``hidden`` (``width`` wide)."""
    ins = [f_in] + [width] * (layers - 1)
    outs = [hidden] * (layers - 1) + [f_out]
    return list(zip(ins, outs))


class _Stack(nn.Module):
    """``L`` message-passing layers, dropout before each, an activation between them."""

    act = staticmethod(F.relu)

    def __init__(self, in_channels, hidden, out_channels, num_layers, dropout):
        super().__init__()
        self.dropout, self.hidden = dropout, hidden
        self.convs = nn.ModuleList(self.layer(a, b, i == num_layers - 1)
                                   for i, (a, b) in enumerate(_dims(in_channels, hidden, out_channels, num_layers,
                                                                    hidden * self.width)))

    width = 1

    def layer(self, f_in, f_out, last):
        raise NotImplementedError

    def forward(self, x, edge_index, drop=None):
        drop = drop or _torch_dropout
        h = x
        for i, conv in enumerate(self.convs):
            if i:
                h = self.act(h)
            h = conv(drop(h, self.dropout, i, self.training), edge_index)
        return h

    def param_groups(self, weight_decay: float, first_layer_only: bool = True) -> list[dict]:
        """Adam groups: weight decay on the first layer only (Kipf) or on all parameters."""
        first = list(self.first_layer().parameters())
        if not first_layer_only:
            return [{"params": list(self.parameters()), "weight_decay": weight_decay}]
        ids = {id(p) for p in first}
        rest = [p for p in self.parameters() if id(p) not in ids]
        return [{"params": first, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]

    def first_layer(self) -> nn.Module:
        return self.convs[0]


class GAT(_Stack):
    width = HEADS
    act = staticmethod(F.elu)

    def layer(self, f_in, f_out, last):
        from torch_geometric.nn import GATConv
        return GATConv(f_in, f_out, heads=1, concat=False) if last else GATConv(f_in, f_out, heads=HEADS)


class GATv2(GAT):
    def layer(self, f_in, f_out, last):
        from torch_geometric.nn import GATv2Conv
        return GATv2Conv(f_in, f_out, heads=1, concat=False) if last else GATv2Conv(f_in, f_out, heads=HEADS)


class Transformer(GAT):
    def layer(self, f_in, f_out, last):
        from torch_geometric.nn import TransformerConv
        return (TransformerConv(f_in, f_out, heads=1, concat=False) if last
                else TransformerConv(f_in, f_out, heads=HEADS))


class GIN(_Stack):
    def layer(self, f_in, f_out, last):
        from torch_geometric.nn import GINConv
        h = self.hidden  # the MLP's hidden width
        return GINConv(nn.Sequential(nn.Linear(f_in, h), nn.ReLU(), nn.Linear(h, f_out)))


class SAGEMax(_Stack):
    def layer(self, f_in, f_out, last):
        from torch_geometric.nn import SAGEConv
        return SAGEConv(f_in, f_out, aggr="max")


class GCNII(nn.Module):
    """Chen et al. 2020: ``x0 = relu(lin0(x))``; ``num_layers`` times ``relu(GCN2Conv(h, x0))``;
    ``lin1``. Dropout before each of the ``num_layers + 2`` layers."""

    def __init__(self, in_channels, hidden, out_channels, num_layers, dropout, alpha=0.1, theta=0.5):
        super().__init__()
        from torch_geometric.nn import GCN2Conv
        self.dropout = dropout
        self.lins = nn.ModuleList([nn.Linear(in_channels, hidden), nn.Linear(hidden, out_channels)])
        self.convs = nn.ModuleList(GCN2Conv(hidden, alpha, theta, i + 1) for i in range(num_layers))

    def forward(self, x, edge_index, drop=None):
        drop = drop or _torch_dropout
        h = x0 = F.relu(self.lins[0](drop(x, self.dropout, 0, self.training)))
        for i, conv in enumerate(self.convs):
            h = F.relu(conv(drop(h, self.dropout, i + 1, self.training), x0, edge_index))
        return self.lins[1](drop(h, self.dropout, len(self.convs) + 1, self.training))

    def param_groups(self, weight_decay: float, first_layer_only: bool = True) -> list[dict]:
        """Adam groups: weight decay on the GCN2Conv layers only (GCNII's strong decay sits on the
        convolutions; PyG's example: 0.01 there, 5e-4 on the linears), or on all parameters."""
        if not first_layer_only:
            return [{"params": list(self.parameters()), "weight_decay": weight_decay}]
        return [{"params": list(self.convs.parameters()), "weight_decay": weight_decay},
                {"params": list(self.lins.parameters()), "weight_decay": 0.0}]


class APPNPNet(nn.Module):
    """PyG's citation benchmark APPNP as a ``MODULE:CLASS`` model
    (``--model graphdist.gnn.pyg.models:APPNPNet``): ``num_layers`` Linear layers (``hidden``
    wide, ReLU between), then ``APPNP(K=10, alpha=0.1)``, which propagates the logits 10 times
    (10 halo exchanges per forward at k >= 2). Dropout before every Linear."""

    K = 10

    def __init__(self, in_channels, hidden, out_channels, num_layers, dropout):
        super().__init__()
        from torch_geometric.nn import APPNP
        self.dropout = dropout
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in _dims(in_channels, hidden, out_channels, num_layers, hidden))
        self.prop = APPNP(K=self.K, alpha=0.1)

    def forward(self, x, edge_index, drop=None):
        drop = drop or _torch_dropout
        h = x
        for i, lin in enumerate(self.lins):
            h = lin(drop(F.relu(h) if i else h, self.dropout, i, self.training))
        return self.prop(h, edge_index)


class TAGNet(_Stack):
    """PyG's TAGCN example as a ``MODULE:CLASS`` model (``--model graphdist.gnn.pyg.models:TAGNet``):
    ``num_layers`` ``TAGConv(K=3)`` layers, ReLU between, each propagating its input 3 times (3
    halo exchanges per layer and forward at k >= 2)."""

    def layer(self, f_in, f_out, last):
        from torch_geometric.nn import TAGConv
        return TAGConv(f_in, f_out, K=3)


BUILTIN: dict[str, type] = {"gat": GAT, "gatv2": GATv2, "gin": GIN, "gcn2": GCNII, "sage-max": SAGEMax,
                            "transformer": Transformer}
"""``--model`` names of the built-in PyG models (graphdist's own gcn and sage are not here)."""


def model_class(spec: str) -> type:
    """The class of ``--model spec``: a built-in name or ``MODULE:CLASS`` (imported from
    ``PYTHONPATH`` or the working directory); one :class:`~graphdist.errors.ConfigError` line
    otherwise."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    mod, sep, name = spec.partition(":")
    if not sep or not mod or not name:
        raise ConfigError(f"--model {spec!r}: choose gcn, sage, {', '.join(BUILTIN)} or give MODULE:CLASS "
                          f"(a torch.nn.Module class built as {SIGNATURE})")
    if os.getcwd() not in sys.path and "" not in sys.path:  # as `python -m` does: MODULE may be a file here
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001 - the user's module: whatever stops its import is the answer
        first = (str(e).strip().splitlines() or [""])[0]
        raise ConfigError(f"--model {spec}: cannot import module {mod!r} ({type(e).__name__}: {first})") from None
    cls = getattr(module, name, None)
    if cls is None:
        raise ConfigError(f"--model {spec}: module {mod!r} has no attribute {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"--model {spec}: {name} is not a torch.nn.Module class")
    return cls


def build_model(spec: str, in_channels: int, hidden: int, out_channels: int, num_layers: int,
                dropout: float) -> nn.Module:
    """``cls(in_channels, hidden, out_channels, num_layers, dropout)`` for ``--model spec``."""
    cls = model_class(spec)
    try:
        inspect.signature(cls).bind(in_channels, hidden, out_channels, num_layers, dropout)
    except TypeError as e:
        raise ConfigError(f"--model {spec}: {cls.__name__} must be built as {SIGNATURE} ({e})") from None
    return cls(in_channels, hidden, out_channels, num_layers, dropout)


def takes_drop(model: nn.Module) -> bool:
    """``model.forward`` accepts ``drop=`` (graphdist's keyed dropout)."""
    params = inspect.signature(model.forward).parameters
    return "drop" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
