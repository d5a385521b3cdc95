"""Full-ranking evaluation without the whole item table: recall@K and NDCG@K over all items,
training items excluded (as the LightGCN reference's ``Test``).

Ring of item shards. Rank r holds the final embeddings of its own items (ascending item id);
at step t = 0 it scores its own users against them, at step t = 1..k-1 it receives the items of
rank (r - t) mod k straight from their owner (one point-to-point shift,
:func:`graphdist.comm.shift_rows`; every rank sends its own rows to rank (r + t) mod k) and
scores them. Each rank keeps a running top-K per own user (values and item ids) and merges every
shard's top-K into it, so per rank it holds its own item rows, one shard in flight, and
``users/k x K`` of top lists: ``O(items/k x dim + users/k x K)``, never the whole table.

Ranking order: by score, descending; **ties broken by item id, the lowest id first** (within a
shard the exact top-K with that rule, across shards by the same rule while merging), so the
result does not depend on k, the partition or the order shards arrive. A user's training items
score ``-inf``. Then::

    recall@K = mean_u  hits_u / |test_u|
    NDCG@K   = mean_u  (sum_{r<=K} hit_r / log2(r + 1)) / (sum_{r<=min(K,|test_u|)} 1 / log2(r + 1))

over the users with test items (or a fixed random sample of them, ``eval_users``: the users
with the N smallest keyed hashes of their id, the same set at any k). The per-rank sums and
user counts are all-reduced once. The same ranking with every item scored by its number of
training interactions is the popularity baseline.
"""
from __future__ import annotations

import numpy as np
import torch

from graphdist import comm
from graphdist.keyed import key32, keyed_unit

__all__ = ["RankingEval", "RingTopK", "topk_lowest_id", "merge_topk", "select_eval_users"]

_CELLS = 1 << 22
"""Scores held at once (users per chunk = this / items of the shard)."""


def topk_lowest_id(sc: torch.Tensor, ids: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-``k`` of every row of ``sc [n, m]`` whose columns are items ``ids [m]``
    (ascending): ``(values, item ids)``, equal scores ordered by the lowest id. ``topk`` picks
    among equal values at the cut arbitrarily; rows where such a tie crosses the cut are
    stable-sorted instead."""
    kk = min(k, sc.shape[1])
    v, j = sc.topk(kk, dim=1, sorted=False)
    if kk:
        kth = v.min(1, keepdim=True).values
        ties = torch.nonzero((sc >= kth).sum(1) > kk).flatten()
        if ties.numel():
            j[ties] = torch.sort(sc[ties], dim=1, descending=True, stable=True).indices[:, :kk]
        v = sc.gather(1, j)
    return _order(v, ids[j])


def _order(v: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows sorted by value descending, then id ascending."""
    o = torch.sort(ids, dim=1, stable=True).indices
    v, ids = v.gather(1, o), ids.gather(1, o)
    o = torch.sort(v, dim=1, descending=True, stable=True).indices
    return v.gather(1, o), ids.gather(1, o)


def merge_topk(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor], k: int):
    """The top-``k`` (value desc, id asc) of two disjoint candidate lists of the same rows."""
    v, ids = _order(torch.cat([a[0], b[0]], 1), torch.cat([a[1], b[1]], 1))
    return v[:, :k], ids[:, :k]


def select_eval_users(users: np.ndarray, n: int | None, seed: int) -> np.ndarray:
    """Of this rank's evaluable ``users``, those in the global sample of ``n`` users (the ``n``
    smallest keyed hashes of the user id over all ranks; ties cannot occur: 53-bit hashes
    ordered with the id). Collective (one small all-gather) when ``n`` is given."""
    if n is None:
        return np.ones(users.size, dtype=bool)
    h = keyed_unit(users, key32(seed, 0x5E1EC7, 0))
    order = np.lexsort((users, h))[:n]
    cands = comm.all_gather_object([(float(h[i]), int(users[i])) for i in order])
    pool = sorted(c for part in cands for c in part)
    if not pool or n <= 0:
        return np.zeros(users.size, dtype=bool)
    cut = pool[min(n, len(pool)) - 1]
    return np.array([(x, int(u)) <= cut for x, u in zip(h.tolist(), users.tolist())], dtype=bool)


