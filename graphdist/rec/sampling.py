"""BPR triples for one epoch, drawn so that k ranks sample exactly what one process samples.

Every draw is a counter-based hash of ``(seed, epoch, stream, global sample index)``
(splitmix64), not a step of a stateful generator, so a rank can draw the triples of its own
users without drawing anyone else's. One epoch, as the LightGCN reference sampler
(``UniformSample_original``)::

    S = number of training pairs
    for s in 0..S-1:   u_s = uniform user                       (stream 0; every rank draws all S)
                       skip s when u_s has no training item (or every item)
    valid samples, in order of s, form batches of B (the last one smaller)
    the owner of u_s draws  pos_s = uniform over u_s's training items     (stream 1)
                            neg_s = uniform item, redrawn while it is a
                                    training item of u_s                  (streams 2, 3, ...)

A rank returns the samples of the users it owns with their batch number and every batch's
global size (the loss of a batch is divided by it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TrainIndex", "EpochSamples", "build_index", "sample_epoch", "uniform_below"]

_M = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix_int(z: int) -> int:
    z = (z + _GOLDEN) & _M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M
    return z ^ (z >> 31)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniform_below(seed: int, epoch: int, stream: int, index: np.ndarray, n) -> np.ndarray:
    """``int64`` draws uniform in ``[0, n)`` (``n`` a scalar or one bound per index), one per
    global ``index``; a pure function of its arguments."""
    key = _mix_int(_mix_int(_mix_int(seed & _M) ^ (epoch & _M)) ^ (stream & _M))
    z = np.uint64(key) + (np.asarray(index, dtype=np.int64).astype(np.uint64) + np.uint64(1)) * np.uint64(_GOLDEN)
    u = (_mix(z) >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)
    n = np.asarray(n, dtype=np.int64)
    return np.minimum((u * n).astype(np.int64), n - 1)


@dataclass
class TrainIndex:
    """What a rank needs to draw its samples: global facts (sizes, which users can be sampled)
    and the training items of its own users."""

    num_users: int
    """U (all ranks)."""
    num_items: int
    """I (all ranks)."""
    num_samples: int
    """S: draws per epoch = global number of training pairs."""
    valid: np.ndarray
    """``[U]`` bool: users with at least one training item and not every item."""
    own: np.ndarray
    """``[U]`` bool: users this rank owns."""
    indptr: np.ndarray
    """``[U+1]`` CSR over users of the own users' training items (other users: empty rows)."""
    items: np.ndarray
    """Training items of the own users, sorted per user."""
    keys: np.ndarray
    """Sorted ``user * I + item`` of the own training pairs (membership tests)."""


def build_index(train: np.ndarray, num_users: int, num_items: int, own: np.ndarray) -> TrainIndex:
    """``train [n, 2]`` (user, item) pairs sorted by (user, item), ``own [U]`` bool."""
    deg = np.bincount(train[:, 0], minlength=num_users)
    mine = own[train[:, 0]]
    t = train[mine]
    indptr = np.zeros(num_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(t[:, 0], minlength=num_users), out=indptr[1:])
    return TrainIndex(num_users, num_items, int(train.shape[0]), (deg > 0) & (deg < num_items), own.copy(),
                      indptr, t[:, 1].copy(), t[:, 0] * num_items + t[:, 1])


@dataclass
class EpochSamples:
    """This rank's triples of one epoch, in global sample order."""

    user: np.ndarray
    """Global user id of each own sample."""
    pos: np.ndarray
    """Positive item id (0..I-1)."""
    neg: np.ndarray
    """Negative item id (0..I-1), never a training item of the user."""
    batch: np.ndarray
    """Batch number of each sample (non-decreasing)."""
    batch_sizes: np.ndarray
    """``[num_batches]`` global size of every batch."""

    @property
    def num_batches(self) -> int:
        return int(self.batch_sizes.size)


def sample_epoch(index: TrainIndex, seed: int, epoch: int, batch_size: int) -> EpochSamples:
    """The triples of this rank's users for ``epoch`` (see the module docstring)."""
    s = np.arange(index.num_samples, dtype=np.int64)
    u = uniform_below(seed, epoch, 0, s, index.num_users)
    valid = index.valid[u]
    order = np.cumsum(valid) - 1
    n_valid = int(order[-1]) + 1 if order.size else 0
    nb = -(-n_valid // batch_size)
    sizes = np.full(nb, batch_size, dtype=np.int64)
    if nb:
        sizes[-1] = n_valid - (nb - 1) * batch_size
    sel = np.flatnonzero(valid & index.own[u])
    us = u[sel]
    start = index.indptr[us]
    pos = index.items[start + uniform_below(seed, epoch, 1, sel, index.indptr[us + 1] - start)]
    n_items = index.num_items
    neg = uniform_below(seed, epoch, 2, sel, n_items)
    todo = np.arange(sel.size)
    stream = 3
    while todo.size:
        key = us[todo] * n_items + neg[todo]
        at = np.minimum(np.searchsorted(index.keys, key), max(index.keys.size - 1, 0))
        hit = index.keys[at] == key if index.keys.size else np.zeros(todo.size, dtype=bool)
        todo = todo[hit]
        if todo.size:
            neg[todo] = uniform_below(seed, epoch, stream, sel[todo], n_items)
            stream += 1
    return EpochSamples(us, pos, neg, order[sel] // batch_size, sizes)
