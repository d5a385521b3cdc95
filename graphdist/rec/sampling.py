"""BPR triples for one epoch, drawn so that k ranks sample exactly what one process samples,
and each rank draws only the triples of the users it owns.

Every draw is a counter-based hash of ``(seed, epoch, stream, global sample index)``
(:func:`graphdist.keyed.keyed_unit` under the key ``key32(seed, epoch, stream)``), not a step of a
stateful generator. One epoch (the LightGCN reference's sampler,
``UniformSample_original``, draws S users uniformly; this is its stratified form, with the same
expected number of triples per user and per epoch)::

    S = number of training pairs, U users, V of them valid (>= 1 training item, not all items)
    lambda = S / U,  C = floor(lambda) + 1,  nb = max(1, round(lambda * V / B)) batches
    every valid user u draws  c_u = floor(lambda + x_u) triples      x_u uniform (stream 0, index u)
    triple j < c_u of u has the global sample index  g = u * C + j, and
        batch_g = floor(nb * y_g)                                     (stream 1)
        pos_g   = uniform over u's training items                     (stream 2)
        neg_g   = uniform item, redrawn while it is a training item of u   (streams 3, 4, ...)

Nothing here depends on another user, so the owner of ``u`` draws u's triples alone (O(S/k)
work and memory per rank), and the union over the ranks is the one-process stream. Batches are
``nb`` random key ranges: their sizes vary around ``B`` (binomially); a rank returns its own
triples sorted by (batch, g) and its per-batch counts, whose sum over the ranks
(one all-reduce, :func:`graphdist.rec.model.schedule_epoch`) is each batch's global size (the loss
of a batch is divided by it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphdist.keyed import key32, keyed_below, keyed_unit

__all__ = ["TrainIndex", "EpochSamples", "build_index", "index_of_pairs", "sample_epoch"]

@dataclass
class TrainIndex:
    """What a rank needs to draw its samples: four global sizes and the training items of its
    own users (nothing of size U or S)."""

    num_users: int
    """U (all ranks)."""
    num_items: int
    """I (all ranks)."""
    num_samples: int
    """S: global number of training pairs (expected draws per epoch: S * V / U)."""
    num_valid: int
    """V: global number of users with at least one training item and not every item."""
    users: np.ndarray
    """Own users with training items (ascending global ids)."""
    indptr: np.ndarray
    """``[len(users) + 1]`` CSR over :attr:`users` of their training items."""
    items: np.ndarray
    """Training items of the own users, sorted per user."""
    keys: np.ndarray
    """Sorted ``user * I + item`` of the own training pairs (membership tests)."""

    @property
    def rate(self) -> float:
        """lambda = S / U: expected triples per valid user and epoch."""
        return self.num_samples / max(self.num_users, 1)

    def num_batches(self, batch_size: int) -> int:
        """Batches per epoch (the same at every rank and every epoch)."""
        return max(1, int(round(self.rate * self.num_valid / batch_size)))


def index_of_pairs(own: np.ndarray, num_users: int, num_items: int, num_samples: int,
                   num_valid: int) -> TrainIndex:
    """The index of a rank from its own users' training pairs ``own [n, 2]`` (sorted by
    (user, item)) and the global sizes."""
    own = np.asarray(own, dtype=np.int64).reshape(-1, 2)
    users, counts = np.unique(own[:, 0], return_counts=True)
    indptr = np.zeros(users.size + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return TrainIndex(int(num_users), int(num_items), int(num_samples), int(num_valid), users, indptr,
                      own[:, 1].copy(), own[:, 0] * num_items + own[:, 1])


def build_index(train: np.ndarray, num_users: int, num_items: int, own: np.ndarray) -> TrainIndex:
    """The index from all training pairs ``train [n, 2]`` (sorted by (user, item)) and ``own [U]``
    bool, the users of this rank (the in-process path, where every rank has the whole log)."""
    deg = np.bincount(train[:, 0], minlength=num_users)
    valid = int(((deg > 0) & (deg < num_items)).sum())
    return index_of_pairs(train[own[train[:, 0]]], num_users, num_items, int(train.shape[0]), valid)


@dataclass
class EpochSamples:
    """This rank's triples of one epoch, sorted by (batch, global sample index)."""

    user: np.ndarray
    """Global user id of each own sample."""
    pos: np.ndarray
    """Positive item id (0..I-1)."""
    neg: np.ndarray
    """Negative item id (0..I-1), never a training item of the user."""
    batch: np.ndarray
    """Batch number of each sample (non-decreasing)."""
    index: np.ndarray
    """Global sample index ``g`` of each sample."""
    counts: np.ndarray
    """``[num_batches]`` own samples per batch (all ranks summed: the global batch sizes)."""

    @property
    def num_batches(self) -> int:
        return int(self.counts.size)


def sample_epoch(index: TrainIndex, seed: int, epoch: int, batch_size: int,
                 max_batches: int | None = None) -> EpochSamples:
    """The triples of this rank's users for ``epoch`` (see the module docstring); with
    ``max_batches`` only those of the first batches (a step cap), the same triples."""
    lam = index.rate
    C = int(np.floor(lam)) + 1
    nb = index.num_batches(batch_size)
    deg = np.diff(index.indptr)
    valid = (deg > 0) & (deg < index.num_items)
    users, start, deg = index.users[valid], index.indptr[:-1][valid], deg[valid]
    c = np.floor(lam + keyed_unit(users, key32(seed, epoch, 0))).astype(np.int64)
    n = int(c.sum())
    first = np.repeat(np.cumsum(c) - c, c)
    j = np.arange(n, dtype=np.int64) - first
    which = np.repeat(np.arange(users.size), c)
    g = users[which] * C + j
    batch = np.minimum((keyed_unit(g, key32(seed, epoch, 1)) * nb).astype(np.int64), nb - 1)
    keep_nb = nb if max_batches is None else max(0, min(nb, int(max_batches)))
    if keep_nb < nb:
        sel = np.flatnonzero(batch < keep_nb)
        g, batch, which = g[sel], batch[sel], which[sel]
    order = np.lexsort((g, batch))
    g, batch, which = g[order], batch[order], which[order]
    us = users[which]
    pos = index.items[start[which] + keyed_below(g, key32(seed, epoch, 2), deg[which])]
    n_items = index.num_items
    neg = keyed_below(g, key32(seed, epoch, 3), n_items)
    todo = np.arange(g.size)
    stream = 4
    while todo.size:
        key = us[todo] * n_items + neg[todo]
        at = np.minimum(np.searchsorted(index.keys, key), max(index.keys.size - 1, 0))
        hit = index.keys[at] == key if index.keys.size else np.zeros(todo.size, dtype=bool)
        todo = todo[hit]
        if todo.size:
            neg[todo] = keyed_below(g[todo], key32(seed, epoch, stream), n_items)
            stream += 1
    counts = np.bincount(batch, minlength=keep_nb).astype(np.int64)
    return EpochSamples(us, pos, neg, batch, g, counts)
