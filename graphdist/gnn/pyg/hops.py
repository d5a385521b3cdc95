"""Layers that propagate several times in one call, and layers that normalise inside ``forward``.

A rank holds every in-edge of its nodes, so one ``propagate`` over ``[owned ; halo]`` rows is
exact for the owned rows. A layer that propagates K times (APPNP, TAGConv, SGConv, SSGConv,
ChebConv, ARMAConv, MixHopConv, GatedGraphConv) is exact when the halo rows are exchanged again
before each of its propagations (``call="hops"``): the layer runs on the owned rows only, and a
propagate pre-hook replaces every node argument the message reads at the source (``x_j``) by the
pair ``([rows ; halo rows], rows)`` (:func:`propagating`). One exchange per propagate call, in
autograd (halo gradients go home).

Layers that call PyG's ``gcn_norm`` or ``get_laplacian`` in their ``forward`` would normalise with
the part's degrees: a halo column has none of its in-edges (and not all of its out-edges) on this
rank. While a wrapped layer runs, those names in its module are bound to the whole graph's
versions restricted to the owned destinations (:func:`global_norms`): ``gcn_norm`` from the
global in-degrees (``Part.gcn_edges``), ``get_laplacian`` from the global out-degrees
(:func:`laplacian_edges`, exchanged once and cached). Both refuse, in one line, edge weights and
edge sets other than ``part.edge_index``. A layer called ``full`` that propagates twice is
stopped in one line on its second call (its halo rows would be stale).
"""
from __future__ import annotations

import contextlib
import sys

import torch
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.conv.gcn_conv import gcn_norm as _pyg_gcn_norm
from torch_geometric.utils import get_laplacian as _pyg_get_laplacian

from graphdist.errors import ConfigError
from graphdist.gnn.pyg.rows import halo_rows
from graphdist.gnn.pyg.traced import untraced

__all__ = ["global_norms", "propagating", "aggregating", "gcn_hop", "sum_hop", "laplacian_edges", "out_degrees", "norm_sites",
           "count_propagates", "source_args"]

_NORMS = {_pyg_gcn_norm: "gcn_norm", _pyg_get_laplacian: "get_laplacian"}


def norm_sites(cls: type) -> list[tuple[dict, str, str]]:
    """``[(module globals, name, "gcn_norm"|"get_laplacian")]``: where ``cls`` (or a parent below
    ``MessagePassing``) finds PyG's normalisations by a module-level name."""
    out, seen = [], set()
    for k in cls.__mro__:
        if not (isinstance(k, type) and issubclass(k, MessagePassing)) or k is MessagePassing:
            continue
        mod = sys.modules.get(k.__module__)
        if mod is None or id(mod) in seen:
            continue
        seen.add(id(mod))
        g = vars(mod)
        for name, v in list(g.items()):
            kind = next((k for f, k in _NORMS.items() if v is f), None)
            if kind is not None:
                out.append((g, name, kind))
    return out


def same_edges(ei, part) -> bool:
    with untraced():  # a check, not a step of a trace
        return _same(ei, part.edge_index)


def _same(ei, pe) -> bool:
    return torch.is_tensor(ei) and (ei is pe or (ei.shape == pe.shape and ei.device == pe.device
                                                 and (ei.data_ptr() == pe.data_ptr() or torch.equal(ei, pe))))


def _check_edges(ei, w, part, where: str, fn: str) -> None:
    if not torch.is_tensor(ei) or ei.is_sparse or ei.layout != torch.strided:
        raise ConfigError(f"{where} calls {fn} on a sparse adjacency (T.ToSparseTensor, a torch sparse "
                          "tensor); a part takes part.edge_index [2, E]")
    if not same_edges(ei, part):
        raise ConfigError(f"{where} calls {fn} on other edges than part.edge_index (it normalises with the "
                          "whole graph's degrees, which graphdist knows for the part's own edges only)")
    if w is not None:
        raise ConfigError(f"{where} calls {fn} with edge weights: the weighted degrees of halo nodes are not "
                          "in a part yet; pass no edge weights (or normalise them yourself with normalize=False)")