class RingTopK:
    """The exact top-``k`` items of each of this rank's ``users`` (global user ids, ascending),
    their training items excluded, with the item shards passed around the ring (the module
    docstring); ``rd``: the rank's :class:`~graphdist.rec.rank.RankData`. :meth:`top` is
    collective: k - 1 shifts of item rows.

    ``stats`` records the item-row buffers held during the last call (measured from the
    tensors: ``own_item_rows``, ``max_shard_rows``, ``peak_item_rows`` = the most rows of item
    embeddings alive at once, ``shifts``)."""

    def __init__(self, rd, users: np.ndarray, k: int, device="cpu"):
        self.num_items = int(rd.item_owner.size)
        self.k = min(k, self.num_items)
        self.device = device
        self.rank, self.world = comm.world()
        users = np.asarray(users, dtype=np.int64)
        dev = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)  # noqa: E731
        self.users = dev(users)
        self.user_rows = dev(rd.local_rows(users))
        # training items of the users, grouped by the shard (owner) of the item
        idx = rd.index
        at = np.searchsorted(idx.users, users)
        at = np.minimum(at, max(idx.users.size - 1, 0))
        has = idx.users[at] == users if idx.users.size else np.zeros(users.size, dtype=bool)
        lo, hi = idx.indptr[at], np.where(has, idx.indptr[np.minimum(at + 1, idx.indptr.size - 1)], idx.indptr[at])
        cnt = hi - lo
        uidx = np.repeat(np.arange(users.size), cnt)
        item = idx.items[np.repeat(lo, cnt) + np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt)]
        owner = rd.item_owner[item].astype(np.int64)
        o = np.lexsort((item, uidx, owner))
        uidx, item, owner = uidx[o], item[o], owner[o]
        cut = np.searchsorted(owner, np.arange(self.world + 1))
        self.shard_ids = [np.flatnonzero(rd.item_owner == s) for s in range(self.world)]
        self.train = []  # per shard: (user index, column in the shard) of the training pairs
        for s in range(self.world):
            a, b = cut[s], cut[s + 1]
            self.train.append((uidx[a:b], np.searchsorted(self.shard_ids[s], item[a:b])))
        self.item_rows = dev(rd.item_rows())
        self.stats: dict = {}

    @torch.no_grad()
    def top_of(self, final: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores [n, K], item ids [n, K])`` of the model whose owned final embeddings are
        ``final`` (score = dot product; a user with fewer than K items left has ``-inf`` at
        the end of its list)."""
        mine = final.index_select(0, self.item_rows)
        q = final.index_select(0, self.user_rows)
        return self.top(mine, lambda lo, hi, shard: q[lo:hi] @ shard.t())

    def top(self, mine: torch.Tensor, scores) -> tuple[torch.Tensor, torch.Tensor]:
        """The ring: ``scores(lo, hi, shard)`` gives users ``lo:hi`` against a shard's rows."""
        K, n, dev = self.k, int(self.users.numel()), self.device
        top = (torch.empty((n, 0), device=dev), torch.empty((n, 0), dtype=torch.int64, device=dev))
        st = {"own_item_rows": int(mine.shape[0]), "max_shard_rows": 0, "peak_item_rows": int(mine.shape[0]),
              "shifts": 0}
        for t in range(self.world):
            src = (self.rank - t) % self.world
            if t == 0:
                shard = mine
            else:
                shard = mine.new_empty((self.shard_ids[src].size, mine.shape[1]))
                comm.shift_rows(mine, (self.rank + t) % self.world, shard, src)
                st["shifts"] += 1
                st["max_shard_rows"] = max(st["max_shard_rows"], int(shard.shape[0]))
                st["peak_item_rows"] = max(st["peak_item_rows"], int(mine.shape[0] + shard.shape[0]))
            top = self._score_shard(top, shard, src, scores, n, K)
            del shard
        self.stats = st
        return top

    def _score_shard(self, top, shard, src, scores, n, K):
        ids_np = self.shard_ids[src]
        m = ids_np.size
        if m == 0:
            return top
        ids = torch.from_numpy(ids_np).to(self.device)
        tu, tc = self.train[src]
        step = max(1, _CELLS // m)
        tcut = np.searchsorted(tu, np.arange(0, n + step, step))
        vals, out = [], []
        for c, lo in enumerate(range(0, n, step)):
            hi = min(n, lo + step)
            sc = scores(lo, hi, shard)
            a, b = tcut[c], tcut[c + 1]
            if b > a:
                flat = torch.from_numpy((tu[a:b] - lo) * m + tc[a:b]).to(self.device)
                sc.view(-1)[flat] = -float("inf")
            v, i = merge_topk((top[0][lo:hi], top[1][lo:hi]), topk_lowest_id(sc, ids, K), K)
            vals.append(v)
            out.append(i)
        if not vals:
            return top
        return torch.cat(vals), torch.cat(out)


class RankingEval(RingTopK):
    """Evaluates the users this rank owns that have test items (``rd``: its
    :class:`~graphdist.rec.rank.RankData`); each call is collective: k - 1 shifts of item
    rows (:class:`RingTopK`), one all-reduce."""

    def __init__(self, rd, k: int, device="cpu", eval_users: int | None = None, seed: int = 0):
        test = rd.test
        users, n_test = np.unique(test[:, 0], return_counts=True)
        keep = select_eval_users(users, eval_users, seed)
        users, n_test = users[keep], n_test[keep]
        super().__init__(rd, users, k, device)
        I = self.num_items
        test = test[np.isin(test[:, 0], users)]
        self.n_test = torch.from_numpy(n_test).to(device=device, dtype=torch.float64)
        self.test_keys = torch.from_numpy(np.ascontiguousarray(np.sort(test[:, 0] * I + test[:, 1]),
                                                               dtype=np.int64)).to(device)
        self.popularity_own = torch.as_tensor(rd.item_pop, dtype=torch.float32).to(device).reshape(-1, 1)

    @torch.no_grad()
    def __call__(self, final: torch.Tensor) -> dict:
        """``{"recall", "ndcg", "users"}`` of the model whose owned final embeddings are ``final``."""
        return self._metrics(self.top_of(final)[1], int(self.users.numel()), self.k)

    @torch.no_grad()
    def popularity(self) -> dict:
        """The same metrics when every user gets the items with the most training interactions."""
        top = self.top(self.popularity_own, lambda lo, hi, shard: shard.t().expand(hi - lo, -1).clone())
        return self._metrics(top[1], int(self.users.numel()), self.k)

    def _metrics(self, top: torch.Tensor, n: int, K: int) -> dict:
        I, dev = self.num_items, self.device
        disc = 1.0 / torch.log2(torch.arange(K, device=dev, dtype=torch.float64) + 2.0)
        idcg_at = torch.cumsum(disc, 0)
        acc = torch.zeros(3, dtype=torch.float64, device=dev)
        if n:
            key = self.users[:, None] * I + top
            at = torch.searchsorted(self.test_keys, key).clamp(max=max(self.test_keys.numel() - 1, 0))
            hit = (self.test_keys[at] == key).to(torch.float64)
            nt = self.n_test
            acc[0] = (hit.sum(1) / nt).sum()
            acc[1] = ((hit * disc[:hit.shape[1]]).sum(1) / idcg_at[(nt.clamp(max=K) - 1).long()]).sum()
            acc[2] = n
        comm.all_reduce_sum(acc)
        users = int(acc[2])
        return {"recall": float(acc[0]) / users if users else float("nan"),
                "ndcg": float(acc[1]) / users if users else float("nan"), "users": users}
