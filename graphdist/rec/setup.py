"""Where a rank's share of a recommender job comes from: the interactions (every rank reads the
spec: the test set and the training items of its users come from it), the rank's part of the
user-item graph (a partition artifact, or partitioned in-process: rank 0 partitions and
broadcasts), and the sampling / routing facts derived from them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from graphdist import comm
from graphdist.errors import ArtifactError, ConfigError
from graphdist.halo.plan import LocalGraph, build_plan
from graphdist.rec.sampling import TrainIndex, build_index

__all__ = ["load_local", "check_plan", "RankData", "rank_data"]


def load_local(cfg, rank: int, world_size: int):
    """``(ratings, LocalGraph of this rank, partition info for the report)``."""
    from graphdist.rec.data import load_ratings
    ratings = load_ratings(cfg.spec)
    graph = ratings.graph
    if cfg.partition:
        from graphdist.halo.artifact import check_artifact, read_meta
        from graphdist.halo.parts import load_part
        meta = read_meta(cfg.partition)
        k = int(meta["k"])
        if k != world_size:
            raise ArtifactError(f"partition {cfg.partition} has k={k} parts but the world size is "
                                f"{world_size} (start {k} workers, e.g. --nproc {k})")
        check_artifact(meta, graph, k=world_size)
        lg = load_part(cfg.partition, rank)
        if lg.fingerprint != meta["fingerprint"] or lg.world_size != k:
            raise ArtifactError(f"{cfg.partition}: part {rank} has fingerprint {lg.fingerprint} and k={lg.world_size}"
                                f" but meta.json says {meta['fingerprint']} and k={k}")
        info = {"method": meta.get("method"), "parts": k, "source": str(cfg.partition),
                "quality": meta.get("quality", {})}
        return ratings, lg, info
    from graphdist.halo.setup import partition_in_process
    k = cfg.parts if cfg.parts is not None else world_size
    if k != world_size:
        raise ConfigError(f"--parts {k} does not match the world size {world_size} "
                          f"(start {k} workers, e.g. --nproc {k})")
    comm.check_same(graph.fingerprint, f"graph fingerprint of {cfg.spec}")
    a = (partition_in_process(graph, k, cfg.method, cfg.seed) if rank == 0
         else torch.zeros(graph.num_nodes, dtype=torch.int64))
    comm.broadcast(a, 0)
    lg = build_plan(graph, a, rank, k)
    quality = {}
    if k > 1 and rank == 0:
        from partitioners.quality import quality as q
        quality = q(graph, a, k=k)
    info = {"method": cfg.method if k > 1 else "none", "parts": k, "source": "in-process", "quality": quality}
    return ratings, lg, info


def check_plan(lg: LocalGraph, halo: str = "plain") -> None:
    """Every rank holds a part of the same graph, and what rank s sends to r in ``halo`` mode is
    what r expects."""
    comm.check_same(lg.fingerprint, "graph fingerprint")
    lay = lg.exchange_layout(halo)
    sends = comm.all_gather_object(list(lay.send_counts))
    bad = [(s, lg.rank) for s in range(lg.world_size) if sends[s][lg.rank] != lay.recv_counts[s]]
    if bad:
        s, r = bad[0]
        raise ArtifactError(f"halo plans disagree: rank {s} sends {sends[s][r]} rows to rank {r}, which "
                            f"expects {lay.recv_counts[s]} (parts from different artifacts?)")


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