def out_degrees(part) -> torch.Tensor:
    """``[n_own + n_halo]`` float64: every column's out-degree in the whole graph, self-loops
    not counted (``get_laplacian``'s degrees). A collective the first time (cached; under
    ``torch.jit.trace``, a constant of the trace); its exchanges are set-up, not an epoch's
    traffic, so the exchanger's counters do not keep them (``graphdist plan`` counts per epoch)."""
    cache = part.__dict__.setdefault("_gcn_cache", {})
    if "out_deg" not in cache:
        stats = part.exchanger.stats
        counted = stats.rows, stats.bytes
        with untraced(), torch.enable_grad():  # (the first call may be under torch.no_grad())
            src, dst = part.edge_index
            n_all = part.num_owned + part.num_halo
            counts = torch.bincount(src[src != dst], minlength=n_all).to(torch.float32)
            h = torch.zeros(part.num_owned, 1, device=part.device, requires_grad=True)
            (halo_rows(h, part.exchanger)[:, 0] * counts).sum().backward()  # halo counts go home, summed
            own = h.grad.detach()
            cache["out_deg"] = halo_rows(own, part.exchanger)[:, 0].to(torch.float64)
        stats.rows, stats.bytes = counted
    return cache["out_deg"]


def laplacian_edges(part, normalization: str | None = None, dtype=torch.float32):
    """``(edge_index, edge_weight)`` of PyG's ``get_laplacian`` over the whole graph, restricted
    to the owned destinations: ``L = D - A`` (``None``), ``I - D^-1/2 A D^-1/2`` (``sym``) or
    ``I - D^-1 A`` (``rw``), ``D`` the global out-degrees without self-loops."""
    if normalization not in (None, "sym", "rw"):
        raise ConfigError(f"get_laplacian: normalization must be None, 'sym' or 'rw', got {normalization!r}")
    key = ("laplacian", normalization, dtype)
    cache = part.__dict__.setdefault("_gcn_cache", {})
    if key not in cache:
        with untraced():  # a constant of the part (under torch.jit.trace: of the trace)
            cache[key] = _laplacian_edges(part, normalization, dtype)
    return cache[key]


def _laplacian_edges(part, normalization: str | None, dtype):
    deg = out_degrees(part)
    src, dst = part.edge_index
    keep = src != dst
    src, dst = src[keep], dst[keep]
    own = torch.arange(part.num_owned, device=part.device)
    if normalization is None:
        w, loop = -torch.ones(src.numel(), dtype=torch.float64, device=part.device), deg[:part.num_owned]
    else:
        inv = deg.pow(-0.5) if normalization == "sym" else 1.0 / deg
        inv[torch.isinf(inv)] = 0.0
        w = -(inv[src] * inv[dst]) if normalization == "sym" else -inv[src]
        loop = torch.ones(part.num_owned, dtype=torch.float64, device=part.device)
    return torch.stack([torch.cat([src, own]), torch.cat([dst, own])]), torch.cat([w, loop]).to(dtype)


@contextlib.contextmanager
def global_norms(sites, part, where: str):
    """While a wrapped layer runs: its ``gcn_norm`` / ``get_laplacian`` are the whole graph's."""
    if not sites:
        yield
        return

    def gcn_norm(edge_index, edge_weight=None, num_nodes=None, improved=False, add_self_loops=True,
                 flow="source_to_target", dtype=None):
        _check_edges(edge_index, edge_weight, part, where, "gcn_norm")
        return part.gcn_edges(bool(improved), bool(add_self_loops), dtype=dtype or torch.float32)

    def get_laplacian(edge_index, edge_weight=None, normalization=None, dtype=None, num_nodes=None):
        _check_edges(edge_index, edge_weight, part, where, "get_laplacian")
        return laplacian_edges(part, normalization, dtype or torch.float32)

    ours = {"gcn_norm": gcn_norm, "get_laplacian": get_laplacian}
    saved = [(g, name, g[name]) for g, name, _ in sites]
    for g, name, kind in sites:
        g[name] = ours[kind]
    try:
        yield
    finally:
        for g, name, v in saved:
            g[name] = v


