"""Distribution applied around a one-device PyG model: :func:`distribute` and :class:`DistConv`.

``distribute(model, part)`` changes ``model`` in place, as ``torch.distributed.fsdp.fully_shard``
does: every ``MessagePassing`` submodule's class becomes a subclass of it with :class:`DistConv`
in front (``GATConv`` -> ``DistGATConv``), so parameter names, ``state_dict`` keys and
``isinstance`` checks are unchanged. A wrapped layer's ``forward(x, edge_index, ...)`` takes the
rank's owned rows and ``part.edge_index`` and returns owned rows:

    plain   x_full = [x ; halo rows of x] (one exchange, autograd: halo gradients go home);
            the layer runs on x_full (``full``) or on (x_full, x) (``bipartite``) and its output is
            cut to the owned rows. GCN-normalised layers get ``gcn_norm`` weights of the global
            degrees (``Part.gcn_edges``) with their own normalisation switched off for the call.
    hops    layers that propagate several times (APPNP, TAGConv, ChebConv, ...): the layer runs on
            the owned rows and the halo is exchanged before each ``propagate``
            (:mod:`graphdist.gnn.pyg.hops`; under ``mvc`` each hop that is a fixed linear map is
            pre-aggregated). ``gcn_norm`` / ``get_laplacian`` called inside any wrapped layer's
            ``forward`` give the whole graph's normalisation.
    mvc     where the layer's aggregation is a fixed linear map (GCN, SAGE-mean, GIN-sum, ...):
            the layer runs on the owned rows with no edges, and its ``propagate`` result is
            replaced (a propagate hook) by ``A @ [h ; halo(h)]`` from
            :class:`graphdist.exchange.spmm.SparseAdj` with the pre-aggregating (mvc) exchange.

``bits < 32`` quantises the rows in flight in both modes (:mod:`graphdist.exchange.quant`).
``torch.nn.BatchNorm1d`` modules become :class:`GlobalBatchNorm1d` (statistics over all ranks'
rows); modules that mix nodes otherwise are refused (:mod:`graphdist.gnn.pyg.rules`). The
parameters are broadcast from rank 0, so every rank starts from the same weights.
"""
from __future__ import annotations

import contextlib
import inspect

import torch
from torch import nn
from torch_geometric.nn.aggr import Aggregation
from torch_geometric.nn.conv import MessagePassing

from graphdist import comm
from graphdist.errors import ConfigError
from graphdist.gnn.models import GlobalBatchNorm1d
from graphdist.gnn.pyg.hops import aggregating, count_propagates, global_norms, norm_sites, propagating, same_edges
from graphdist.gnn.pyg.part import Part
from graphdist.gnn.pyg.rules import LayerRule, check_module, is_batch_norm, rule_for
from graphdist.gnn.pyg.sync import CHECK_EVERY, Guard, Resync, install
from graphdist.gnn.pyg.rows import halo_rows
from graphdist.gnn.pyg.traced import exchange_op, untraced
from graphdist.exchange.exchanger import HaloExchanger

__all__ = ["DistConv", "GlobalBatchNorm1d", "distribute", "HALO_MODES", "scan_layers"]

HALO_MODES = ("plain", "mvc")


