"""``rec-synth:``: interactions drawn from a planted low-rank preference model.

Every user ``u`` and item ``i`` get hidden factors ``p_u, q_i ~ N(0, I_dim)``; item ``i`` also
gets a popularity ``b_i = popularity * (-log rank_i)`` (ranks a random permutation, so a few
items are much more popular than the rest). User ``u`` interacts with ``n_u`` distinct items
drawn without replacement with probability proportional to::

    exp(signal * p_u . q_i / sqrt(dim) + b_i)

(Gumbel top-k). ``n_u`` is log-normal around ``avg_items`` (at least 2, at most items/2). The
``test`` fraction of each user's interactions is held out at random. With the default
``signal`` the preference term dominates: ranking items by popularity recovers a little of
the test set, a model that learns the user-item structure recovers much more.

    rec-synth:users=2000,items=1000,avg_items=20,dim=8,signal=3,popularity=1,test=0.2,seed=0
"""
from __future__ import annotations

import math
import sys

import numpy as np
import torch

from graphdist.errors import SpecError
from graphdist.rec.data import Ratings, make_ratings, split_per_user

__all__ = ["rec_synth"]

_CELLS = 1 << 22
"""Scores computed per chunk of users (bounds memory: 16 MiB of float32 per temporary)."""
_BAR_CELLS = 1 << 32
"""A progress bar (on a terminal) from this many scores on: about 2 minutes here, at roughly
2e-8 s per score on one 2-core box (1M users x 200k items: about 70 minutes)."""


def rec_synth(*, users: int = 2000, items: int = 1000, avg_items: float = 20.0, dim: int = 8,
              signal: float = 3.0, popularity: float = 1.0, test: float = 0.2, seed: int = 0) -> Ratings:
    """Generate the interactions (deterministic for a given seed)."""
    if users < 1 or items < 4:
        raise SpecError(f"rec-synth: needs users >= 1 and items >= 4, got users={users}, items={items}")
    if not 2 <= avg_items <= items / 2:
        raise SpecError(f"rec-synth: avg_items={avg_items} must lie in [2, items/2 = {items / 2:g}]")
    if dim < 1 or not 0.0 < test < 1.0:
        raise SpecError(f"rec-synth: needs dim >= 1 and 0 < test < 1, got dim={dim}, test={test}")
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(users, dim, generator=g)
    q = torch.randn(items, dim, generator=g) * (signal / math.sqrt(dim))
    rank = torch.randperm(items, generator=g).to(torch.float32) + 1.0
    bias = -popularity * torch.log(rank)
    n_u = torch.exp(math.log(avg_items) - 0.125 + 0.5 * torch.randn(users, generator=g))
    n_u = n_u.round().clamp(2, items // 2).to(torch.int64)
    kmax = int(n_u.max())
    chunk = max(1, _CELLS // items)
    # the output is allocated once: small arrays kept between the chunks' large temporaries
    # would fragment the heap (glibc) and grow the process by a chunk per iteration
    pairs = np.empty((int(n_u.sum()), 2), dtype=np.int64)
    pairs[:, 0] = np.repeat(np.arange(users), n_u.numpy())
    at = 0
    bar = _bar(users, items)
    for s in range(0, users, chunk):
        e = min(users, s + chunk)
        score = p[s:e] @ q.t() + bias
        score -= torch.log(-torch.log(torch.rand(score.shape, generator=g).clamp_(1e-12, 1.0 - 1e-7)))
        top = score.topk(kmax, dim=1).indices
        keep = torch.arange(kmax)[None, :] < n_u[s:e, None]
        n = int(n_u[s:e].sum())
        pairs[at:at + n, 1] = top[keep].numpy()
        at += n
        if bar is not None:
            bar.update(e - s)
    if bar is not None:
        bar.close()
    key = torch.rand(pairs.shape[0], generator=g, dtype=torch.float64).numpy()
    is_test = split_per_user(pairs[:, 0], test, key)
    meta = {"source": "rec-synth", "split": "random", "signal": signal, "popularity": popularity, "dim": dim}
    return make_ratings(pairs[~is_test], pairs[is_test], users, items, meta)


def _bar(users: int, items: int):
    """A tqdm bar over the users on stderr when the scores are many and stderr is a terminal."""
    if users * items < _BAR_CELLS or not sys.stderr.isatty():
        return None
    from tqdm import tqdm
    return tqdm(total=users, desc="rec-synth", unit="user", file=sys.stderr, dynamic_ncols=True)
