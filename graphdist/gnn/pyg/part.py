"""One rank's part of the graph as the tensors a PyG model takes: :class:`Part`, :func:`load_part`.

Local node ids are the columns of the rank's :class:`~graphdist.partition.local.LocalGraph`::

    0 .. n_own-1 | n_own .. n_own+n_halo-1
    owned rows   | halo: remote in-neighbours, grouped by owning rank

``part.x`` (and ``y``, the masks, ``node_ids``) hold the owned rows; ``part.edge_index`` holds
every in-edge of every owned node as ``(source column, owned destination row)``, so a layer that
sees ``[owned ; halo]`` rows computes the owned rows exactly. ``part.exchange(h)`` returns
``[h ; halo rows of h]`` (autograd: the gradients of halo rows go home).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch_geometric.nn.conv.gcn_conv import gcn_norm as _pyg_gcn_norm  # (wrapped layers see another gcn_norm)

from graphdist import comm
from graphdist.torch_internals import untraced
from graphdist.exchange.exchanger import HaloExchanger
from graphdist.partition.local import LocalGraph

__all__ = ["Part", "load_part", "PartSource"]


@dataclass
class PartSource:
    """Where a rank's part comes from (the fields :func:`graphdist.partition.setup.load_local` reads)."""

    spec: str | None = None
    """Dataset spec partitioned in-process (every rank loads the graph, rank 0 partitions it)."""
    partition: str | None = None
    """Partition artifact directory (``graphdist partition ... --out DIR``): only part r is read."""
    parts: int | None = None
    """Number of parts; None: the world size."""
    method: str = "metis"
    """Partitioner for an in-process partition (``partitioners.METHODS``)."""
    seed: int = 0
    """Partitioner seed."""


