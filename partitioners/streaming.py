"""Baselines (``random``, ``block``) and vectorised streaming partitioners (``ldg``, ``fennel``).

Streaming, batched: nodes arrive in a seeded random order, ``batch_size`` at a time (default
N/128). Every node of a batch is scored against the state *before* the batch (parts of its
already-placed in-neighbours - all neighbours for the usual symmetrised graphs -, part loads), then capacities are repaired: per part, the batch's nodes
that chose it are accepted in score order while every balance constraint stays under its cap;
rejected nodes fall back to their next-best part (at most ``k`` rounds)::

    order = [ v17 v3 v42 ... | v8 v1 ... | ... ]      batches of B nodes
    counts[b, p] = |N(v_b) ∩ part p|                  (bincount over the batch's neighbours)
    ldg:    score = counts * (1 - load_p / cap_p)
    fennel: score = counts - alpha * gamma * load_p ** (gamma - 1)

Restreaming (``passes > 1``) reruns the stream with neighbours' parts from the previous pass
(Nishimura & Ugander, KDD 2013): loads start from zero again, counts see every node.
"""
from __future__ import annotations

import numpy as np

from partitioners.common import Weights, gather_rows, group_cumsum, in_csr

__all__ = ["random_partition", "block_partition", "stream_partition"]


def random_partition(n: int, k: int, seed: int) -> np.ndarray:
    """Hash baseline: a seeded random permutation dealt round-robin (exactly balanced nodes)."""
    rng = np.random.default_rng(seed)
    a = np.empty(n, dtype=np.int64)
    a[rng.permutation(n)] = np.arange(n, dtype=np.int64) % k
    return a


def block_partition(n: int, k: int, weights: Weights) -> np.ndarray:
    """Contiguous id ranges cut where the cumulative (combined) weight crosses ``t * total / k``."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    w = sum(wc / max(float(wc.sum()), 1e-12) for wc in weights.w) / len(weights.w)
    if float(w.sum()) <= 0:
        return np.arange(n, dtype=np.int64) * k // n
    cum = np.cumsum(w) - w / 2  # centre of each node's weight interval
    return np.minimum((cum / float(w.sum()) * k).astype(np.int64), k - 1)


def assign_with_caps(score: np.ndarray, wb: np.ndarray, load: np.ndarray,
                     caps: np.ndarray) -> np.ndarray:
    """Pick each row's best-scoring part subject to capacities (``load`` updated in place).

    ``score [B, k]``, ``wb [C, B]`` node weights, ``load [C, k]``, ``caps [C]``. Rows that fit
    nowhere go to the part with the lowest relative load."""
    b, k = score.shape
    out = np.full(b, -1, dtype=np.int64)
    score = score.copy()
    rem = np.arange(b)
    for _ in range(k):
        if rem.size == 0:
            break
        s = score[rem]
        choice = s.argmax(1)
        order = np.lexsort((-s[np.arange(rem.size), choice], choice))
        ch = choice[order]
        ok = np.ones(rem.size, dtype=bool)
        for c in range(wb.shape[0]):
            cum = group_cumsum(ch, wb[c, rem[order]])
            ok &= load[c, ch] + cum <= caps[c]
        acc = rem[order[ok]]
        out[acc] = ch[ok]
        for c in range(wb.shape[0]):
            load[c] += np.bincount(ch[ok], weights=wb[c, acc], minlength=k)
        rej = order[~ok]
        score[rem[rej], ch[~ok]] = -np.inf
        rem = rem[rej]
        if np.isneginf(score[rem]).all(1).all() if rem.size else True:
            break
    for v in rem:  # overflow: rare (caps nearly full); lowest relative load after the move
        p = int(np.argmin(((load + wb[:, v:v + 1]) / caps[:, None]).max(0)))
        out[v] = p
        load[:, p] += wb[:, v]
    return out


def stream_partition(graph, k: int, weights: Weights, *, seed: int = 0, method: str = "ldg",
                     passes: int = 1, batch_size: int | None = None, gamma: float = 1.5,
                     init: np.ndarray | None = None) -> np.ndarray:
    """Batched streaming partition (``ldg`` or ``fennel``); ``passes`` >= 1 stream passes."""
    n = int(graph.num_nodes)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng(seed)
    indptr, indices = in_csr(graph)
    order = rng.permutation(n)
    pptr, pind = gather_rows(indptr, indices, order)  # rows in stream order (narrow ids, in blocks)
    bs = int(batch_size or max(32, n // 128))
    caps = np.asarray(weights.caps, dtype=np.float64)
    w = np.stack(weights.w)  # [C, N]
    m_undirected = max(indices.size / 2, 1.0)
    alpha = np.sqrt(k) * m_undirected / n ** 1.5
    a = np.full(n, -1, dtype=np.int64) if init is None else np.asarray(init, dtype=np.int64).copy()
    noise = rng.random((min(bs, n), k)) * 1e-6  # deterministic tie-breaking
    for _ in range(max(1, passes)):
        load = np.zeros((w.shape[0], k))
        for b0 in range(0, n, bs):
            b1 = min(n, b0 + bs)
            rows = order[b0:b1]
            nb = pind[pptr[b0]:pptr[b1]]
            rid = np.repeat(np.arange(b1 - b0), np.diff(pptr[b0:b1 + 1]))
            pn = a[nb]
            ok = pn >= 0
            counts = np.bincount(rid[ok] * k + pn[ok], minlength=(b1 - b0) * k)
            counts = counts.reshape(b1 - b0, k).astype(np.float64)
            frac = (load / caps[:, None]).max(0)  # [k] relative fill in the tightest constraint
            if method == "ldg":
                score = (counts + 1e-3) * (1.0 - frac)
            else:
                score = counts - alpha * gamma * (frac * n / k) ** (gamma - 1.0)
            score += noise[: b1 - b0]
            a[rows] = assign_with_caps(score, w[:, rows], load, caps)
    if (load > caps[:, None] + 1e-9).any():  # late heavy nodes overflowed: repair the caps
        from partitioners.refine import VolumeRefiner
        VolumeRefiner(graph, k, weights).rebalance(a)
    return a
