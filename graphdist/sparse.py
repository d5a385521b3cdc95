"""CSR pointer helpers, defined once for the whole package.

``index2ptr`` / ``ptr2index`` have the contract of ``torch_geometric.index.index2ptr`` /
``ptr2index`` (a test checks them against PyG's). They are not imported from PyG because
``import torch_geometric`` costs about 2 s per process here (``python -X importtime``), which
every rank of every job would pay for two one-line functions.

    index2ptr([0, 0, 2, 2, 3], 5) -> [0, 2, 2, 4, 5, 5]     sorted row ids -> row pointer
    ptr2index([0, 2, 2, 4, 5, 5]) -> [0, 0, 2, 2, 3]        row pointer -> row id of each entry
"""
from __future__ import annotations

import torch

from graphdist.torch_internals import csr_pointer

__all__ = ["index2ptr", "ptr2index", "coo_to_csr", "lex_order", "index_dtype"]


def index_dtype(bound: int):
    """``torch.int32`` when every id is below ``bound <= 2^31 - 1``, else ``torch.int64``."""
    return torch.int32 if int(bound) < 2**31 - 1 else torch.int64


def index2ptr(index: torch.Tensor, size: int | None = None) -> torch.Tensor:
    """Row pointer ``[size + 1]`` of *sorted* row ids ``index`` (int64 in, int64 out; int32 in,
    int32 out while the pointer's largest value, the entry count, fits in int32)."""
    if size is None:
        size = int(index.max()) + 1 if index.numel() else 0
    narrow = index.dtype != torch.int64 and index_dtype(index.numel()) == torch.int32
    return csr_pointer(index, size, out_int32=narrow)


def ptr2index(ptr: torch.Tensor, output_size: int | None = None) -> torch.Tensor:
    """Row id of every entry of a CSR with row pointer ``ptr``."""
    rows = torch.arange(ptr.numel() - 1, dtype=ptr.dtype, device=ptr.device)
    return rows.repeat_interleave(ptr.diff(), output_size=output_size)


def coo_to_csr(rows: torch.Tensor, cols: torch.Tensor, vals: torch.Tensor | None, n_rows: int,
               n_cols: int):
    """``(indptr, cols, vals)`` with entries sorted by (row, col); ``vals`` may be None."""
    order = lex_order(rows, cols, n_cols)
    rows, cols = rows[order], cols[order]
    vals = None if vals is None else vals[order].contiguous()
    return index2ptr(rows, n_rows), cols.contiguous(), vals


def lex_order(major: torch.Tensor, minor: torch.Tensor, minor_size: int) -> torch.Tensor:
    """Permutation sorting pairs by ``(major, minor)``: one sort of the key
    ``major * minor_size + minor`` when it fits in int64, else two stable sorts (no overflow)."""
    top = int(major.max()) + 1 if major.numel() else 0
    if top * max(int(minor_size), 1) < 2**62:  # int64 key (int32 ids would overflow the product)
        return torch.argsort(major.to(torch.int64) * max(int(minor_size), 1) + minor)
    order = torch.argsort(minor, stable=True)
    return order[torch.argsort(major[order], stable=True)]