class _Context:
    """What the layers of one :func:`distribute` call share: the part, the exchangers (one set
    for training, one for evaluation when ``eval_bits`` differs), the mvc adjacencies."""

    def __init__(self, part: Part, halo: str, bits: int, seed: int, eval_bits: int | None = None):
        self.part, self.halo, self.bits = part, halo, bits
        self.eval_bits = bits if eval_bits is None else eval_bits
        self.plain = self._plain(bits, seed)
        self.plain_eval = self.plain if self.eval_bits == bits else self._plain(self.eval_bits, seed + 1)
        self.seed = seed
        self.mvc_ex: HaloExchanger | None = None
        self.mvc_eval: HaloExchanger | None = None
        self.adj: dict = {}
        self.empty = torch.zeros(2, 0, dtype=torch.int64, device=part.device)

    def _plain(self, bits: int, seed: int) -> HaloExchanger:
        part = self.part
        return part.exchanger if bits == 32 else HaloExchanger.from_local_graph(part.graph, part.device, bits=bits,
                                                                                seed=seed)

    def prepare_mvc(self, kinds: set[str]) -> None:
        """Build the mvc exchangers and adjacencies (a collective: the plan check)."""
        from graphdist.partition.setup import check_layout
        from graphdist.exchange.spmm import SparseAdj
        lg, dev = self.part.graph, self.part.device
        check_layout(lg, "mvc")
        self.mvc_ex = HaloExchanger.from_local_graph(lg, dev, halo="mvc", bits=self.bits, seed=self.seed)
        self.mvc_eval = self.mvc_ex if self.eval_bits == self.bits else HaloExchanger.from_local_graph(
            lg, dev, halo="mvc", bits=self.eval_bits, seed=self.seed + 1)
        for kind in sorted(kinds):
            base = "sage" if kind == "sum" else kind
            if base not in self.adj:
                self.adj[base] = SparseAdj.for_model(lg, base, dev, halo="mvc")
        if "sum" in kinds:  # sum = in-degree * mean (every in-edge of an owned row is local)
            self.adj["deg"] = (lg.indptr[1:] - lg.indptr[:-1]).clamp(min=1).to(dev, torch.float32)[:, None]

    def aggregate(self, kind: str, h: torch.Tensor, ex: HaloExchanger) -> torch.Tensor:
        if h.dim() != 2:
            raise ConfigError(f"halo='mvc' aggregates rows [n, F], got a tensor of shape {tuple(h.shape)}")
        if torch.jit.is_tracing():
            return exchange_op(lambda t: self._aggregate(kind, t, ex), h, ("mvc", id(self), kind, id(ex)))
        return self._aggregate(kind, h, ex)

    def _aggregate(self, kind: str, h: torch.Tensor, ex: HaloExchanger) -> torch.Tensor:
        out = self.adj["sage" if kind == "sum" else kind].propagate(h, ex)
        return out * self.adj["deg"].to(out.dtype) if kind == "sum" else out

    def exchangers(self) -> list[HaloExchanger]:
        seen = {id(e): e for e in (self.plain, self.plain_eval, self.mvc_ex, self.mvc_eval) if e is not None}
        return list(seen.values())

    def training_exchangers(self) -> list[HaloExchanger]:
        return [e for e in (self.plain, self.mvc_ex) if e is not None]


class _ConvState:
    """A wrapped layer's name, position, rule, shared context and halo mode (and why)."""

    def __init__(self, name: str, cls: type, rule: LayerRule, ctx: _Context, sig: inspect.Signature,
                 linear: str | None, index: int = 0, why: str = ""):
        self.name, self.cls, self.rule, self.ctx, self.sig, self.linear = name, cls, rule, ctx, sig, linear
        self.index, self.why = index, why
        self.used = "mvc" if linear else "plain"
        self.sites = norm_sites(cls)  # where the layer finds gcn_norm / get_laplacian
        self.exchanges = 0  # halo exchanges (forward) of the last call


def _tagged(ex: HaloExchanger, index: int) -> HaloExchanger:
    """``ex`` with its next exchange tagged ``index`` (the layer's position: quantisation errors
    are kept per layer)."""
    ex.start_pass()
    for _ in range(index):
        ex.next_tag()
    return ex


def _why(conv, rule: LayerRule, halo: str, linear: str | None) -> str:
    """Why a layer runs ``mvc`` or ``plain`` (for :func:`halo_layers`)."""
    name = type(conv).__name__
    if halo == "plain":
        return "halo plain asked for"
    if linear:
        return f"aggregation is a fixed linear map ({linear})"
    if rule.linear is None and rule.call == "hops":
        return f"{name} has no mvc adjacency for its hops (each exchanged plain)"
    if rule.linear is None:
        return f"{name} aggregates with weights computed from the rows (not a fixed linear map)"
    aggr = getattr(conv, "aggr", None)
    if isinstance(aggr, str) and aggr not in ("add", "sum", "mean"):
        return f"{name}(aggr={aggr!r}) is not a fixed linear map"
    if getattr(conv, "improved", False):
        return f"{name}(improved=True) has no mvc adjacency"
    return f"{name} in this configuration is not a fixed linear map"


