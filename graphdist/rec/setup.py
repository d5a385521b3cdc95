"""Where a rank's share of a recommender job comes from: the interactions (every rank reads the
spec: the test set and the training items of its users come from it), the rank's part of the
user-item graph (a partition artifact, or partitioned in-process: rank 0 partitions and
broadcasts), and the sampling / routing facts derived from them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from graphdist import comm
from graphdist.errors import ArtifactError
from graphdist.halo.plan import LocalGraph
from graphdist.rec.sampling import TrainIndex, build_index

__all__ = ["load_local", "RankData", "rank_data"]


def load_local(cfg, rank: int, world_size: int):
    """``(ratings, LocalGraph of this rank, partition info for the report)``: the user-item graph
    of the interactions, partitioned as a graph workload's (:func:`graphdist.halo.setup.load_local`)."""
    from graphdist.halo.setup import load_local as load_part_of
    from graphdist.rec.data import load_ratings
    ratings = load_ratings(cfg.spec)
    lg, info = load_part_of(cfg, rank, world_size, graph=ratings.graph)
    return ratings, lg, info


@dataclass
class RankData:
    """Per-rank facts for sampling and routing."""

    owned: torch.Tensor
    """``[n_own]`` global node ids this rank owns (ascending): users < U <= items."""
    own_users: np.ndarray
    """``[U]`` bool: users this rank owns (it samples their triples and evaluates them)."""
    item_owner: np.ndarray
    """``[I]`` rank owning each item."""
    index: TrainIndex
    """Training items of the own users, and which users can be sampled."""

    def __post_init__(self):
        ids = self.owned.numpy()
        self._perm = np.argsort(ids, kind="stable")
        self._sorted = ids[self._perm]

    def local_rows(self, ids: np.ndarray) -> np.ndarray:
        """Local rows of owned global ids ``ids`` (the owned order need not be ascending)."""
        at = np.minimum(np.searchsorted(self._sorted, ids), max(self._sorted.size - 1, 0))
        if ids.size and not np.array_equal(self._sorted[at], ids):
            raise ArtifactError("a node this rank does not own was asked for (the ranks' plans disagree)")
        return self._perm[at]

    def item_rows(self, num_users: int) -> np.ndarray:
        """Local rows of the owned items in ascending item id."""
        return self._perm[self._sorted >= num_users]


def rank_data(ratings, lg: LocalGraph) -> RankData:
    """Collective (one all-gather of the owned item ids)."""
    U, I = ratings.num_users, ratings.num_items
    if lg.num_global_nodes != U + I:
        raise ArtifactError(f"the partition has {lg.num_global_nodes} nodes but the data has {U} users + "
                            f"{I} items = {U + I}")
    owned = lg.owned.cpu()
    own_users = np.zeros(U, dtype=bool)
    own_users[owned[owned < U].numpy()] = True
    items = (owned[owned >= U] - U).numpy()
    counts = comm.all_gather_object(int(items.size))
    all_items = comm.all_gather_rows(torch.from_numpy(items)).numpy()
    item_owner = np.repeat(np.arange(len(counts)), counts)[np.argsort(all_items, kind="stable")]
    if all_items.size != I or not np.array_equal(np.sort(all_items), np.arange(I)):
        raise ArtifactError("the parts do not cover every item exactly once (parts from different artifacts?)")
    index = build_index(ratings.train.numpy(), U, I, own_users)
    return RankData(owned, own_users, item_owner, index)
