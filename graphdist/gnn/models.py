"""GCN and GraphSAGE written for one device, with the halo exchange injected.

A layer sees ``h`` = rows of the nodes this rank owns ``[n_own, F_in]``, a sparse adjacency
over local columns ``[owned | halo]`` (``[n_own, n_own + n_halo]``) and ``exchange``, the
rank's :class:`~graphdist.comm.HaloExchanger` (None at world size 1: then this is plain
single-device code). ``adj.propagate(z, exchange)`` = ``A @ [z ; halo rows of z]``.

Where the linear goes (each layer moves ``min(F_in, F_out)`` columns per halo row)::

    F_out <= F_in :  z = h W^T  ->  propagate(z)  ->  A z + b        (PyG GCNConv order)
    F_out >  F_in :  propagate(h)  ->  A h  ->  (A h) W^T + b

Both orders are the same math: ``A (h W^T) = (A h) W^T``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from graphdist import comm
from graphdist.halo.spmm import SparseAdj


def _glorot(w: torch.Tensor) -> None:
    a = math.sqrt(6.0 / (w.shape[0] + w.shape[1]))
    nn.init.uniform_(w, -a, a)


class GCNLayer(nn.Module):
    """Kipf & Welling: ``out = D^-1/2 (A+I) D^-1/2 (h W^T) + b`` (PyG ``GCNConv`` layout:
    ``weight`` is ``[F_out, F_in]``)."""

    def __init__(self, f_in: int, f_out: int):
        super().__init__()
        self.f_in, self.f_out = f_in, f_out
        self.weight = nn.Parameter(torch.empty(f_out, f_in))
        self.bias = nn.Parameter(torch.zeros(f_out))
        _glorot(self.weight)

    def forward(self, h, adj: SparseAdj, exchange=None):
        if self.f_out <= self.f_in:
            return adj.propagate(h @ self.weight.t(), exchange) + self.bias
        return adj.propagate(h, exchange) @ self.weight.t() + self.bias


class SAGELayer(nn.Module):
    """GraphSAGE, mean aggregator with root weight (PyG ``SAGEConv``):
    ``out = W_l mean_{j in N(i)} h_j + b + W_r h_i``."""

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
        if self.f_out <= self.f_in:
            return adj.propagate(h @ self.weight_l.t(), exchange) + self.bias + root
        return adj.propagate(h, exchange) @ self.weight_l.t() + self.bias + root


class GlobalBatchNorm(nn.Module):
    """Batch norm over the nodes of *all* ranks: mean and variance are all-reduced (two small
    differentiable all-reduces), so it equals ``BatchNorm1d`` on the whole graph."""

    def __init__(self, dim: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.register_buffer("running_mean", torch.zeros(dim))
        self.register_buffer("running_var", torch.ones(dim))

    def forward(self, h):
        if not self.training:
            return (h - self.running_mean) * (self.running_var + self.eps).rsqrt() * self.weight + self.bias
        n = comm.all_reduce_sum(torch.tensor([float(h.shape[0])], device=h.device))
        mean = comm.all_reduce_sum_autograd(h.sum(0)) / n
        d = h - mean
        var = comm.all_reduce_sum_autograd((d * d).sum(0)) / n
        with torch.no_grad():
            m = self.momentum
            self.running_mean.mul_(1 - m).add_(m * mean.detach())
            unbiased = var.detach() * (n / (n - 1).clamp(min=1))
            self.running_var.mul_(1 - m).add_(m * unbiased)
        return d * (var + self.eps).rsqrt() * self.weight + self.bias


_M24 = 1 << 24


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 integer hash on int32 tensors (wrapping multiplies, logical shifts)."""
    x = x ^ ((x >> 16) & 0xFFFF)
    x = x * 0x7FEB352D
    x = x ^ ((x >> 15) & 0x1FFFF)
    x = x * (0x846CA68B - (1 << 32))
    return x ^ ((x >> 16) & 0xFFFF)


