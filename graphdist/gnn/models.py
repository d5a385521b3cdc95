"""GCN and GraphSAGE written for one device, with the halo exchange injected.

A layer sees ``h`` = rows of the nodes this rank owns ``[n_own, F_in]``, a sparse adjacency
over local columns ``[owned | halo]`` (``[n_own, n_own + n_halo]``) and ``exchange``, the
rank's :class:`~graphdist.exchange.exchanger.HaloExchanger` (None at world size 1: then this is plain
single-device code). ``adj.propagate(z, exchange)`` = ``A @ [z ; halo rows of z]``.

Where the linear goes: both orders are the same math, ``A (h W^T) = (A h) W^T``, so a layer
takes the one whose SpMMs (and halo rows, which are as wide) are narrower, counting the
backward pass::

    lin first        z = h W^T  ->  propagate(z)  ->  A z + b      (PyG GCNConv order)
                     SpMM at F_out forward, and again backward if any gradient is needed
    propagate first  propagate(h)  ->  A h  ->  (A h) W^T + b
                     SpMM at F_in forward, and again backward only if h needs a gradient

    h needs a gradient (hidden layers)      propagate first iff F_out > F_in
    h does not (the features, dropped out)  propagate first iff F_in < 2 F_out in training,
                                            F_in < F_out in evaluation
    ... and with no active exchange         (the first layer only) propagate first iff
                                            F_in <= 2 F_out, and the product of an unchanged
                                            input is kept
                                            (``SparseAdj.propagate(reuse=True)``): the
                                            evaluation pass's first layer costs a dense
                                            product only

The first layer's backward then needs no SpMM and no halo exchange at all (its weight gradient
is ``g^T (A h)``). Dropout before a hidden layer is fused with the ReLU before it
(:func:`keyed_dropout` with ``relu=True``), in place of the layer's output, the mask drawn a
block of rows at a time in cache.
"""
from __future__ import annotations

import math
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from graphdist import comm
from graphdist.errors import ConfigError
from graphdist.keyed import key32 as _key32
from graphdist.keyed import bits_into, blocks, id_hashes, keyed_bits
from graphdist.exchange.spmm import SparseAdj


def _glorot(w: torch.Tensor) -> None:
    a = math.sqrt(6.0 / (w.shape[0] + w.shape[1]))
    nn.init.uniform_(w, -a, a)


