"""A sparse matrix kept as CSR of itself and of its transpose (:class:`CSRPair`), the operator
every product of the exchange room multiplies with: the adjacency's blocks and the send operator
(:mod:`graphdist.exchange.spmm`), their row slices per round (:mod:`graphdist.exchange.rounds`),
the sampled boundary (:mod:`graphdist.exchange.boundary`) and held input rows
(:mod:`graphdist.exchange.resident`)."""
from __future__ import annotations

import warnings

import torch

from graphdist.sparse import index2ptr, lex_order

__all__ = ["CSRPair"]

warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")


class CSRPair:
    """A sparse matrix ``A [n_rows, n_cols]`` kept twice, as CSR of ``A`` and of ``A^T``, so the
    backward of ``A @ X`` is a forward SpMM with ``A^T`` instead of a transposition per step.

    Indices are int32 when the sizes allow (no conversion per call) and products are written
    with ``addmm(out, A, X, beta=0)``: on CPU (MKL) that is about 1.6x faster than ``A @ X``,
    which zero-fills and copies its result (measured side by side, ``benchmarks/gcn_epoch.py``)."""

    def __init__(self, rows, cols, vals, n_rows: int, n_cols: int, device="cpu"):
        """``rows``/``cols``/``vals``: COO entries sorted by (row, col)."""
        self.shape = (n_rows, n_cols)
        self.nnz = int(rows.numel())
        vals = vals.to(torch.float32)
        small = max(n_rows, n_cols, self.nnz) < 2**31 - 1
        it = (lambda t: t.to(torch.int32)) if small else (lambda t: t)  # noqa: E731
        self.A = torch.sparse_csr_tensor(it(index2ptr(rows, n_rows)), it(cols), vals, size=self.shape,
                                         check_invariants=False).to(device)
        order = lex_order(cols, rows, n_rows)
        self.AT = torch.sparse_csr_tensor(it(index2ptr(cols[order], n_cols)), it(rows[order]), vals[order],
                                          size=(n_cols, n_rows), check_invariants=False).to(device)

    @classmethod
    def from_csr(cls, ptr, cols, vals, n_rows: int, n_cols: int, device="cpu") -> "CSRPair":
        """From numpy CSR arrays sorted within rows (``vals`` float32), without a sort: the
        transpose is scipy's counting sort (``tocsc``, O(nnz), rows ascending within a column,
        as the lexicographic sort of the COO constructor gives). A square matrix equal to its
        transpose (GCN's normalisation of an undirected graph's owned block) is stored once."""
        import numpy as np
        import scipy.sparse as sp
        self = cls.__new__(cls)
        self.shape, self.nnz = (n_rows, n_cols), int(cols.size)
        it = np.int32 if max(n_rows, n_cols, self.nnz) < 2**31 - 1 else np.int64
        ptr, cols = ptr.astype(it, copy=False), cols.astype(it, copy=False)
        t = sp.csr_matrix((vals, cols, ptr), shape=(n_rows, n_cols), copy=False).tocsc()
        tptr, trows, tvals = t.indptr.astype(it, copy=False), t.indices.astype(it, copy=False), t.data
        del t
        csr = lambda p, c, v, shape: torch.sparse_csr_tensor(  # noqa: E731
            torch.from_numpy(p), torch.from_numpy(c), torch.from_numpy(v), size=shape,
            check_invariants=False).to(device)
        self.A = csr(ptr, cols, vals, self.shape)
        if n_rows == n_cols and np.array_equal(ptr, tptr) and np.array_equal(cols, trows) \
                and np.array_equal(vals.view(np.int32), tvals.view(np.int32)):
            self.AT = self.A  # symmetric, bit for bit
        else:
            self.AT = csr(tptr, trows, tvals, (n_cols, n_rows))
        return self

    @classmethod
    def from_coo(cls, rows, cols, vals, n_rows: int, n_cols: int, device="cpu") -> "CSRPair":
        """Entries in any order."""
        o = lex_order(rows, cols, n_cols)
        return cls(rows[o], cols[o], vals[o], n_rows, n_cols, device)

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        return _product(self.A, x)

    def mm_t(self, g: torch.Tensor) -> torch.Tensor:
        return _product(self.AT, g)

    def mm_add(self, x: torch.Tensor, out: torch.Tensor) -> None:
        """``out += A @ x`` in place (``addmm`` with beta 1: no product-sized temporary)."""
        _product_add(self.A, x, out)

    def mm_t_add(self, g: torch.Tensor, out: torch.Tensor) -> None:
        """``out += A^T @ g`` in place."""
        _product_add(self.AT, g, out)


def _product_add(a: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> None:
    if a._nnz() and x.shape[1]:
        torch.addmm(out, a, x.contiguous(), out=out)


def _product(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    if a._nnz() == 0 or x.shape[1] == 0:
        return x.new_zeros((a.shape[0], x.shape[1]))
    out = x.new_empty((a.shape[0], x.shape[1]))
    return torch.addmm(out, a, x.contiguous(), beta=0, out=out)
