"""GCN and GraphSAGE written for one device, with the halo exchange injected.

A layer sees ``h`` = rows of the nodes this rank owns ``[n_own, F_in]``, a sparse adjacency
over local columns ``[owned | halo]`` (``[n_own, n_own + n_halo]``) and ``exchange``, a
callable that returns ``[n_own + n_halo, F]`` (owned rows followed by halo rows). At world
size 1 ``exchange`` is the identity and this is plain single-device code.

Where the linear goes (each layer moves ``min(F_in, F_out)`` columns per halo row)::

    F_out <= F_in :  z = h W^T  ->  exchange(z)  ->  A z + b        (PyG GCNConv order)
    F_out >  F_in :  exchange(h)  ->  A h  ->  (A h) W^T + b

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


class SparseAdj:
    """A local sparse matrix ``A [n_rows, n_cols]`` stored twice (CSR of A and of A^T) so the
    backward of ``A @ X`` is a forward SpMM with ``A^T`` instead of a transposition per step."""

    def __init__(self, indptr, indices, values, n_rows: int, n_cols: int, device="cpu"):
        self.shape = (n_rows, n_cols)
        self.nnz = int(indices.numel())
        self.A = torch.sparse_csr_tensor(indptr, indices, values, size=self.shape, check_invariants=False).to(device)
        dev = indices.device  # the transpose is built where the inputs live (CPU or GPU)
        rows = torch.repeat_interleave(torch.arange(n_rows, device=dev), indptr[1:] - indptr[:-1])
        order = torch.argsort(indices * max(n_rows, 1) + rows)
        t_ptr = torch.zeros(n_cols + 1, dtype=torch.int64, device=dev)
        torch.cumsum(torch.bincount(indices, minlength=n_cols), 0, out=t_ptr[1:])
        self.AT = torch.sparse_csr_tensor(t_ptr, rows[order], values[order],
                                          size=(n_cols, n_rows), check_invariants=False).to(device)

    @classmethod
    def for_model(cls, lg, model: str, device="cpu") -> "SparseAdj":
        """The normalised adjacency a ``gcn`` or ``sage`` model needs, from a LocalGraph."""
        ip, ix, v = lg.gcn_adjacency() if model == "gcn" else lg.mean_adjacency()
        return cls(ip, ix, v, lg.num_owned, lg.num_cols, device)

    def __matmul__(self, x: torch.Tensor) -> torch.Tensor:
        return _SpMM.apply(x, self)


class _SpMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, adj):
        ctx.adj = adj
        return torch.sparse.mm(adj.A, x)

    @staticmethod
    def backward(ctx, g):
        if not ctx.needs_input_grad[0]:
            return None, None
        return torch.sparse.mm(ctx.adj.AT, g.contiguous()), None


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

    def forward(self, h, adj: SparseAdj, exchange):
        if self.f_out <= self.f_in:
            return adj @ exchange(h @ self.weight.t()) + self.bias
        return (adj @ exchange(h)) @ self.weight.t() + self.bias


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

    def forward(self, h, adj: SparseAdj, exchange):
        root = h @ self.weight_r.t()
        if self.f_out <= self.f_in:
            return adj @ exchange(h @ self.weight_l.t()) + self.bias + root
        return (adj @ exchange(h)) @ self.weight_l.t() + self.bias + root


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

    def forward(self, x, adj: SparseAdj, exchange=lambda h: h):
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
