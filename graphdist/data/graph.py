"""The one graph type: CSR over destination rows, plus optional node data.

Layout (message flow is src -> dst)::

    indptr  [N+1]  int64   row i = destination node i
    indices [E]    int32   indices[indptr[i]:indptr[i+1]] = sources j of edges j -> i,
                           sorted ascending within a row, no duplicates (int64 only when
                           N >= 2^31 - 1: ids are as narrow as they can be)
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
from graphdist.sparse import index_dtype, ptr2index


def _as_long(a) -> torch.Tensor:
    if isinstance(a, np.ndarray):
        a = torch.from_numpy(np.ascontiguousarray(a))
    elif not isinstance(a, torch.Tensor):
        a = torch.as_tensor(a)
    return a.to(torch.int64).contiguous()


def _as_ids(a, bound: int) -> torch.Tensor:
    """Node ids as a contiguous tensor of :func:`graphdist.sparse.index_dtype` (no copy when it
    already is one)."""
    if isinstance(a, np.ndarray):
        a = torch.from_numpy(np.ascontiguousarray(a))
    elif not isinstance(a, torch.Tensor):
        a = torch.as_tensor(a)
    return a.to(index_dtype(bound)).contiguous()


def np_ids(a, bound: int) -> np.ndarray:
    """Node ids as a numpy array of the narrow id dtype (a view when it already is one)."""
    a = a.numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    return a.astype(np.int32 if index_dtype(bound) == torch.int32 else np.int64, copy=False)


_HASH_BLOCK = 1 << 22
FINGERPRINT_FIELDS = ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask")
"""The arrays :attr:`Graph.fingerprint` hashes, in this order."""


class Fingerprint:
    """The streaming hash behind :attr:`Graph.fingerprint`: ``field(name, shape)`` for every
    name of :data:`FINGERPRINT_FIELDS` in order (``shape`` None when the graph lacks it), each
    followed by its values in any blocks (``update``). A graph built by several ranks
    (:mod:`graphdist.partition.build`) is hashed by streaming its rows in order, never held whole."""

    def __init__(self, num_nodes: int):
        self._h = hashlib.blake2b(digest_size=8)
        self._h.update(np.int64(num_nodes).tobytes())

    def field(self, name: str, shape: tuple | None) -> None:
        self._h.update(name.encode())
        if shape is not None:
            self._h.update(str(tuple(shape)).encode())

    def update(self, name: str, block: np.ndarray) -> None:
        """Values of field ``name`` in order; ids (indptr, indices) as int64 whatever their width."""
        if name in ("indptr", "indices") and block.dtype.kind in "iu" and block.dtype != np.int64:
            block = block.astype(np.int64)
        self._h.update(np.ascontiguousarray(block))

    def hexdigest(self) -> str:
        return self._h.hexdigest()


@dataclass(eq=False)
class Graph:
    """A graph in destination-row CSR form with optional features, labels and split masks."""

    indptr: torch.Tensor
    """``[N+1]`` int64 row pointer; row ``i`` holds the in-neighbours (sources) of node ``i``."""
    indices: torch.Tensor
    """``[E]`` int32 (int64 when N >= 2^31 - 1) source node of each edge, grouped by destination
    row, ascending per row."""
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
    node_ids: torch.Tensor | np.ndarray | None = None
    """``[N]`` the input's own id of each node (an edge list's ids, an npz's ``node_ids``): int64
    (a tensor), or a numpy ``str`` array where the ids are words; None where the node index is the
    id (:mod:`graphdist.ids`). Not part of the fingerprint: outputs are keyed by it, the graph is
    the same."""
    class_names: np.ndarray | None = None
    """``[C]`` numpy ``str``: the name of each class where the input's labels are names (``y`` is
    the place of a node's name here, names in ascending order); None where labels are integers.
    Not part of the fingerprint, like the ids: the outputs' ``pred`` is written as these names."""

    def __post_init__(self):
        self.indptr = _as_long(self.indptr)
        n = self.indptr.numel() - 1
        self.indices = _as_ids(self.indices, max(n, 1))
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
        if self.node_ids is not None:
            kind = self.node_ids.dtype.kind if isinstance(self.node_ids, np.ndarray) else "i"
            if kind == "S":  # bytes: UTF-8 text
                self.node_ids = np.char.decode(self.node_ids, "utf-8")
            self.node_ids = self.node_ids.astype(str) if kind in "US" else _as_long(self.node_ids)
        if self.class_names is not None:
            self.class_names = np.asarray(self.class_names).astype(str).reshape(-1)
            if self.class_names.size < self.num_classes:
                raise DataFormatError(self.name or "graph", f"{self.class_names.size} class names for "
                                                            f"{self.num_classes} classes")
        for k in ("train_mask", "val_mask", "test_mask"):
            m = getattr(self, k)
            if m is not None:
                if isinstance(m, np.ndarray):
                    m = torch.from_numpy(m)
                setattr(self, k, m.to(torch.bool))
        for k, v in (("x", self.x), ("y", self.y), ("train_mask", self.train_mask),
                     ("val_mask", self.val_mask), ("test_mask", self.test_mask), ("node_ids", self.node_ids)):
            if v is not None and v.shape[0] != n:
                raise DataFormatError(self.name or "graph", f"{k} has {v.shape[0]} rows but the graph has {n} nodes")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_edges(cls, src, dst, num_nodes: int, *, symmetrize: bool = True,
                   self_loops: bool = False, **node_data) -> "Graph":
        """Build from edge arrays ``src -> dst`` (numpy or torch, any integer type). Duplicates
        are removed; ``symmetrize`` adds the reverse of every edge; self-loops are dropped unless
        kept. Memory: the ids are narrowed to int32 first (when N allows), and no temporary is
        wider than the edges themselves (``meta["symmetric"]`` records a symmetrised build, so
        partitioners can skip ``A + A^T``)."""
        n = int(num_nodes)
        src, dst = np_ids(src, max(n, 1)), np_ids(dst, max(n, 1))
        if not self_loops:
            keep = src != dst
            if not keep.all():
                src, dst = src[keep], dst[keep]
            del keep
        if symmetrize:
            rows, cols = np.concatenate([dst, src]), np.concatenate([src, dst])
        else:
            rows, cols = dst, src
        del src, dst
        indptr, indices = csr_from_coo(rows, cols, n)
        del rows, cols
        if symmetrize:
            meta = dict(node_data.pop("meta", None) or {})
            meta.setdefault("symmetric", True)
            meta.setdefault("self_loops", bool(self_loops))
            node_data["meta"] = meta
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
        return torch.bincount(self.indices.to(torch.int64), minlength=self.num_nodes)

    def dst_of_edges(self) -> torch.Tensor:
        """``[E]`` destination node of each stored edge (the CSR row)."""
        return ptr2index(self.indptr, self.num_edges)

    @property
    def edge_index(self) -> torch.Tensor:
        """``[2, E]`` PyG-style ``(src, dst)``."""
        return torch.stack([self.indices.to(torch.int64), self.dst_of_edges()])

    @cached_property
    def fingerprint(self) -> str:
        """Content hash of structure and node data (16 hex digits); equal graphs, equal prints.

        Ids are hashed as int64 whatever their stored width (so a graph's print does not depend
        on it), block by block: no copy of a whole array is made (:class:`Fingerprint`)."""
        h = Fingerprint(self.num_nodes)
        for k in FINGERPRINT_FIELDS:
            v = getattr(self, k)
            h.field(k, None if v is None else tuple(v.shape))
            if v is not None:
                a = v.contiguous().numpy().reshape(-1)
                for i in range(0, a.size, _HASH_BLOCK):
                    h.update(k, a[i:i + _HASH_BLOCK])
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
        from graphdist.ids import describe, id_type
        out["node_ids"], out["node_ids_range"] = id_type(self.node_ids), describe(self.node_ids)
        out["class_names"] = None if self.class_names is None else self.class_names.tolist()
        out["fingerprint"] = self.fingerprint
        return out


