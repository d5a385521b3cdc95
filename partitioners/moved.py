"""Refinement on the rows moved with pre/post aggregation (``moved_rows``), not the plain halo.

``moved_rows`` (a minimum vertex cover per ordered part pair, :mod:`partitioners.cover`) is not
a sum over nets, so it has no exact per-move gain. With a *role* per node it is bounded by one:
a node with role ``raw`` covers its outgoing cut edges by being sent raw (its column net
``{u} + out(u)`` costs one row per remote part it feeds); every other cut edge ``u -> v`` is
covered by a partial sum at ``v`` (the row net ``{v} + {pre in-neighbours of v}`` costs one row
per remote part among them)::

    cost(a) = sum_{u raw} (lambda(colnet u) - 1) + sum_v (lambda(rownet v) - 1)  >=  moved_rows(a)

That is a hypergraph connectivity objective, which :class:`partitioners.refine.VolumeRefiner`
refines exactly. :func:`refine_moved` alternates: take the roles from the current partition's
cover (a node is ``raw`` unless most of its cut pairs are pre-aggregated), refine the bound,
recompute the true cover; it keeps a result only when ``moved_rows`` drops (ties: the smaller
busiest receiver, ``moved_max_recv``).

The bound is loose (20% above the cover on gnutella), so :func:`polish_moved` then scores
single-node moves by the exact change of the cover itself: the candidates the bound ranks
best are each tried and kept only when the maximum matching (= ``moved_rows``, König) shrinks
and every cap holds. One try recomputes the matching of the whole partition (4 ms on facebook,
19 ms on gnutella), so it runs for a budget of tries.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from partitioners.common import Weights, in_csr

__all__ = ["roles", "moved_pins", "refine_moved", "moved_key", "polish_moved"]


def roles(graph, a: np.ndarray, k: int) -> np.ndarray:
    """``[N]`` bool: True = raw (sent as a row), False = pre (summed at its destinations), from
    the König cover of ``a``; nodes without cut edges are raw."""
    from partitioners.cover import halo_cover
    n = int(graph.num_nodes)
    c = halo_cover(graph, a, k)
    pairs = np.bincount(c.raw_node, minlength=n)
    raw = np.bincount(c.raw_node[c.raw_cover], minlength=n)
    return ~((pairs > 0) & (2 * raw < pairs))


def moved_pins(graph, raw: np.ndarray) -> sp.csr_matrix:
    """Binary nodes x nets pin matrix ``[(A + I)[:, raw] | diag(~raw) A^T + I]`` (column nets of
    raw nodes, then the row net of every node)."""
    n = int(graph.num_nodes)
    indptr, indices = in_csr(graph)
    a = sp.csr_matrix((np.ones(indices.size, dtype=np.int8), indices, indptr), shape=(n, n))
    eye = sp.identity(n, dtype=np.int8, format="csr")
    col = (a + eye).tocsc()[:, np.flatnonzero(raw)]
    row = sp.diags((~raw).astype(np.int8), dtype=np.int8) @ a.T.tocsr() + eye
    del a
    m = sp.hstack([col, row], format="csr")
    del col, row
    m.data[:] = 1
    return m


def moved_key(graph, a: np.ndarray, k: int) -> tuple[int, int]:
    """``(moved_rows, moved_max_recv)`` of ``a``: smaller is better, in this order."""
    from partitioners.cover import matching_size
    total, recv = matching_size(graph, a, k)
    return total, int(recv.max()) if recv.size else 0


def refine_moved(graph, a: np.ndarray, k: int, weights: Weights, *, rounds: int = 50, seed: int = 0,
                 alternations: int = 4) -> np.ndarray:
    """Lower ``moved_rows`` of ``a`` (which must be within the caps) by alternating role
    assignment and exact refinement of the role bound; never returns a worse partition."""
    from partitioners.refine import VolumeRefiner
    best = np.asarray(a, dtype=np.int64)
    best_key = moved_key(graph, best, k)
    for it in range(alternations):
        refiner = VolumeRefiner(graph, k, weights, pins=moved_pins(graph, roles(graph, best, k)))
        cand = refiner.run(best, rounds=rounds, seed=seed + 1 + it)
        key = moved_key(graph, cand, k)
        if key >= best_key:
            break
        best, best_key = cand, key
    return best


def polish_moved(graph, a: np.ndarray, k: int, weights: Weights, *, tries: int = 1000,
                 batch: int = 200, min_bound_gain: float = -1.0) -> np.ndarray:
    """Single-node moves scored by the exact change of ``moved_rows`` (see the module
    docstring): ``a`` must be within the caps; the result is within them and moves no more
    rows. At most ``tries`` moves are tried, in batches of ``batch`` taken in order of the role
    bound's gain (at least ``min_bound_gain``); after a batch that kept a move the bound is
    rebuilt from the new cover; it stops when a whole ranking yields nothing."""
    from partitioners.cover import matching_size
    from partitioners.refine import VolumeRefiner
    a = np.asarray(a, dtype=np.int64).copy()
    w = np.stack(weights.w)
    caps = np.asarray(weights.caps, dtype=np.float64)
    load = np.stack([np.bincount(a, weights=x, minlength=k) for x in w])
    cur = matching_size(graph, a, k)[0]
    used, tried = 0, set()
    while used < tries:
        ref = VolumeRefiner(graph, k, weights, pins=moved_pins(graph, roles(graph, a, k)))
        phi = ref.phi(a)
        cand = ref.boundary(phi)
        if cand.size == 0:
            break
        g = ref.gains(a, phi, cand)
        order = np.argsort(-g, axis=None, kind="stable")
        kept = done = 0
        for f in order.tolist():
            i, q = divmod(f, k)
            if not g[i, q] >= min_bound_gain or done >= batch or used >= tries:
                break
            v = int(cand[i])
            p = int(a[v])
            if (v, q) in tried or ((load[:, q] + w[:, v]) > caps + 1e-9).any():
                continue
            tried.add((v, q))
            a[v] = q
            m = matching_size(graph, a, k)[0]
            used += 1
            done += 1
            if m < cur:
                cur, kept = m, kept + 1
                load[:, p] -= w[:, v]
                load[:, q] += w[:, v]
            else:
                a[v] = p
        if kept == 0 and done < batch:
            break
        if kept:
            tried.clear()
    return a