def source_args(conv) -> set[str]:
    """Node arguments the layer's message or edge update reads at the source (``<name>_j``)."""
    names = list(conv._user_args) + list(getattr(conv, "_edge_user_args", []))
    return {n[:-2] for n in names if n.endswith("_j")}


def _with_halo(v, nd: int, ex):
    if nd % v.dim() == 0:
        return halo_rows(v, ex)
    return halo_rows(v.movedim(nd, 0), ex).movedim(0, nd)


@contextlib.contextmanager
def propagating(conv, part, ex, counter=None):
    """``call="hops"``: before each ``propagate`` / ``edge_updater`` call of ``conv``, every node
    argument read at the source (owned rows) becomes ``([rows ; halo rows], rows)``; each such
    exchange adds 1 to ``counter.exchanges``."""
    names, nd, n_own = source_args(conv), conv.node_dim, part.num_owned

    def count():
        if counter is not None and part.world_size > 1:
            counter.exchanges += 1

    def owned(v) -> bool:
        with untraced():  # a check, not a step of a trace
            return torch.is_tensor(v) and v.size(nd) == n_own

    def pre(module, inputs):
        edge_index, size, kwargs = inputs
        kwargs = dict(kwargs)
        for name in names:
            v = kwargs.get(name)
            if owned(v):
                kwargs[name] = (_with_halo(v, nd, ex), v)
                count()
            elif isinstance(v, (tuple, list)) and len(v) == 2 and owned(v[0]):
                kwargs[name] = (_with_halo(v[0], nd, ex), v[1])
                count()
        if size is not None and size[0] == n_own:
            size = (n_own + part.num_halo, size[1])
        return edge_index, size, kwargs

    handles = [conv.register_propagate_forward_pre_hook(pre), conv.register_edge_update_forward_pre_hook(pre)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def count_propagates(conv, where: str, cls_name: str):
    """``call="full"`` / ``"bipartite"``: the halo rows are exchanged once, before the layer; a
    second ``propagate`` in the same call would read stale halo rows, so it is stopped."""
    calls = [0]

    def pre(module, inputs):
        calls[0] += 1
        if calls[0] > 1:
            raise ConfigError(f"{where} propagates more than once in one call, which a layer that sees the halo "
                              f"rows once cannot do exactly; register it with graphdist.gnn.pyg.register_local("
                              f"{cls_name}, call='hops') (the halo is then exchanged before each propagate)")
        return None

    h = conv.register_propagate_forward_pre_hook(pre)
    try:
        yield
    finally:
        h.remove()


@contextlib.contextmanager
def aggregating(conv, aggregate, counter=None, world_size: int = 1):
    """``call="hops"`` under ``halo="mvc"``, for a layer whose every hop is a fixed linear map:
    each ``propagate(edge_index, x=rows, ...)`` of ``conv`` becomes ``aggregate(rows)``
    (``A @ [rows ; halo]`` from the pre-aggregating exchange; the layer's edges and weights,
    computed by the whole graph's ``gcn_norm``, go unused)."""
    def propagate(edge_index, size=None, **kwargs):
        x = kwargs.get("x")
        x = x[0] if isinstance(x, (tuple, list)) else x
        if counter is not None and world_size > 1:
            counter.exchanges += 1
        return aggregate(x)

    conv.__dict__["propagate"] = propagate  # the instance's, in front of the class's
    try:
        yield
    finally:
        conv.__dict__.pop("propagate", None)


def gcn_hop(conv) -> str | None:
    """``"gcn"`` when each hop of APPNP / SGConv / SSGConv / MixHopConv is ``D^-1/2 (A+I) D^-1/2``
    (self-loops added, PyG's normalisation, no edge dropout), else None (runs plain)."""
    if not getattr(conv, "add_self_loops", False) or not getattr(conv, "normalize", True):
        return None
    return "gcn" if float(getattr(conv, "dropout", 0.0) or 0.0) == 0.0 else None


def sum_hop(conv) -> str | None:
    """``"sum"`` for GatedGraphConv with ``aggr="add"`` (each hop sums the in-neighbours' rows)."""
    return "sum" if conv.aggr in ("add", "sum") else None