class Reused:
    """A tensor that each pass writes over instead of making a fresh one (a fresh tensor above
    ``--malloc-mmap-mb`` costs its page faults on every pass: with it a Cora epoch at k = 2 took
    0.89x the time, a GAT epoch 0.81x, BENCHMARKS.md). It is handed out as a view, and only once
    nobody holds the last view handed out (a caller, or an autograd graph that saved it and has
    not run its backward) is it written over again; until then :meth:`buffer` says None and the
    pass makes a fresh tensor, as before."""

    def __init__(self):
        self._buf: torch.Tensor | None = None
        self._given = None  # a weak reference to the view handed out last

    def buffer(self, shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
        """The buffer, when it has this shape, dtype and device and nobody holds its last view."""
        b = self._buf
        if b is None or tuple(b.shape) != tuple(shape) or b.dtype != dtype or b.device != device:
            return None
        return b if self._given is None or self._given() is None else None

    def __getstate__(self) -> dict:
        return {}  # a scratch: a pickled or copied model starts without it (a weak reference pickles not)

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def give(self, t: torch.Tensor, shape=None) -> torch.Tensor:
        """Keep ``t`` (contiguous) as the buffer; return a view of it (``shape``: reshaped)."""
        self._buf = t
        v = t.view(t.shape if shape is None else shape)
        self._given = weakref.ref(v)
        return v


def _propagate_first(f_in: int, f_out: int, h: torch.Tensor, exchange, params, keeps: bool = True) -> tuple[bool, bool]:
    """``(propagate before the linear, keep the product for an unchanged input)``, see the
    module docstring. ``keeps``: the layer's input can be unchanged between passes (the first
    layer's: the features); a later layer's never is, so it takes the narrower product."""
    grad = torch.is_grad_enabled()
    if grad and h.requires_grad:
        return f_out > f_in, False
    if keeps and (exchange is None or not exchange.active) and f_in <= 2 * f_out:
        return True, True
    return f_in < f_out * (2 if grad and any(p.requires_grad for p in params) else 1), False


def held_input(f_in: int, f_out: int, training: bool) -> bool:
    """Whether a first layer can multiply held halo rows of its input
    (:mod:`graphdist.exchange.resident`): only when it propagates the input itself, in training by
    the exchange's rule (``F_in < 2 F_out``, so the product is the one the exchange gives) and
    in evaluation by the local one (``F_in <= 2 F_out``, the product kept)."""
    return f_in < 2 * f_out if training else f_in <= 2 * f_out


def layer_widths(f_in: int, hidden: int, f_out: int, layers: int, *, active: bool, labels: bool = False,
                 held: bool = False) -> list[dict]:
    """What each layer of a :class:`GNN` does, from :func:`_propagate_first` itself: widths,
    whether it propagates before its linear in training (``train_first``) and evaluation
    (``eval_first``, ``eval_reuse``: the kept product), the width of its halo rows, and whether
    its propagate's input needs a gradient (then the backward exchanges rows too). ``active``:
    a halo exchange runs (k > 1); ``labels``: a label embedding makes the input need a gradient;
    ``held``: the input's halo rows are held (``--input-halo resident``): the first layer's
    ``train_held`` / ``eval_held`` say where it exchanges nothing."""
    class _Ex:
        pass
    ex = _Ex()
    ex.active = active
    dims = [f_in] + [hidden] * (layers - 1) + [f_out]
    out = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        w = torch.zeros(1, requires_grad=True)
        needs = i > 0 or labels
        with torch.enable_grad():
            tf, _ = _propagate_first(a, b, torch.zeros(0, a, requires_grad=needs), ex, (w,), i == 0)
        with torch.no_grad():
            ef, er = _propagate_first(a, b, torch.zeros(0, a), ex, (w,), i == 0)
        th = eh = False
        if i == 0 and held and active and not labels:
            th, eh = held_input(a, b, True), held_input(a, b, False)
            if eh:  # no exchange: the local rule, the product kept
                ex.active = False
                with torch.no_grad():
                    ef, er = _propagate_first(a, b, torch.zeros(0, a), ex, (w,))
                ex.active = active
        out.append({"f_in": a, "f_out": b, "train_first": tf, "train_width": a if tf else b,
                    "eval_first": ef, "eval_reuse": er, "eval_width": a if ef else b,
                    "needs_input_grad": needs if tf else True, "train_held": th, "eval_held": eh})
    return out


class GCNLayer(nn.Module):
    """Kipf & Welling: ``out = D^-1/2 (A+I) D^-1/2 (h W^T) + b`` (PyG ``GCNConv`` layout:
    ``weight`` is ``[F_out, F_in]``)."""

    keeps = True
    """Its input may be unchanged between passes (:class:`GNN` sets False on every layer but
    the first): only then may it propagate first to keep the product."""

    def __init__(self, f_in: int, f_out: int):
        super().__init__()
        self.f_in, self.f_out = f_in, f_out
        self.weight = nn.Parameter(torch.empty(f_out, f_in))
        self.bias = nn.Parameter(torch.zeros(f_out))
        _glorot(self.weight)

    def forward(self, h, adj: SparseAdj, exchange=None):
        first, reuse = _propagate_first(self.f_in, self.f_out, h, exchange, (self.weight, self.bias), self.keeps)
        if first:
            return F.linear(adj.propagate(h, exchange, reuse=reuse), self.weight, self.bias)
        return adj.propagate(h @ self.weight.t(), exchange).add_(self.bias)  # a fresh product: nothing saved it


class SAGELayer(nn.Module):
    """GraphSAGE, mean aggregator with root weight (PyG ``SAGEConv``):
    ``out = W_l mean_{j in N(i)} h_j + b + W_r h_i``."""

    keeps = True
    """As :attr:`GCNLayer.keeps`."""

    def __init__(self, f_in: int, f_out: int):
        super().__init__()
        self.f_in, self.f_out = f_in, f_out
        self.weight_l = nn.Parameter(torch.empty(f_out, f_in))
        self.bias = nn.Parameter(torch.zeros(f_out))
        self.weight_r = nn.Parameter(torch.empty(f_out, f_in))
        _glorot(self.weight_l)
        _glorot(self.weight_r)

    def forward(self, h, adj: SparseAdj, exchange=None):
        root = h @ self.weight_r.t()
        first, reuse = _propagate_first(self.f_in, self.f_out, h, exchange, (self.weight_l, self.bias), self.keeps)
        if first:
            return F.linear(adj.propagate(h, exchange, reuse=reuse), self.weight_l, self.bias) + root
        return adj.propagate(h @ self.weight_l.t(), exchange).add_(self.bias).add_(root)


class GlobalBatchNorm1d(nn.BatchNorm1d):
    """``BatchNorm1d`` whose batch statistics are those of every rank's rows together (two small
    differentiable all-reduces), so it equals ``BatchNorm1d`` on the whole graph: the built-in
    models' ``--batch-norm``, and :func:`graphdist.gnn.pyg.distribute` swaps it in for every
    ``torch.nn.BatchNorm1d`` (also inside PyG's ``BatchNorm`` and ``MLP``)."""

    def forward(self, x):
        batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if not batch_stats:
            return super().forward(x)
        if x.dim() != 2:
            raise ConfigError(f"GlobalBatchNorm1d takes node rows [n, C], got shape {tuple(x.shape)}")
        n = comm.all_reduce_sum(torch.tensor([float(x.shape[0])], dtype=torch.float64, device=x.device))
        n = float(n[0])
        mean = comm.all_reduce_sum_autograd(x.sum(0)) / n
        d = x - mean
        var = comm.all_reduce_sum_autograd((d * d).sum(0)) / n
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                f = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
                self.running_mean.mul_(1 - f).add_(f * mean.detach())
                self.running_var.mul_(1 - f).add_(f * var.detach() * (n / max(n - 1.0, 1.0)))
        out = d * (var + self.eps).rsqrt()
        return out * self.weight + self.bias if self.affine else out


def keyed_dropout(h: torch.Tensor, p: float, ids: torch.Tensor, key: int, *, relu: bool = False,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """Dropout whose mask is a function of ``(key, global row id, column)`` only
    (:func:`graphdist.keyed.keyed_bits`: an xor, a multiply and a compare per element,
    several times cheaper than ``torch.bernoulli`` on a CPU)::

        keep[i, j] = bits(key, id_i, j) >= (p - 1/2) * 2^32      (signed 32-bit compare)

    so a row is dropped alike on whichever rank owns it, and k ranks draw exactly the masks of
    one process (``ids`` = the rows' global node ids, ``key`` from (seed, epoch, layer)).
    ``relu=True`` gives ``dropout(relu(h))`` *in place of* ``h`` (a layer's output, which
    nothing else holds). The mask is drawn a block of rows at a time into a scratch buffer
    (:func:`graphdist.keyed.blocks`), the compare writes it there as 0/1 floats, and
    ``h * mask / (1 - p)`` goes straight into the result: no mask of the tensor's size. ``out``:
    where to write the result when ``h`` needs no gradient (a float32 tensor of ``h``'s shape,
    contiguous; otherwise a new one is made), e.g. the buffer of the previous epoch's dropped-out
    features (:class:`GNN`)."""
    if h.dtype != torch.float32:
        out = h * _scaled_mask(h, p, ids, key)
        return F.relu(out) if relu else out
    if relu:
        return _ReluDropout.apply(h, ids, p, key)
    if torch.is_grad_enabled() and h.requires_grad:
        return h * _scaled_mask(h, p, ids, key)
    if out is None or out.shape != h.shape or out.dtype != h.dtype or out.device != h.device or not out.is_contiguous():
        out = torch.empty_like(h, memory_format=torch.contiguous_format)
    return _dropout_into(out, h, p, ids, key)


def _threshold(p: float) -> int:
    return int(p * (1 << 32)) - (1 << 31)


def _scaled_mask(h: torch.Tensor, p: float, ids: torch.Tensor, key: int) -> torch.Tensor:
    keep = keyed_bits(ids.to(h.device), h.shape[1], key) >= _threshold(p)
    return keep.to(h.dtype).mul_(1.0 / (1.0 - p))


def _dropout_into(out: torch.Tensor, h: torch.Tensor, p: float, ids: torch.Tensor, key: int,
                  relu: bool = False) -> torch.Tensor:
    """``out = h * keep / (1 - p)`` (then ReLU), ``out`` may be ``h`` itself."""
    n, f = h.shape
    rows, cols = id_hashes(ids.to(h.device), f, key)
    step, (buf,) = blocks(n, f, h.device)
    thr, scale = _threshold(p), 1.0 / (1.0 - p)
    zero = torch.zeros((), dtype=h.dtype, device=h.device)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        bits = bits_into(buf[:(r1 - r0) * f].view(r1 - r0, f), rows[r0:r1], cols)
        keep = torch.ge(bits, thr, out=bits.view(torch.float32))
        o = torch.addcmul(zero, h[r0:r1], keep, value=scale, out=out[r0:r1])
        if relu:
            o.relu_()
    return out


class _ReluDropout(torch.autograd.Function):
    """``relu(h) * keep / (1 - p)`` written over ``h``; backward: ``g / (1 - p)`` where the
    output is positive (where the mask kept a positive value). Saves the output only."""

    @staticmethod
    def forward(ctx, h, ids, p, key):
        ctx.scale = 1.0 / (1.0 - p)
        _dropout_into(h, h, p, ids, key, relu=True)
        ctx.mark_dirty(h)
        ctx.save_for_backward(h)
        return h

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return torch.ops.aten.threshold_backward.default(g, out, 0.0).mul_(ctx.scale), None, None, None


class GNN(nn.Module):
    """``L`` layers of GCN or SAGE; ReLU (and optional global batch norm) between layers,
    dropout before every layer (Kipf: dropout on the input too).

    ``forward(x, adj, exchange, ids=, step=, labels=)``: with ``ids`` (the global node ids of the
    rows of ``x``) dropout is :func:`keyed_dropout` keyed by ``(seed, step, layer)``, the same on
    any number of ranks; without, it is ``F.dropout`` on torch's RNG. With ``label_classes`` the
    model has a masked label embedding (UniMP, "Masked Label Prediction", as SuperGCN pairs with
    2-bit halos): ``labels [n]`` (class, or -1 = unknown) add a learned class vector (initially
    zero) to the input rows whose label is known."""

    def __init__(self, model: str, f_in: int, hidden: int, f_out: int, layers: int = 2,
                 dropout: float = 0.5, batch_norm: bool = False, seed: int = 0, label_classes: int = 0):
        super().__init__()
        if model not in ("gcn", "sage"):
            raise ValueError(f"model must be gcn or sage, got {model!r}")
        dims = [f_in] + [hidden] * (layers - 1) + [f_out]
        layer = GCNLayer if model == "gcn" else SAGELayer
        self.kind = model
        self.dropout = dropout
        self.seed = seed
        self.convs = nn.ModuleList(layer(a, b) for a, b in zip(dims[:-1], dims[1:]))
        for conv in self.convs[1:]:  # a hidden layer's input changes every pass: never kept
            conv.keeps = False
        self.norms = nn.ModuleList(GlobalBatchNorm1d(hidden) for _ in range(layers - 1)) if batch_norm else None
        self.label_emb = nn.Embedding(label_classes, f_in) if label_classes else None
        if self.label_emb is not None:  # zero: training starts from the model without labels
            nn.init.zeros_(self.label_emb.weight)
        self._dropped = Reused()
        """the features dropped out by the last training pass, written over by the next (see
        :meth:`_keeps_dropped`)"""

    def forward(self, x, adj: SparseAdj, exchange=None, *, ids: torch.Tensor | None = None,
                step: int = 0, labels: torch.Tensor | None = None, held=None):
        h = x
        if self.label_emb is not None and labels is not None:
            h = h + self.label_emb(labels.clamp(min=0)) * (labels >= 0).to(h.dtype)[:, None]
            held = None  # the input changes with the labels and needs a gradient: it is exchanged
        last = len(self.convs) - 1
        relu = False  # the ReLU after layer i - 1, applied with the dropout before layer i
        for i, conv in enumerate(self.convs):
            ex = exchange
            use_held = i == 0 and held is not None and held_input(conv.f_in, conv.f_out, self.training)
            if self.dropout > 0 and self.training:
                if ids is None:
                    use_held = False  # torch's RNG: the halo rows' mask cannot be drawn here
                    h = F.dropout(F.relu(h) if relu else h, self.dropout, True)
                else:
                    key = _key32(self.seed, step, i)
                    keep = i == 0 and self._keeps_dropped(h, exchange)
                    into = self._dropped.buffer(h.shape, h.dtype, h.device) if keep else None
                    h = keyed_dropout(h, self.dropout, ids, key, relu=relu, out=into)
                    if keep:
                        h = self._dropped.give(h)
                    if use_held:  # the halo rows' mask drawn here, keyed by their global ids
                        ex = held.dropped(lambda r, rid: keyed_dropout(r, self.dropout, rid, key))
            elif relu:
                h = F.relu(h, inplace=True)  # a layer's output: nothing else holds it
            if use_held and ex is exchange:
                ex = held.held()
            h = conv(h, adj, ex)
            relu = i < last
            if relu and self.norms is not None:
                h = self.norms[i](h)
        return h

    def _keeps_dropped(self, x: torch.Tensor, exchange) -> bool:
        """Whether the first layer's dropped-out features are written over by the next pass
        (:class:`Reused`): when the layer keeps its input for the backward anyway (it multiplies
        by the weight first; SAGE's root always), so holding it between passes adds nothing to the
        training's peak; not when the input needs a gradient or the layer propagates it first (then
        it is let go after the product). ``Epoch.keeps_dropped`` in
        :mod:`graphdist.gnn.plan_replay` counts it alike."""
        if x.requires_grad or x.dtype != torch.float32:
            return False
        conv = self.convs[0]
        first, _ = _propagate_first(conv.f_in, conv.f_out, x, exchange, tuple(conv.parameters()), conv.keeps)
        return self.kind == "sage" or not first

    def param_groups(self, weight_decay: float, first_layer_only: bool = True) -> list[dict]:
        """Adam groups: weight decay on the first layer only (Kipf) or on all parameters."""
        if not first_layer_only:
            return [{"params": list(self.parameters()), "weight_decay": weight_decay}]
        first = list(self.convs[0].parameters())
        ids = {id(p) for p in first}
        rest = [p for p in self.parameters() if id(p) not in ids]
        return [{"params": first, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]

    def halo_widths(self) -> list[int]:
        """Columns each layer exchanges per halo row when its input needs a gradient
        (``min(F_in, F_out)``; see the module docstring for the first layer)."""
        return [min(c.f_in, c.f_out) for c in self.convs]