def _key32(*values: int) -> int:
    """A 32-bit key (as a signed int32 value) from small integers, e.g. (seed, epoch, layer)."""
    h = 0x811C9DC5
    for v in values:
        h = ((h ^ (int(v) & 0xFFFFFFFF)) * 0x01000193) & 0xFFFFFFFF
        h = ((h ^ (h >> 15)) * 0x2C1B3C6D) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def keyed_dropout(h: torch.Tensor, p: float, ids: torch.Tensor, key: int) -> torch.Tensor:
    """Dropout whose mask is a function of ``(key, global row id, column)`` only::

        keep[i, j] = hash(hash(id_i ^ key), j) >= p * 2^24      (24-bit uniform per element)

    so a row is dropped alike on whichever rank owns it, and k ranks draw exactly the masks of
    one process (``ids`` = the rows' global node ids, ``key`` from (seed, epoch, layer))."""
    ids = ids.to(device=h.device, dtype=torch.int64)
    folded = ((ids & 0xFFFFFFFF) ^ ((ids >> 32) * 0x9E3779B1)) & 0xFFFFFFFF
    rows = torch.where(folded >= 1 << 31, folded - (1 << 32), folded).to(torch.int32)
    rows = _mix32(rows ^ key)
    cols = torch.arange(h.shape[1], dtype=torch.int32, device=h.device) * (0x85EBCA6B - (1 << 32))
    u = (_mix32(rows[:, None] ^ cols[None, :]) >> 8) & (_M24 - 1)
    keep = u >= int(p * _M24)
    return h * keep.to(h.dtype) * (1.0 / (1.0 - p))


class GNN(nn.Module):
    """``L`` layers of GCN or SAGE; ReLU (and optional global batch norm) between layers,
    dropout before every layer (Kipf: dropout on the input too).

    ``forward(x, adj, exchange, ids=, step=)``: with ``ids`` (the global node ids of the rows of
    ``x``) dropout is :func:`keyed_dropout` keyed by ``(seed, step, layer)``, the same on any
    number of ranks; without, it is ``F.dropout`` on torch's RNG."""

    def __init__(self, model: str, f_in: int, hidden: int, f_out: int, layers: int = 2,
                 dropout: float = 0.5, batch_norm: bool = False, seed: int = 0):
        super().__init__()
        if model not in ("gcn", "sage"):
            raise ValueError(f"model must be gcn or sage, got {model!r}")
        dims = [f_in] + [hidden] * (layers - 1) + [f_out]
        layer = GCNLayer if model == "gcn" else SAGELayer
        self.kind = model
        self.dropout = dropout
        self.seed = seed
        self.convs = nn.ModuleList(layer(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.norms = nn.ModuleList(GlobalBatchNorm(hidden) for _ in range(layers - 1)) if batch_norm else None

    def forward(self, x, adj: SparseAdj, exchange=None, *, ids: torch.Tensor | None = None,
                step: int = 0):
        h = x
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            if self.dropout > 0 and self.training:
                h = (F.dropout(h, self.dropout, True) if ids is None
                     else keyed_dropout(h, self.dropout, ids, _key32(self.seed, step, i)))
            h = conv(h, adj, exchange)
            if i < last:
                if self.norms is not None:
                    h = self.norms[i](h)
                h = F.relu(h)
        return h

    def param_groups(self, weight_decay: float, first_layer_only: bool = True) -> list[dict]:
        """Adam groups: weight decay on the first layer only (Kipf) or on all parameters."""
        if not first_layer_only:
            return [{"params": list(self.parameters()), "weight_decay": weight_decay}]
        first = list(self.convs[0].parameters())
        ids = {id(p) for p in first}
        rest = [p for p in self.parameters() if id(p) not in ids]
        return [{"params": first, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]

    def halo_widths(self) -> list[int]:
        """Columns each layer exchanges per halo row (``min(F_in, F_out)``)."""
        return [min(c.f_in, c.f_out) for c in self.convs]
