"""``graphdist recommend --exclude FILE``: interactions to leave out of the lists besides the
training's (the ones since training, items a user already bought elsewhere).

    FILE   user item[ rating[ time]] per line as a ``ratings:`` log (text or Parquet), the
           ids as the ratings file writes them

Each rank keeps the pairs of its own users and asks the ring for ``K + m`` items per user, where
``m`` is the most pairs any user of the job has (so a user's list still has K items once its
pairs are left out); the items are then matched by id and the first K left are written. Pairs
of a user recommended for by no rank (not in the data, or not in ``--users``) leave out nothing
and are counted (``exclude/unmatched_pairs`` in the report; an item the data does not have is in
no list anyway).

    [ ring top K + m of user u | drop u's excluded ids | keep the first K ]
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from graphdist import comm

__all__ = ["Exclusions", "read_exclusions"]


class Exclusions:
    """The excluded item ids of this rank's users (``by_user[i]``: a set of ``str`` ids of user
    ``i`` of the rank's list), ``most``: the most of any user of the job (agreed by all ranks)."""

    def __init__(self, by_user: dict[int, set[str]], most: int, pairs: int, unmatched: int):
        self.by_user, self.most, self.pairs, self.unmatched = by_user, most, pairs, unmatched

    def drop(self, valid: np.ndarray, item_ids: np.ndarray, k: int):
        """``(valid, item_ids)`` with each user's excluded items left out and at most ``k`` per
        user kept (``valid``: ``[n, K + m]``, the ring's finite scores; ``item_ids``: the ids of
        its valid entries, row by row)."""
        if not self.by_user:
            keep = valid & (np.cumsum(valid, 1) <= k)
            return keep, item_ids[keep[valid]]
        ids = np.empty(valid.shape, dtype=object)
        ids[valid] = item_ids.astype(str)
        out = valid.copy()
        for i, items in self.by_user.items():
            row = out[i]
            row &= ~np.isin(ids[i], list(items))
        out &= np.cumsum(out, 1) <= k
        return out, item_ids[out[valid]]


def read_exclusions(path: str | None, uid: np.ndarray) -> Exclusions:
    """The pairs of ``path`` whose user is one of this rank's users (ids ``uid``, in the rank's
    order); collective (the most pairs of a user, the counts)."""
    if not path:
        return Exclusions({}, 0, 0, 0)
    from graphdist.rec.data import read_interactions
    u, i, _ = read_interactions(Path(path), 0.0, False)
    u, i = u.astype(str), i.astype(str)
    mine = np.asarray(uid).astype(str)
    order = np.argsort(mine)
    at = np.minimum(np.searchsorted(mine[order], u), max(mine.size - 1, 0))
    hit = (mine[order][at] == u) if mine.size else np.zeros(u.size, dtype=bool)
    by_user: dict[int, set[str]] = {}
    for row, item in zip(order[at[hit]], i[hit]):
        by_user.setdefault(int(row), set()).add(item)
    most = max((len(s) for s in by_user.values()), default=0)
    counts = comm.all_gather_json([most, int(hit.sum())])
    pairs = sum(c[1] for c in counts)
    return Exclusions(by_user, max(c[0] for c in counts), pairs, int(u.size) - pairs)