# ---------------------------------------------------------------------------- the wrapped layer
class DistConv:
    """Put in front of a ``MessagePassing`` class by :func:`distribute`: ``forward`` takes the
    rank's owned rows ``x [n_own, F]`` and ``edge_index`` over local ids (``part.edge_index``;
    any subset of it for layers that do not normalise by degree), exchanges the halo rows of
    ``x`` and returns the layer's owned rows, exactly as the layer computes them on the whole
    graph. Other arguments (``edge_weight``, ``edge_attr`` in ``edge_index`` order, GCN2Conv's
    ``x_0`` owned rows) pass through."""

    _graphdist: _ConvState

    def forward(self, *args, **kwargs):
        st = self._graphdist
        b = st.sig.bind(*args, **kwargs)
        a = b.arguments
        part = st.ctx.part
        x, ei = a.get("x"), a.get("edge_index")
        where = f"layer {st.name or '<model>'} ({st.cls.__name__})"
        with untraced():  # checks, not steps of a trace (torch.jit.trace, SummaryWriter.add_graph)
            _check_call(x, ei, a, part, where)
        base = super().forward
        edges_given = any(a.get(n) is not None for n in st.rule.edge_args)
        ctx = st.ctx
        if st.rule.call == "hops":  # owned rows in; the halo exchanged before each propagate
            st.exchanges = 0
            if st.linear and not edges_given:  # each hop a fixed linear map: A @ [h ; halo], pre-aggregated
                _require_part_edges(ei, part, where, "halo='mvc' aggregates over the part's own edges")
                st.used, kind = "mvc", st.linear
                ex = _tagged(ctx.mvc_ex if self.training else ctx.mvc_eval, st.index)
                hops = aggregating(self, lambda h: ctx.aggregate(kind, h, ex), st, part.world_size)
            else:
                st.used = "plain"
                hops = propagating(self, part, _tagged(ctx.plain if self.training else ctx.plain_eval, st.index), st)
            with global_norms(st.sites, part, where), hops:
                if st.rule.prepare is not None:
                    st.rule.prepare(self, a, part)
                return base(*b.args, **b.kwargs)
        st.exchanges = 1 if part.world_size > 1 else 0  # once, before the layer
        with global_norms(st.sites, part, where), count_propagates(self, where, st.cls.__name__):
            if st.linear and not edges_given:
                _require_part_edges(ei, part, where, "halo='mvc' aggregates over the part's own edges")
                st.used = "mvc"
                return self._mvc_call(st, base, b, _tagged(ctx.mvc_ex if self.training else ctx.mvc_eval, st.index))
            st.used = "plain"
            return self._plain_call(st, base, b, where, _tagged(ctx.plain if self.training else ctx.plain_eval,
                                                                st.index))

    def _plain_call(self, st, base, b, where, ex):
        a, part, rule = b.arguments, st.ctx.part, st.rule
        x = a["x"]
        gcn = rule.gcn_norm(self) if rule.gcn_norm is not None else None
        if gcn is not None:
            _require_part_edges(a["edge_index"], part, where, "it normalises with the degrees of the part's edges")
            if a.get("edge_weight") is not None:
                raise ConfigError(f"{where} normalises with edge weights: the weighted degrees of halo nodes are "
                                  "not in a part yet; pass normalize=False and your own normalised weights")
            a["edge_index"], a["edge_weight"] = part.gcn_edges(*gcn, dtype=x.dtype)
        halo = ex.active and part.num_halo > 0
        if halo:
            full = halo_rows(x, ex)
            if rule.call == "bipartite":
                a["x"] = (full, x)
            else:
                a["x"] = full
                for name in rule.node_args:
                    if a.get(name) is not None:
                        a[name] = _pad(a[name], part.num_halo)
        with _normalize_off(self, gcn is not None):
            out = base(*b.args, **b.kwargs)
        return _owned(out, part.num_owned) if halo and rule.call == "full" else out

    def _mvc_call(self, st, base, b, ex):
        a, ctx = b.arguments, st.ctx
        a["edge_index"] = ctx.empty
        kind = st.linear

        def replace(module, inputs, out):
            xs = inputs[2]["x"]
            return ctx.aggregate(kind, xs[0] if isinstance(xs, (tuple, list)) else xs, ex)

        handle = self.register_propagate_forward_hook(replace)
        try:
            with _normalize_off(self, st.rule.gcn_norm is not None and st.rule.gcn_norm(self) is not None):
                return base(*b.args, **b.kwargs)
        finally:
            handle.remove()


def _check_call(x, ei, a, part: Part, where: str) -> None:
    if not torch.is_tensor(x) or x.dim() < 2 or x.shape[0] != part.num_owned:
        got = tuple(x.shape) if torch.is_tensor(x) else type(x).__name__
        raise ConfigError(f"{where} takes this rank's owned rows x [{part.num_owned}, F], got {got}")
    if not (torch.is_tensor(ei) and ei.layout == torch.strided and ei.dim() == 2 and ei.shape[0] == 2):
        sparse = "a sparse adjacency (T.ToSparseTensor, SparseTensor, torch sparse) is not supported on a part; " \
            if not torch.is_tensor(ei) or ei.layout != torch.strided else ""
        raise ConfigError(f"{where} takes edge_index [2, E] over the part's local ids (part.edge_index); {sparse}"
                          f"got {type(ei).__name__}{tuple(ei.shape) if torch.is_tensor(ei) else ''}")
    if a.get("size") is not None:
        raise ConfigError(f"{where}: size= is not supported on a part (the part fixes the sizes)")


