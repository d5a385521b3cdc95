"""Full-ranking evaluation, distributed: recall@K and NDCG@K over all items, training items
excluded (as the LightGCN reference's ``Test``).

The final embeddings of all items reach every rank through one all-gather; each rank scores its
own users (those with test items) against every item, in chunks of users, masks the user's
training items, takes the top K and adds up::

    recall@K = mean_u  hits_u / |test_u|
    NDCG@K   = mean_u  (sum_{r<=K} hit_r / log2(r + 1)) / (sum_{r<=min(K,|test_u|)} 1 / log2(r + 1))

The per-rank sums and user counts are all-reduced once. The same ranking with every item scored
by its number of training interactions is the popularity baseline.
"""
from __future__ import annotations

import numpy as np
import torch

from graphdist import comm

__all__ = ["RankingEval"]

_CELLS = 1 << 22
"""Scores held at once (users per chunk = this / items)."""


class RankingEval:
    """Evaluates the users this rank owns (``rd``: its :class:`~graphdist.rec.setup.RankData`);
    each call is collective: one all-gather of item rows, one all-reduce."""

    def __init__(self, ratings, rd, k: int, device="cpu"):
        self.num_users, self.num_items = ratings.num_users, ratings.num_items
        self.k = min(k, self.num_items)
        self.device = device
        U, I = self.num_users, self.num_items
        test = ratings.test.numpy()
        test = test[rd.own_users[test[:, 0]]] if test.size else test.reshape(0, 2)
        users, n_test = np.unique(test[:, 0], return_counts=True)
        train = ratings.train.numpy()
        train = train[np.isin(train[:, 0], users)]
        dev = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)  # noqa: E731
        self.users = dev(users)
        self.user_rows = dev(rd.local_rows(users))
        self.n_test = torch.from_numpy(n_test).to(device=device, dtype=torch.float64)
        self.test_keys = dev(np.sort(test[:, 0] * I + test[:, 1]))
        uidx = np.searchsorted(users, train[:, 0])
        self.train_ptr = np.concatenate([[0], np.cumsum(np.bincount(uidx, minlength=users.size))])
        self.train_user, self.train_item = dev(uidx), dev(train[:, 1])
        self.popularity_scores = torch.from_numpy(
            np.bincount(ratings.train[:, 1].numpy(), minlength=I).astype(np.float32)).to(device)
        self.item_rows = dev(rd.item_rows(U))
        # all-gathered rows arrive by rank, ascending id within a rank: the order of a stable sort
        self.item_ids = dev(np.argsort(rd.item_owner, kind="stable"))

    def item_table(self, final: torch.Tensor) -> torch.Tensor:
        """``[I, D]`` final embeddings of all items (one all-gather of the owned item rows)."""
        rows = comm.all_gather_rows(final[self.item_rows])
        out = rows.new_empty((self.num_items, rows.shape[1]))
        out[self.item_ids] = rows
        return out

    @torch.no_grad()
    def __call__(self, final: torch.Tensor) -> dict:
        """``{"recall", "ndcg", "users"}`` of the model whose owned final embeddings are ``final``."""
        items = self.item_table(final)
        return self._rank(lambda lo, hi: final[self.user_rows[lo:hi]] @ items.t())

    @torch.no_grad()
    def popularity(self) -> dict:
        """The same metrics when every user gets the items with the most training interactions."""
        return self._rank(lambda lo, hi: self.popularity_scores.expand(hi - lo, -1).clone())

    def _rank(self, scores) -> dict:
        I, K = self.num_items, self.k
        disc = 1.0 / torch.log2(torch.arange(K, device=self.device, dtype=torch.float64) + 2.0)
        idcg_at = torch.cumsum(disc, 0)
        acc = torch.zeros(3, dtype=torch.float64, device=self.device)
        step = max(1, _CELLS // max(I, 1))
        n = int(self.users.numel())
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            sc = scores(lo, hi)
            a, b = int(self.train_ptr[lo]), int(self.train_ptr[hi])
            sc.view(-1)[(self.train_user[a:b] - lo) * I + self.train_item[a:b]] = -float("inf")
            top = sc.topk(K, dim=1).indices
            key = self.users[lo:hi, None] * I + top
            at = torch.searchsorted(self.test_keys, key).clamp(max=max(self.test_keys.numel() - 1, 0))
            hit = (self.test_keys[at] == key).to(torch.float64)
            nt = self.n_test[lo:hi]
            acc[0] += (hit.sum(1) / nt).sum()
            acc[1] += ((hit * disc).sum(1) / idcg_at[(nt.clamp(max=K) - 1).long()]).sum()
            acc[2] += hi - lo
        comm.all_reduce_sum(acc)
        users = int(acc[2])
        return {"recall": float(acc[0]) / users if users else float("nan"),
                "ndcg": float(acc[1]) / users if users else float("nan"), "users": users}
