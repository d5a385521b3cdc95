"""The per-rank facts of a recommender job (:class:`RankData`): its own users' training and test
pairs, its own items' popularity, the owner of every item, and four global sizes, derived from the
rank's part and either the whole interaction log (:func:`rank_data`) or the part's own
interactions (:func:`rank_data_of_part`, from an artifact)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from graphdist import comm
from graphdist.errors import ArtifactError
from graphdist.partition.layout import LocalGraph
from graphdist.rec.sampling import TrainIndex, build_index, index_of_pairs

__all__ = ["RankData", "rank_data", "rank_data_of_part"]


@dataclass
class RankData:
    """Per-rank facts for sampling, routing and evaluation (nothing of size U x anything)."""

    owned: torch.Tensor
    """``[n_own]`` global node ids this rank owns: users < U <= items."""
    num_users: int
    """U."""
    item_owner: np.ndarray
    """``[I]`` int32: rank owning each item."""
    index: TrainIndex
    """Training items of the own users and the global sizes sampling needs."""
    test: np.ndarray
    """``[n, 2]`` test (user, item) pairs of the own users, sorted."""
    item_pop: np.ndarray
    """Training interactions of each own item (ascending item id): the popularity baseline."""

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

    def item_rows(self) -> np.ndarray:
        """Local rows of the owned items in ascending item id."""
        return self._perm[self._sorted >= self.num_users]


def rank_data_of_part(lg: LocalGraph, num_users: int, num_items: int, own_train: np.ndarray,
                      own_test: np.ndarray, num_samples: int, num_valid: int) -> RankData:
    """From this rank's own users' pairs and the global sizes. Collective (one all-gather of
    the owned item ids)."""
    U, I = int(num_users), int(num_items)
    if lg.num_global_nodes != U + I:
        raise ArtifactError(f"the partition has {lg.num_global_nodes} nodes but the data has {U} users + "
                            f"{I} items = {U + I}")
    owned = lg.owned.cpu().clone()  # not a view of the mapped part file, which then goes with the part
    n_own = owned.numel()
    items = (owned[owned >= U] - U).numpy()
    counts = comm.all_gather_object(int(items.size))
    all_items = comm.all_gather_rows(torch.from_numpy(items)).numpy()
    if all_items.size != I or not np.array_equal(np.sort(all_items), np.arange(I)):
        raise ArtifactError("the parts do not cover every item exactly once (parts from different artifacts?)")
    item_owner = np.empty(I, dtype=np.int32)
    item_owner[all_items] = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
    del all_items
    index = index_of_pairs(own_train, U, I, num_samples, num_valid)
    rd = RankData(owned, U, item_owner, index, np.array(own_test, dtype=np.int64).reshape(-1, 2),
                  np.zeros(0, dtype=np.float32))
    deg = lg.col_deg[:n_own].numpy()
    rd.item_pop = deg[rd.item_rows()].astype(np.float32)
    return rd


def rank_data(ratings, lg: LocalGraph) -> RankData:
    """From the whole interaction log (in-process). Collective."""
    U, I = ratings.num_users, ratings.num_items
    owned = lg.owned.cpu()
    own = np.zeros(U, dtype=bool)
    own[owned[owned < U].numpy()] = True
    train, test = ratings.train.numpy(), ratings.test.numpy()
    idx = build_index(train, U, I, own)
    test = test[own[test[:, 0]]] if test.size else test.reshape(0, 2)
    return rank_data_of_part(lg, U, I, train[own[train[:, 0]]], test, idx.num_samples, idx.num_valid)
