"""PyG idioms that would draw or compute per rank, made graph-wide: splits and feature scaling.

    random_split(part, 20, 500, 1000, seed)   PyG's citation benchmark's random Planetoid split,
                                               drawn once over global node ids (the same masks
                                               on any number of ranks)
    normalize_features(part.x)                 ``T.NormalizeFeatures`` of the whole graph (its
                                               minimum is the whole graph's, not the part's)

A split drawn per rank anyway is said once, in one line, by the losses and ``gd.accuracy``
(:func:`check_split`).
"""
from __future__ import annotations

import weakref

import torch

from graphdist import comm
from graphdist.errors import ConfigError

__all__ = ["random_split", "normalize_features", "graph_wide", "is_graph_wide", "check_split"]

_GRAPH_WIDE: dict[int, "weakref.ref"] = {}
"""Masks graphdist made over the whole graph (a dataset's own split, :func:`random_split`), by id."""


def graph_wide(*masks) -> None:
    """Record ``masks`` as split over the whole graph (not drawn per rank)."""
    for m in masks:
        if torch.is_tensor(m):
            _GRAPH_WIDE[id(m)] = weakref.ref(m, lambda _, k=id(m): _GRAPH_WIDE.pop(k, None))


def is_graph_wide(mask) -> bool:
    ref = _GRAPH_WIDE.get(id(mask))
    return ref is not None and ref() is mask


_ALIKE: dict[int, tuple] = {}
"""Masks seen selecting as many nodes on every rank: id -> (weak reference, nodes per rank)."""


def check_split(mask, per_rank: torch.Tensor, rows: torch.Tensor) -> None:
    """``per_rank[r]``: the nodes ``mask`` selects on rank r; ``rows[r]``: rank r's owned rows. A
    split drawn on each part (``T.RandomNodeSplit``, PyG's ``random_planetoid_splits``) takes its
    numbers on every rank: each rank's mask selects as many nodes as the others', and k times the
    split's nodes in all. Once two masks not made graph-wide have selected equally many nodes on
    every rank (at k = 2 a split over the whole graph does so by chance for a mask about one time
    in 20-40; for two masks, about one in 10^3), say so once, in one line."""
    from graphdist.gnn.pyg.sync import say_once
    if mask is None or len(per_rank) < 2 or is_graph_wide(mask):
        return
    n = int(per_rank[0])
    if n == 0 or not bool((per_rank == n).all()) or bool((per_rank == rows).all()):
        return
    _ALIKE[id(mask)] = (weakref.ref(mask, lambda _, k=id(mask): _ALIKE.pop(k, None)), n)
    if len(_ALIKE) >= 2:
        counts = ", ".join(sorted({f"{c} on each" for _, c in _ALIKE.values()}, key=lambda t: int(t.split()[0])))
        k = len(per_rank)
        say_once("split", f"the masks given to gd.cross_entropy / gd.accuracy select as many nodes on each of the {k} "
                 f"ranks ({counts}): a split drawn on each part (T.RandomNodeSplit, PyG's random_planetoid_splits) "
                 f"draws per rank, {k} times the nodes; draw it once over the whole graph with "
                 "gd.random_split(part, ...)")


def random_split(part, num_train_per_class: int = 20, num_val: int = 500, num_test: int = 1000,
                 seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw a random split of the whole graph as PyG's citation benchmark does
    (``random_planetoid_splits``: ``num_train_per_class`` nodes of each class for training, then
    ``num_val`` and ``num_test`` of the rest, shuffled), by global node id from a generator seeded
    with ``seed``: every rank draws the same split, the same on any k. Sets and returns this
    rank's ``(train_mask, val_mask, test_mask)`` (owned rows). Labels below 0 are unlabelled and
    never drawn. A collective (it gathers the labels: N int64 values on every rank)."""
    if part.y is None:
        raise ConfigError("random_split: the part has no labels (part.y is None)")
    for name, v in (("num_train_per_class", num_train_per_class), ("num_val", num_val), ("num_test", num_test)):
        if int(v) < 0:
            raise ConfigError(f"random_split: {name} must be >= 0, got {v}")
    y = part.gather(part.y).cpu()
    g = torch.Generator().manual_seed(int(seed))
    train, rest = [], []
    for c in range(int(y.max()) + 1 if y.numel() else 0):
        idx = (y == c).nonzero().view(-1)
        idx = idx[torch.randperm(idx.numel(), generator=g)]
        train.append(idx[:num_train_per_class])
        rest.append(idx[num_train_per_class:])
    rest = torch.cat(rest) if rest else torch.zeros(0, dtype=torch.int64)
    if num_val + num_test > rest.numel():
        raise ConfigError(f"random_split: num_val + num_test = {num_val + num_test} but only {rest.numel()} "
                          f"labelled nodes are left after {num_train_per_class} per class for training")
    rest = rest[torch.randperm(rest.numel(), generator=g)]
    masks = []
    for ids in (torch.cat(train) if train else rest[:0], rest[:num_val], rest[num_val:num_val + num_test]):
        m = torch.zeros(part.num_nodes, dtype=torch.bool)
        m[ids] = True
        masks.append(m[part.node_ids.cpu()].to(part.device))
    part.train_mask, part.val_mask, part.test_mask = masks
    graph_wide(*masks)
    return tuple(masks)


def normalize_features(x: torch.Tensor) -> torch.Tensor:
    """PyG's ``T.NormalizeFeatures`` of the whole graph, for this rank's rows ``x [n_own, F]``:
    ``x - min`` (the whole graph's minimum, all-reduced), then each row divided by its sum
    (at least 1). Row-wise after the minimum, so equal on any number of ranks. A collective."""
    low = -comm.all_reduce_max(-(x.min().detach().reshape(1).double() if x.numel() else
                                 torch.full((1,), float("inf"), dtype=torch.float64, device=x.device)))
    x = x - low.to(x.dtype)
    return x / x.sum(dim=-1, keepdim=True).clamp(min=1.0)