def _require_part_edges(ei, part: Part, where: str, why: str) -> None:
    if same_edges(ei, part):
        return
    raise ConfigError(f"{where} needs part.edge_index as its edge_index ({why})")


@contextlib.contextmanager
def _normalize_off(conv, off: bool):
    if not off:
        yield
        return
    conv.normalize = False
    try:
        yield
    finally:
        conv.normalize = True


def _pad(t: torch.Tensor, n: int) -> torch.Tensor:
    return torch.cat([t, t.new_zeros((n,) + tuple(t.shape[1:]))])


def _owned(out, n: int):
    if isinstance(out, tuple):  # (rows, extras), e.g. return_attention_weights=True
        return (out[0][:n],) + tuple(out[1:])
    return out[:n]


_CLASSES: dict[type, type] = {}


def _dist_class(cls: type) -> type:
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"Dist{cls.__name__}", (DistConv, Resync, cls), {"__module__": __name__})
    return _CLASSES[cls]


# ---------------------------------------------------------------------------- distribute
def distribute(model: nn.Module, part: Part, *, halo: str = "plain", bits: int = 32, seed: int = 0,
               eval_bits: int | None = None, check_every: int = CHECK_EVERY) -> nn.Module:
    """Make ``model`` (written for one device) run on ``part`` and return it (changed in place).

    ``halo``: ``plain`` (every layer) or ``mvc`` (pre-aggregated partial sums where a layer's
    aggregation is a fixed linear map; the others run plain: :func:`halo_layers` says which and
    why). ``bits``: 32, or 16/8/4/2 to quantise the rows in flight (not exact); ``eval_bits``:
    the same for layers in evaluation mode (``model.eval()``; None: ``bits``). ``seed`` keys the
    rounding noise. ``check_every``: :func:`sync_grads` compares the ranks' weights every this
    many steps (and on the first step after this call, a ``reset_parameters()`` or a
    ``load_state_dict``; 0: only then); ``reset_parameters()`` re-broadcasts rank 0's weights
    (:mod:`graphdist.gnn.pyg.sync`). Refuses, with one line naming it, a layer that is not local.
    A collective: every rank calls it with the same model."""
    if halo not in HALO_MODES:
        raise ConfigError(f"halo must be one of {', '.join(HALO_MODES)}, got {halo!r}")
    for name, b in (("bits", bits), ("eval_bits", eval_bits)):
        if b is not None and b != 32 and part.world_size == 1:
            raise ConfigError(f"{name}={b} quantises the halo exchange, but a 1-part job has none; use {name}=32 "
                              "or k >= 2 parts")
    if not isinstance(check_every, int) or check_every < 0:
        raise ConfigError(f"check_every must be an integer >= 0 (steps between weight checks), got {check_every!r}")
    convs, norms = scan_layers(model)
    ctx = _Context(part, halo, bits, seed, eval_bits)
    ctx.guard = Guard(check_every)
    kinds = {}
    for name, conv, rule in convs:
        kinds[name] = rule.linear(conv) if halo == "mvc" and rule.linear is not None else None
    if any(kinds.values()):
        ctx.prepare_mvc({k for k in kinds.values() if k})
    for index, (name, conv, rule) in enumerate(convs):
        cls = type(conv)
        sig = inspect.signature(cls.forward)
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
        why = _why(conv, rule, halo, kinds[name])
        conv.__class__ = _dist_class(cls)
        conv._graphdist = _ConvState(name, cls, rule, ctx, sig, kinds[name], index, why)
    if part.world_size > 1:
        for bn in norms:
            bn.__class__ = GlobalBatchNorm1d
    install(model, ctx.guard)
    comm.broadcast_module(model)
    return model


def scan_layers(model: nn.Module):
    """``([(name, conv, rule)], [batch norms])``; refuses what cannot run on a part."""
    convs, norms, inside = [], [], {}
    for name, mod in model.named_modules():
        if isinstance(mod, DistConv):
            raise ConfigError(f"layer {name or '<model>'} ({type(mod).__name__}) is already distributed")
        if isinstance(mod, MessagePassing):
            outer = next((o for o in inside if name.startswith(o + ".") or o == ""), None)
            if outer is not None:
                raise ConfigError(f"layer {name} ({type(mod).__name__}) sits inside layer {outer or '<model>'} "
                                  f"({type(inside[outer]).__name__}); graphdist wraps outermost layers only")
            convs.append((name, mod, rule_for(name, mod)))
            inside[name] = mod
        elif is_batch_norm(mod):
            norms.append(mod)
        elif not (isinstance(mod, Aggregation) and any(name.startswith(o + ".") or o == "" for o in inside)):
            check_module(name, mod)
    return convs, norms