@dataclass(eq=False)
class Part:
    """One rank's share of the graph, as tensors on ``device`` (see the module docstring)."""

    graph: LocalGraph
    """The plan: owned ids, local CSR, halo layout, global degrees (:mod:`graphdist.partition.local`)."""
    device: torch.device
    """Where every tensor below lives."""
    x: torch.Tensor | None
    """``[n_own, F]`` owned features."""
    y: torch.Tensor | None
    """``[n_own]`` owned labels."""
    train_mask: torch.Tensor | None
    """``[n_own]`` bool."""
    val_mask: torch.Tensor | None
    """``[n_own]`` bool."""
    test_mask: torch.Tensor | None
    """``[n_own]`` bool."""
    node_ids: torch.Tensor
    """``[n_own]`` global node id of each owned row (keys for :func:`keyed_dropout`)."""
    edge_index: torch.Tensor
    """``[2, E_local]`` local ``(source column, owned destination row)`` of every in-edge of every
    owned node."""
    exchanger: HaloExchanger
    """The plain 32-bit halo exchange of this part."""
    col_self_loop: torch.Tensor
    """``[n_own + n_halo]`` bool: the column's node has a self-loop in the whole graph."""
    info: dict
    """Where the part came from (method, parts, source, quality)."""
    edge_attr: torch.Tensor | None = None
    """``[E_local, D]`` edge attributes in ``edge_index`` order. Not yet carried by partition
    artifacts (None); a caller may set it from :meth:`global_edge_index`."""
    input_ids: np.ndarray | None = None
    """``[n_own]`` the input's own id of each owned row (an edge list's ids: int64, or the strings
    written; :mod:`graphdist.ids`), set by :func:`load_part`; None where the index is the id. The
    keys of :func:`~graphdist.gnn.pyg.write_predictions`."""

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_local_graph(cls, lg: LocalGraph, device="cpu", info: dict | None = None) -> "Part":
        """The part of ``lg`` (a collective at world size > 1: every rank calls it together)."""
        dev = torch.device(device)
        put = lambda t: None if t is None else t.to(dev)  # noqa: E731
        rows = lg.row_of_edges()
        edge_index = torch.stack([lg.indices, rows]).to(dev)
        ex = HaloExchanger.from_local_graph(lg, dev)
        loops = torch.zeros(lg.num_owned, 1, device=dev)
        own_loop = lg.indices[lg.indices == rows]
        loops[own_loop.to(dev)] = 1.0
        col_loop = ex(loops)[:, 0] > 0.5  # halo columns: their owners know
        part = cls(graph=lg, device=dev, x=put(lg.x), y=put(lg.y), train_mask=put(lg.train_mask),
                   val_mask=put(lg.val_mask), test_mask=put(lg.test_mask), node_ids=lg.owned.to(dev),
                   edge_index=edge_index, exchanger=ex, col_self_loop=col_loop, info=dict(info or {}))
        from graphdist.gnn.pyg.splits import graph_wide
        graph_wide(part.train_mask, part.val_mask, part.test_mask)  # the dataset's own split
        return part

    # ------------------------------------------------------------------ sizes
    @property
    def rank(self) -> int:
        return self.graph.rank

    @property
    def world_size(self) -> int:
        return self.graph.world_size

    @property
    def num_owned(self) -> int:
        with untraced():  # a number, not a tensor, under torch.jit.trace
            return self.graph.num_owned

    @property
    def num_halo(self) -> int:
        with untraced():
            return self.graph.num_halo

    @property
    def num_nodes(self) -> int:
        """Nodes of the whole graph."""
        return self.graph.num_global_nodes

    @property
    def num_features(self) -> int:
        return 0 if self.x is None else int(self.x.shape[1])

    @property
    def num_classes(self) -> int:
        """Classes of the whole graph (max label + 1)."""
        return int(self.graph.num_classes)

    @property
    def class_names(self) -> list[str] | None:
        """The name of each class (in the logits' order) where the input's labels are names
        (``labels=L.csv`` of ``spam`` / ``ham``); None where they are integers."""
        return self.graph.class_names

    # ------------------------------------------------------------------ PyG Data idioms
    def to(self, device) -> "Part":
        """``data.to(device)`` of a PyG script: the part itself when it lives on ``device``
        (load it elsewhere with ``load_part(..., device=...)``)."""
        dev = torch.device(device)
        if dev.type != self.device.type or (dev.index is not None and dev != self.device):
            from graphdist.errors import ConfigError
            raise ConfigError(f"part.to({dev}): the part is on {self.device}; pass device='{dev}' to gd.load_part")
        return self

    def __copy__(self):
        """Refused, in one line: a PyG transform (``T.GDC()(part)``, ...) starts by copying the
        data it is given, and it would treat the part as a whole graph: its node count, degrees
        and ids are the part's, and its edges may end at any node of the graph."""
        from graphdist.errors import ConfigError
        raise ConfigError("a PyG transform applied to a part (T.GDC, T.GCNNorm, T.AddSelfLoops, ...) sees it as a "
                          "whole graph: its edges, degrees and node ids are the part's; apply transforms to the "
                          "whole graph before gd.load_part (dataset[0] after them; edge attributes such as GDC's "
                          "weights are not carried by a part yet), or use the graph-wide versions "
                          "(gd.normalize_features, gd.random_split, part.gcn_edges())")

    def __getitem__(self, key: str):
        """``data['train_mask']``: the attribute of that name (None when absent), as PyG's ``Data``."""
        return getattr(self, key, None)

    def __call__(self, *keys: str):
        """``for key, value in data('train_mask', 'val_mask')``: the (name, tensor) pairs of the
        attributes present, as PyG's ``Data.__call__``."""
        for k in keys:
            v = getattr(self, k, None)
            if v is not None:
                yield k, v

    def local_index(self, index: torch.Tensor) -> torch.Tensor:
        """The owned rows among global node ids ``index`` (a split given as node ids, e.g.
        ``data.train_idx``), in the order given: ``out[part.local_index(idx)]`` are this rank's
        rows of ``out_whole_graph[idx]``."""
        pos = torch.full((self.num_nodes,), -1, dtype=torch.long, device=self.device)
        pos[self.node_ids] = torch.arange(self.num_owned, device=self.device)
        rows = pos[index.to(self.device, torch.long)]
        return rows[rows >= 0]

    # ------------------------------------------------------------------ rows
    def exchange(self, h: torch.Tensor) -> torch.Tensor:
        """``[h ; halo rows of h]`` for owned rows ``h [n_own, ...]`` (autograd)."""
        return self.exchanger(h)

    def column_ids(self) -> torch.Tensor:
        """``[n_own + n_halo]`` global node id of every local column."""
        return torch.cat([self.graph.owned, self.graph.halo]).to(self.device)

    def global_edge_index(self) -> torch.Tensor:
        """``[2, E_local]`` ``edge_index`` in global node ids (to look up edge attributes)."""
        return self.column_ids()[self.edge_index]

    def gather(self, h: torch.Tensor) -> torch.Tensor:
        """Every rank's owned rows ``h [n_own, ...]`` as one ``[N, ...]`` tensor in global id
        order, on every rank (for evaluation and tests; it holds the whole graph's rows)."""
        rows = comm.all_gather_rows(h.detach())
        ids = comm.all_gather_rows(self.node_ids)
        out = rows.new_empty((self.num_nodes,) + tuple(rows.shape[1:]))
        out[ids] = rows
        return out

    # ------------------------------------------------------------------ normalisation
    def gcn_edges(self, improved: bool = False, add_self_loops: bool = True, dtype=torch.float32):
        """``(edge_index, edge_weight)`` of PyG's ``gcn_norm`` over the whole graph, restricted to
        the owned destinations: ``w_uv = deg(u)^-1/2 deg(v)^-1/2`` with the *global* degrees (a
        halo column's in-edges live on its owner). Self-loops as ``add_remaining_self_loops``:
        an existing loop keeps weight 1, every other owned node gets one of the fill weight that
        PyG's ``gcn_norm`` uses on an unweighted ``edge_index`` (:func:`_pyg_fill`)."""
        key = (bool(improved), bool(add_self_loops), dtype)
        cache = self.__dict__.setdefault("_gcn_cache", {})
        if key not in cache:
            with untraced():  # a constant of the part (under torch.jit.trace: of the trace)
                cache[key] = self._gcn_edges(bool(improved), bool(add_self_loops), dtype)
        return cache[key]

    def _gcn_edges(self, improved: bool, add_self_loops: bool, dtype):
        src, dst = self.edge_index
        loop = self.col_self_loop.to(torch.float64)
        deg = self.graph.col_deg.to(self.device, torch.float64)
        if add_self_loops:
            fill = _pyg_fill(bool(improved))
            deg = deg + torch.where(self.col_self_loop, torch.ones_like(loop), torch.full_like(loop, fill))
            keep = src != dst
            own = torch.arange(self.num_owned, device=self.device)
            src, dst = torch.cat([src[keep], own]), torch.cat([dst[keep], own])
            w = torch.cat([torch.ones(int(keep.sum()), dtype=torch.float64, device=self.device),
                           torch.where(self.col_self_loop[:self.num_owned], 1.0, fill).to(torch.float64)])
        else:
            deg = deg + loop
            w = torch.ones(src.numel(), dtype=torch.float64, device=self.device)
        dinv = deg.pow(-0.5)
        dinv[torch.isinf(dinv)] = 0.0
        return torch.stack([src, dst]), (dinv[src] * w * dinv[dst]).to(dtype)


