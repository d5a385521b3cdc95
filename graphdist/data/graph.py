"""The one graph type: CSR over destination rows, plus optional node data.

Layout (message flow is src -> dst)::

    indptr  [N+1]  int64   row i = destination node i
    indices [E]    int64   indices[indptr[i]:indptr[i+1]] = sources j of edges j -> i,
                           sorted ascending within a row, no duplicates
    x       [N, F] float32 (optional) node features
    y       [N]    int64   (optional) class labels, -1 = unlabelled
    train_mask / val_mask / test_mask [N] bool (optional)

So ``A @ X`` with ``A = csr(indptr, indices)`` sums each node's in-neighbours' rows, which is
exactly GCN aggregation. An undirected graph stores both directions (``num_edges`` counts
directed edges, as PyG does: Cora has 10,556).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from graphdist.errors import DataFormatError
from graphdist.sparse import index2ptr, lex_order, ptr2index


def _as_long(a) -> torch.Tensor:
    if isinstance(a, np.ndarray):
        a = torch.from_numpy(np.ascontiguousarray(a))
    elif not isinstance(a, torch.Tensor):
        a = torch.as_tensor(a)
    return a.to(torch.int64).contiguous()


@dataclass(eq=False)
class Graph:
    """A graph in destination-row CSR form with optional features, labels and split masks."""

    indptr: torch.Tensor
    """``[N+1]`` int64 row pointer; row ``i`` holds the in-neighbours (sources) of node ``i``."""
    indices: torch.Tensor
    """``[E]`` int64 source node of each edge, grouped by destination row, ascending per row."""
    x: torch.Tensor | None = None
    """``[N, F]`` float32 node features, or None."""
    y: torch.Tensor | None = None
    """``[N]`` int64 labels (``-1`` = no label), or None."""
    train_mask: torch.Tensor | None = None
    """``[N]`` bool training nodes, or None."""
    val_mask: torch.Tensor | None = None
    """``[N]`` bool validation nodes, or None."""
    test_mask: torch.Tensor | None = None
    """``[N]`` bool test nodes, or None."""
    name: str = ""
    """Human-readable origin (the spec string it was loaded from)."""
    meta: dict = field(default_factory=dict)
    """Free-form facts about the source (e.g. ``{"directed": False}``)."""

    def __post_init__(self):
        self.indptr = _as_long(self.indptr)
        self.indices = _as_long(self.indices)
        n = self.indptr.numel() - 1
        if n < 0 or int(self.indptr[-1]) != self.indices.numel():
            raise ValueError("indptr[-1] must equal len(indices)")
        if self.x is not None:
            if isinstance(self.x, np.ndarray):
                self.x = torch.from_numpy(np.ascontiguousarray(self.x))
            self.x = self.x.to(torch.float32)
            if self.x.dim() == 1:
                self.x = self.x[:, None]
        if self.y is not None:
            self.y = _as_long(self.y)
        for k in ("train_mask", "val_mask", "test_mask"):
            m = getattr(self, k)
            if m is not None:
                if isinstance(m, np.ndarray):
                    m = torch.from_numpy(m)
                setattr(self, k, m.to(torch.bool))
        for k, v in (("x", self.x), ("y", self.y), ("train_mask", self.train_mask),
                     ("val_mask", self.val_mask), ("test_mask", self.test_mask)):
            if v is not None and v.shape[0] != n:
                raise DataFormatError(self.name or "graph", f"{k} has {v.shape[0]} rows but the graph has {n} nodes")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_edges(cls, src, dst, num_nodes: int, *, symmetrize: bool = True,
                   self_loops: bool = False, **node_data) -> "Graph":
        """Build from edge arrays ``src -> dst`` (numpy or torch). Duplicates are removed;
        ``symmetrize`` adds the reverse of every edge; self-loops are dropped unless kept."""
        src = _as_long(src)
        dst = _as_long(dst)
        if symmetrize:
            src, dst = torch.cat([src, dst]), torch.cat([dst, src])
        if not self_loops:
            keep = src != dst
            src, dst = src[keep], dst[keep]
        indptr, indices = csr_from_coo(dst, src, num_nodes)
        return cls(indptr, indices, **node_data)

    # ------------------------------------------------------------------ properties
    @property
    def num_nodes(self) -> int:
        return self.indptr.numel() - 1

    @property
    def num_edges(self) -> int:
        """Number of directed edges stored (both directions of an undirected edge count)."""
        return self.indices.numel()

    @property
    def num_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def num_classes(self) -> int:
        return 0 if self.y is None or self.y.numel() == 0 else int(self.y.max()) + 1

    def in_degree(self) -> torch.Tensor:
        """``[N]`` number of in-neighbours (sources) per node."""
        return self.indptr[1:] - self.indptr[:-1]

    def out_degree(self) -> torch.Tensor:
        return torch.bincount(self.indices, minlength=self.num_nodes)

    def dst_of_edges(self) -> torch.Tensor:
        """``[E]`` destination node of each stored edge (the CSR row)."""
        return ptr2index(self.indptr, self.num_edges)

    @property
    def edge_index(self) -> torch.Tensor:
        """``[2, E]`` PyG-style ``(src, dst)``."""
        return torch.stack([self.indices, self.dst_of_edges()])

    @cached_property
    def fingerprint(self) -> str:
        """Content hash of structure and node data (16 hex digits); equal graphs, equal prints."""
        h = hashlib.blake2b(digest_size=8)
        h.update(np.int64(self.num_nodes).tobytes())
        for k in ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask"):
            v = getattr(self, k)
            h.update(k.encode())
            if v is not None:
                h.update(str(tuple(v.shape)).encode())
                h.update(v.contiguous().numpy().tobytes())
        return h.hexdigest()

    def to_scipy(self):
        """``scipy.sparse.csr_matrix`` A with ``A[dst, src] = 1``."""
        import scipy.sparse as sp
        n = self.num_nodes
        return sp.csr_matrix((np.ones(self.num_edges, dtype=np.float32), self.indices.numpy(),
                              self.indptr.numpy()), shape=(n, n))

    # ------------------------------------------------------------------ PyG interop
    def to_pyg(self):
        from torch_geometric.data import Data
        d = Data(edge_index=self.edge_index, num_nodes=self.num_nodes)
        for k in ("x", "y", "train_mask", "val_mask", "test_mask"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        return d

    @classmethod
    def from_pyg(cls, data, *, name: str = "") -> "Graph":
        ei = data.edge_index
        n = int(data.num_nodes)
        indptr, indices = csr_from_coo(ei[1], ei[0], n)
        kw = {k: getattr(data, k, None) for k in ("x", "y", "train_mask", "val_mask", "test_mask")}
        if kw["y"] is not None and kw["y"].dim() > 1:
            kw["y"] = kw["y"].view(-1)
        return cls(indptr, indices, name=name, **kw)

    def summary(self) -> dict:
        deg = self.in_degree().to(torch.float64)
        out = {
            "name": self.name,
            "nodes": self.num_nodes,
            "edges": self.num_edges,
            "degree_min": int(deg.min()) if self.num_nodes else 0,
            "degree_mean": float(deg.mean()) if self.num_nodes else 0.0,
            "degree_max": int(deg.max()) if self.num_nodes else 0,
            "self_loops": int((self.indices == self.dst_of_edges()).sum()),
            "features": self.num_features,
            "classes": self.num_classes,
        }
        for k in ("train_mask", "val_mask", "test_mask"):
            m = getattr(self, k)
            out[k.replace("_mask", "")] = None if m is None else int(m.sum())
        out["fingerprint"] = self.fingerprint
        return out


def csr_from_coo(rows, cols, num_rows: int, num_cols: int | None = None):
    """Sorted, de-duplicated CSR ``(indptr, indices)`` from COO ``(rows, cols)`` (vectorised).

    ``num_cols`` defaults to ``num_rows`` (a square adjacency)."""
    rows = _as_long(rows)
    cols = _as_long(cols)
    n = int(num_rows)
    m = max(int(num_rows if num_cols is None else num_cols), 1)
    if rows.numel() and n * m < 2**62:
        key = torch.unique(rows * m + cols)  # sorted by row, then col; dedups
        rows = torch.div(key, m, rounding_mode="floor")
        cols = key - rows * m
    elif rows.numel():  # the key would overflow int64: two stable sorts, then drop repeats
        order = lex_order(rows, cols, m)
        rows, cols = rows[order], cols[order]
        keep = torch.ones_like(rows, dtype=torch.bool)
        keep[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
        rows, cols = rows[keep], cols[keep]
    return index2ptr(rows, n), cols.contiguous()