def csr_from_coo(rows, cols, num_rows: int, num_cols: int | None = None):
    """Sorted, de-duplicated CSR ``(indptr int64, indices)`` from COO ``(rows, cols)``.

    ``num_cols`` defaults to ``num_rows`` (a square adjacency); ``indices`` has the narrow id
    dtype of ``num_cols`` (int32 below 2^31 - 1). scipy's counting sort by row, then an in-place
    sort and de-duplication within each row: the only temporaries are the output itself and a
    one-byte value per entry (no int64 sort keys, no argsort permutation)."""
    import scipy.sparse as sp
    n = int(num_rows)
    m = max(int(num_rows if num_cols is None else num_cols), 1)
    bound = max(n, m)
    rows, cols = np_ids(rows, bound), np_ids(cols, bound)
    if rows.size == 0:
        return torch.zeros(n + 1, dtype=torch.int64), torch.zeros(0, dtype=index_dtype(m))
    a = sp.coo_matrix((np.ones(rows.size, dtype=bool), (rows, cols)), shape=(n, m)).tocsr()
    a.sum_duplicates()  # sorts each row, then merges repeats in place
    indptr = torch.from_numpy(a.indptr.astype(np.int64))
    indices = torch.from_numpy(np_ids(a.indices, m))
    return indptr, indices
