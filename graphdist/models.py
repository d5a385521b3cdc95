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
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from graphdist import comm

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")


class CSRPair:
    """A sparse matrix ``A [n_rows, n_cols]`` kept twice, as CSR of ``A`` and of ``A^T``, so the
    backward of ``A @ X`` is a forward SpMM with ``A^T`` instead of a transposition per step."""

    def __init__(self, rows, cols, vals, n_rows: int, n_cols: int, device="cpu"):
        """``rows``/``cols``/``vals``: COO entries sorted by (row, col)."""
        self.shape = (n_rows, n_cols)
        self.nnz = int(rows.numel())
        self.A = torch.sparse_csr_tensor(_indptr(rows, n_rows), cols, vals, size=self.shape,
                                         check_invariants=False).to(device)
        order = torch.argsort(cols * max(n_rows, 1) + rows)
        t_cols = cols[order]
        self.AT = torch.sparse_csr_tensor(_indptr(t_cols, n_cols), rows[order], vals[order],
                                          size=(n_cols, n_rows), check_invariants=False).to(device)

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.A, x)

    def mm_t(self, g: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.AT, g.contiguous())


def _indptr(sorted_rows: torch.Tensor, n: int) -> torch.Tensor:
    ptr = torch.zeros(n + 1, dtype=torch.int64, device=sorted_rows.device)
    torch.cumsum(torch.bincount(sorted_rows, minlength=n), 0, out=ptr[1:])
    return ptr


class SparseAdj:
    """A rank's normalised adjacency, split by column block::

        A = [ A_own | A_halo ]     A_own  [n_own, n_own]   columns = owned rows
                                   A_halo [n_own, n_halo]  columns = halo rows (peer order)

    ``propagate(h, exchanger)`` computes ``A @ [h ; halo(h)]`` without building the
    concatenation: it posts the halo exchange, multiplies ``A_own @ h`` while the rows travel,
    then adds ``A_halo @ recv``. Backward mirrors it (``A_halo^T @ g`` is sent home while
    ``A_own^T @ g`` is computed). At world size 1 there is no halo block.
    """

    def __init__(self, indptr, indices, values, n_rows: int, n_cols: int, device="cpu"):
        self.shape = (n_rows, n_cols)
        self.nnz = int(indices.numel())
        dev = indices.device
        rows = torch.repeat_interleave(torch.arange(n_rows, device=dev), indptr[1:] - indptr[:-1])
        own = indices < n_rows
        if bool(own.all()):
            self.own, self.halo = CSRPair(rows, indices, values, n_rows, n_rows, device), None
        else:
            self.own = CSRPair(rows[own], indices[own], values[own], n_rows, n_rows, device)
            h = ~own
            self.halo = CSRPair(rows[h], indices[h] - n_rows, values[h], n_rows, n_cols - n_rows, device)

    @classmethod
    def for_model(cls, lg, model: str, device="cpu") -> "SparseAdj":
        """The normalised adjacency a ``gcn`` or ``sage`` model needs, from a LocalGraph."""
        ip, ix, v = lg.gcn_adjacency() if model == "gcn" else lg.mean_adjacency()
        return cls(ip, ix, v, lg.num_owned, lg.num_cols, device)

    def propagate(self, h: torch.Tensor, exchanger=None) -> torch.Tensor:
        """``A @ [h ; halo rows of h]`` for owned rows ``h [n_own, F]`` (autograd-aware)."""
        if exchanger is None or not exchanger.active:
            if self.halo is not None:
                raise ValueError("this adjacency has halo columns but no active halo exchanger was given")
            return _SpMM.apply(h, self.own)
        return _HaloSpMM.apply(h, self, exchanger)

    def __matmul__(self, h: torch.Tensor) -> torch.Tensor:
        return self.propagate(h)


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, pair):
        ctx.pair = pair
        return pair.mm(x)

    @staticmethod
    def backward(ctx, g):
        if not ctx.needs_input_grad[0]:
            return None, None
        return ctx.pair.mm_t(g), None


class _HaloSpMM(torch.autograd.Function):
    """Halo exchange fused with the SpMM so communication overlaps the local product."""

    @staticmethod
    def forward(ctx, h, adj, ex):
        ctx.adj, ctx.ex = adj, ex
        h = h.contiguous()
        pending = ex.post_forward(h)
        out = adj.own.mm(h)
        recv = pending.wait()
        if adj.halo is not None and recv.shape[0]:
            out.add_(adj.halo.mm(recv))
        return out

    @staticmethod
    def backward(ctx, g):
        if not ctx.needs_input_grad[0]:
            return None, None, None
        adj, ex = ctx.adj, ctx.ex
        g = g.contiguous()
        if adj.halo is not None:
            g_halo = adj.halo.mm_t(g)
        else:
            g_halo = g.new_zeros((0, g.shape[1]))
        pending = ex.post_backward(g_halo)
        g_h = adj.own.mm_t(g)
        back = pending.wait()
        if back.shape[0]:
            g_h.index_add_(0, ex.send_idx, back)
        return g_h, None, None


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


class GNN(nn.Module):
    """``L`` layers of GCN or SAGE; ReLU (and optional global batch norm) between layers,
    dropout before every layer (Kipf: dropout on the input too)."""

    def __init__(self, model: str, f_in: int, hidden: int, f_out: int, layers: int = 2,
                 dropout: float = 0.5, batch_norm: bool = False):
        super().__init__()
        if model not in ("gcn", "sage"):
            raise ValueError(f"model must be gcn or sage, got {model!r}")
        dims = [f_in] + [hidden] * (layers - 1) + [f_out]
        layer = GCNLayer if model == "gcn" else SAGELayer
        self.kind = model
        self.dropout = dropout
        self.convs = nn.ModuleList(layer(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.norms = nn.ModuleList(GlobalBatchNorm(hidden) for _ in range(layers - 1)) if batch_norm else None

    def forward(self, x, adj: SparseAdj, exchange=None):
        h = x
        last = len(self.convs) - 1
        for i, conv in enumerate(self.convs):
            if self.dropout > 0:
                h = F.dropout(h, self.dropout, self.training)
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