_FILL: dict[bool, float] = {}


def _pyg_fill(improved: bool) -> float:
    """The weight ``gcn_norm`` gives an added self-loop on an edge_index without edge weights,
    measured on a 2-node graph (PyG 2.8 uses 1 even with ``improved=True``: its fill value 2
    reaches weighted graphs only), so a part normalises as the installed PyG does."""
    if improved not in _FILL:
        ei, w = _pyg_gcn_norm(torch.tensor([[0], [1]]), None, 2, improved, True, dtype=torch.float64)
        loop = float(w[(ei[0] == 1) & (ei[1] == 1)][0])  # fill / (1 + fill)
        _FILL[improved] = loop / (1.0 - loop)
    return _FILL[improved]


def load_part(source, *, method: str = "metis", seed: int = 0, device: str = "auto",
              timeout_s: float = 300.0) -> Part:
    """This rank's :class:`Part` (joins the process group from ``torchrun``'s environment first;
    a single process gets a group of one).

    ``source``: a partition artifact directory (only this rank's part file is read), a dataset
    spec (``planetoid:ROOT/Cora``, ``sbm:...``; every rank loads the graph, rank 0 partitions it
    with ``method`` and broadcasts the assignment), a :class:`graphdist.data.Graph` or a PyG
    ``Data`` of the whole graph (``dataset[0]`` after its transforms; ``x``, ``y`` and the masks
    are kept, other attributes are not). The number of parts is the world size. From here on, a graphdist error that ends the script prints one
    line (once, not per rank) and exits with code 2 (:func:`~graphdist.gnn.pyg.train.install_excepthook`)."""
    from graphdist.data import Graph
    from graphdist.gnn.pyg.train import install_excepthook
    from graphdist.partition.setup import check_layout, load_local
    from graphdist.procgroup import init_distributed
    graph = source if isinstance(source, Graph) else None
    if graph is None and hasattr(source, "edge_index") and hasattr(source, "num_nodes"):  # a PyG Data
        extra = [k for k in ("edge_attr", "edge_weight", "adj_t") if getattr(source, k, None) is not None]
        if extra or getattr(source, "edge_index", None) is None:
            from graphdist.errors import ConfigError
            what = f"has {', '.join(extra)}, which a part does not carry yet" if extra else "has no edge_index"
            raise ConfigError(f"gd.load_part: the PyG Data {what}; pass a Data with edge_index (and x, y, masks)")
        graph = Graph.from_pyg(source, name=type(source).__name__)
    ctx = init_distributed(device, timeout_s)
    install_excepthook()  # (after torch's, which prefixes and buffers what the hook it wraps prints)
    if graph is not None:
        src = PartSource(spec=graph.name or "graph", method=method, seed=seed)
    elif Path(str(source)).is_dir():
        src = PartSource(partition=str(source))
    else:
        from graphdist.data import load_graph
        src = PartSource(spec=str(source), method=method, seed=seed)
        graph = load_graph(src.spec)  # what load_local would load, kept for the input's ids
    lg, info = load_local(src, ctx.rank, ctx.world_size, graph)
    check_layout(lg, "plain")
    part = Part.from_local_graph(lg, ctx.device, {**info, "input": src.partition or src.spec})
    if graph is not None and graph.node_ids is not None:
        from graphdist.ids import take
        part.input_ids = take(graph.node_ids, lg.owned)
    elif graph is None:
        from graphdist.partition.artifact import read_part_ids
        part.input_ids = read_part_ids(src.partition, ctx.rank)
    return part
