"""A rank's normalised adjacency as sparse matrices, and its product with halo exchange.

``SparseAdj.propagate(h, exchanger)`` = ``A @ [h ; halo rows of h]`` for the rows ``h`` a rank
owns. The adjacency is kept split by column block so the halo exchange overlaps the local
product (forward and backward), and each block is stored as CSR of ``A`` and of ``A^T`` so the
backward is a forward SpMM too. Used by every workload that propagates over a partitioned
graph (GCN/SAGE, LightGCN).
"""
from __future__ import annotations

import warnings

import torch

from graphdist.sparse import index2ptr, lex_order, ptr2index

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")

__all__ = ["CSRPair", "SparseAdj"]


class CSRPair:
    """A sparse matrix ``A [n_rows, n_cols]`` kept twice, as CSR of ``A`` and of ``A^T``, so the
    backward of ``A @ X`` is a forward SpMM with ``A^T`` instead of a transposition per step."""

    def __init__(self, rows, cols, vals, n_rows: int, n_cols: int, device="cpu"):
        """``rows``/``cols``/``vals``: COO entries sorted by (row, col)."""
        self.shape = (n_rows, n_cols)
        self.nnz = int(rows.numel())
        self.A = torch.sparse_csr_tensor(index2ptr(rows, n_rows), cols, vals, size=self.shape,
                                         check_invariants=False).to(device)
        order = lex_order(cols, rows, n_rows)
        self.AT = torch.sparse_csr_tensor(index2ptr(cols[order], n_cols), rows[order], vals[order],
                                          size=(n_cols, n_rows), check_invariants=False).to(device)

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.A, x)

    def mm_t(self, g: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.AT, g.contiguous())


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
        rows = ptr2index(indptr.to(dev), int(indices.numel()))
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
