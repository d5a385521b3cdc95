"""PyG idioms that would draw or compute per rank, made graph-wide: splits and feature scaling.

    random_split(part, 20, 500, 1000, seed)   PyG's citation benchmark's random Planetoid split,
                                               drawn once over global node ids (the same masks
                                               on any number of ranks)
    normalize_features(part.x)                 ``T.NormalizeFeatures`` of the whole graph (its
                                               minimum is the whole graph's, not the part's)

A split drawn per rank anyway is said once, in one line, by the losses and ``gd.accuracy``
(:mod:`graphdist.gnn.pyg.splits`).
"""
from __future__ import annotations

import torch

from graphdist import comm
from graphdist.errors import ConfigError

__all__ = ["random_split", "normalize_features"]

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
    from graphdist.gnn.pyg.splits import graph_wide
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
