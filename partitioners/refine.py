"""Vectorised boundary refinement of a hypergraph connectivity objective under several balance
caps.

The objective is ``sum_e (lambda_e - 1)`` over nets ``e`` (``lambda_e`` = parts among its pins).
By default the nets are the *column nets* of the graph: net ``j`` holds ``j`` and every
destination of an edge ``j -> i``, so the objective is exactly the halo volume; a node's pins are
row ``v`` of ``M = A + I`` (in-CSR + self). Any binary pin matrix (nodes x nets) can be given
instead (:mod:`partitioners.moved` refines the rows moved with pre/post aggregation that way)::

    Phi[e, q] = pins of net e in part q                  (:class:`PinCounts`)
    conn[v, q] = #{e ∋ v : Phi[e, q] > 0}                 (M @ [Phi > 0] on candidate rows)
    keep[v]    = #{e ∋ v : Phi[e, a[v]] == 1}             (v is the last pin of e in its part)
    gain(v -> q) = keep[v] - deg_M(v) + conn[v, q]        (objective saved by the move)

Each round scores all boundary nodes against the state before the round (Jacobi style) and
keeps positive-gain moves whose gains stay exact when they happen together (per net and part,
at most one mover that could spoil another's count, see :meth:`VolumeRefiner._independent`);
they are admitted per target part in gain order while every cap holds, crediting weight that
leaves the part in the same round. So each round strictly lowers the objective and never
breaks a cap. Every second round also takes a random share of the zero-gain moves (a plateau
walk). :meth:`VolumeRefiner.rebalance` first moves nodes out of parts over a cap, in vectorised
passes (cheapest volume per unit of excess first, only into parts with room), with a
sequential pass for the few nodes left when parts must trade (one over in nodes, another in
edges).

Memory: ``Phi`` is a dense ``[nets, k]`` int32 array when it has at most ``2^25`` cells, else
sorted ``(net, part)`` keys with counts (sized by the pins, not by ``nets * k``); gains are
computed in chunks of at most ``2^22`` (candidate, part) cells; nothing else allocates per
(node, part).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from partitioners.common import Weights, group_cumsum, in_csr

__all__ = ["VolumeRefiner", "PinCounts", "refine", "column_net_pins"]

DENSE_PIN_CELLS = 1 << 25
"""Cells of the dense ``[nets, k]`` pin-count array (128 MiB of int32; built from an int64
``bincount``); above it the sorted-key form, sized by the pins."""


def column_net_pins(graph) -> sp.csr_matrix:
    """``A + I`` as a binary nodes x nets matrix (net j = j and the destinations of its edges),
    one-byte values, int32 ids when they fit."""
    n = int(graph.num_nodes)
    indptr, indices = in_csr(graph)
    a = sp.csr_matrix((np.ones(indices.size, dtype=np.int8), indices, indptr), shape=(n, n))
    m = (a + sp.identity(n, dtype=np.int8, format="csr")).tocsr()
    del a
    m.data[:] = 1
    return m


def _small(a: np.ndarray, k: int) -> np.ndarray:
    return a.astype(np.int8 if k <= 127 else np.int16 if k <= 32767 else np.int64)


class PinCounts:
    """``Phi[e, q]``, pins of net ``e`` in part ``q``: dense or sparse (see the module docstring)."""

    def __init__(self, cols: np.ndarray, parts: np.ndarray, n_nets: int, k: int):
        self.n_nets, self.k = n_nets, k
        kt = np.int32 if n_nets * k < 2**31 - 1 else np.int64
        key = cols.astype(kt) * kt(k)
        key += parts
        if n_nets * k <= DENSE_PIN_CELLS:
            self.flat = np.bincount(key, minlength=n_nets * k).astype(np.int32)
            self.keys = None
        else:
            self.flat = None
            self.keys, counts = np.unique(key, return_counts=True)
            self.counts = counts.astype(np.int32)

    def get(self, keys: np.ndarray) -> np.ndarray:
        """``Phi`` at flat keys ``net * k + part``."""
        if self.flat is not None:
            return self.flat[keys]
        if self.keys.size == 0:
            return np.zeros(keys.shape, dtype=np.int32)
        at = np.minimum(np.searchsorted(self.keys, keys), self.keys.size - 1)
        return np.where(self.keys[at] == keys, self.counts[at], 0)

    def lam(self) -> np.ndarray:
        """``[nets]`` parts present in each net."""
        if self.flat is not None:
            return (self.flat.reshape(self.n_nets, self.k) > 0).sum(1)
        return np.bincount(self.keys // self.k, minlength=self.n_nets)

    def volume(self) -> int:
        lam = self.lam()
        return int(lam.sum() - np.count_nonzero(lam))

    def conn(self, sub: sp.csr_matrix) -> np.ndarray:
        """``sub @ [Phi > 0]`` as a dense ``[rows of sub, k]`` array."""
        if self.flat is not None:
            return np.asarray(sub @ (self.flat.reshape(self.n_nets, self.k) > 0).astype(np.float32))
        pos = sp.csr_matrix((np.ones(self.keys.size, dtype=np.float32), (self.keys // self.k, self.keys % self.k)),
                            shape=(self.n_nets, self.k))
        return (sub @ pos).toarray()


class VolumeRefiner:
    """Holds the pin structure of one graph (or any pin matrix); :meth:`run` refines an
    assignment."""

    def __init__(self, graph, k: int, weights: Weights, pins: sp.csr_matrix | None = None):
        m = column_net_pins(graph) if pins is None else pins.tocsr()
        self.m = m  # rows = nodes, cols = nets they belong to
        it = np.int32 if max(m.shape) < 2**31 - 1 else np.int64
        self.rows = np.repeat(np.arange(m.shape[0], dtype=it), np.diff(m.indptr))
        self.cols = m.indices.astype(it, copy=False)
        self.deg = np.diff(m.indptr).astype(np.int64)
        self.n, self.n_nets, self.k = m.shape[0], m.shape[1], int(k)
        self.w = np.stack(weights.w)  # [C, N]
        self.caps = np.asarray(weights.caps, dtype=np.float64)

    # ------------------------------------------------------------------ state
    def phi(self, a: np.ndarray) -> PinCounts:
        """Pins of every net in every part."""
        return PinCounts(self.cols, _small(a, self.k)[self.rows], self.n_nets, self.k)

    def volume(self, a: np.ndarray, phi: PinCounts | None = None) -> int:
        return (self.phi(a) if phi is None else phi).volume()

    def loads(self, a: np.ndarray) -> np.ndarray:
        return np.stack([np.bincount(a, weights=w, minlength=self.k) for w in self.w])

    def gains(self, a: np.ndarray, phi: PinCounts, cand: np.ndarray) -> np.ndarray:
        """``[len(cand), k]`` objective gain of moving each candidate to each part (own: -inf)."""
        sub = self.m[cand]
        conn = phi.conn(sub)
        r = np.repeat(np.arange(cand.size), np.diff(sub.indptr))
        own = a[cand]
        last = phi.get(sub.indices.astype(np.int64) * self.k + own[r]) == 1
        keep = np.bincount(r, weights=last, minlength=cand.size)
        g = conn + (keep - self.deg[cand])[:, None]
        g[np.arange(cand.size), own] = -np.inf
        return g

    def best_moves(self, a: np.ndarray, phi: PinCounts, cand: np.ndarray, allowed=None):
        """``(target, gain)`` of the best move of each candidate, computed in chunks so that no
        ``[candidates, k]`` array exceeds ``2^22`` cells; ``allowed(chunk) -> [len(chunk), k]``
        bool masks targets (gain -inf where False)."""
        step = max(1, (1 << 22) // self.k)
        target = np.zeros(cand.size, dtype=np.int64)
        best = np.full(cand.size, -np.inf)
        for lo in range(0, cand.size, step):
            c = cand[lo:lo + step]
            g = self.gains(a, phi, c)
            if allowed is not None:
                g[~allowed(slice(lo, lo + step))] = -np.inf
            t = g.argmax(1)
            target[lo:lo + step] = t
            best[lo:lo + step] = g[np.arange(c.size), t]
        return target, best

    def boundary(self, phi: PinCounts) -> np.ndarray:
        cut_net = phi.lam() > 1
        return np.flatnonzero(np.bincount(self.rows[cut_net[self.cols]], minlength=self.n) > 0)

    # ------------------------------------------------------------------ balance
    def rebalance(self, a: np.ndarray, passes: int = 30) -> bool:
        """Move nodes out of over-cap parts (in place); True when every cap holds at the end.

        Vectorised passes: every node of an over-cap part is a candidate; it may go only to
        parts with room for it in every constraint; candidates are taken per source part in
        order of volume cost per unit of excess removed, until the excess is covered, and per
        target part while its room lasts. Parts that can only be fixed by trading (over in
        different constraints, no room anywhere) go to :meth:`_rebalance_sequential`."""
        caps, k = self.caps, self.k
        for _ in range(passes):
            load = self.loads(a)
            exc = load - caps[:, None]
            over = exc > 1e-9
            if not over.any():
                return True
            cand = np.flatnonzero(over.any(0)[a])
            wv, p = self.w[:, cand], a[cand]
            useful = (over[:, p] & (wv > 0)).any(0)
            cand, wv, p = cand[useful], wv[:, useful], p[useful]
            room = caps[:, None] - load
            # the lightest weight that still fits a part: a candidate fits where it is no heavier
            fits = lambda sl: (wv[:, sl, None] <= room[:, None, :] + 1e-9).all(0)  # noqa: E731
            q, best = self.best_moves(a, self.phi(a), cand, fits)
            ok = np.isfinite(best)
            if not ok.any():
                break
            cand, wv, p, q, best = cand[ok], wv[:, ok], p[ok], q[ok], best[ok]
            dec = (np.minimum(wv, np.maximum(exc[:, p], 0.0)) / caps[:, None]).sum(0)
            prio = np.where(best > 0, 1e6 + best, best / np.maximum(dec, 1e-12))
            # per source part, in priority order, until the excess of every over constraint is covered
            order = np.lexsort((-prio, p))
            ps = p[order]
            need = np.zeros(order.size, dtype=bool)
            for c in range(wv.shape[0]):
                before = group_cumsum(ps, wv[c, order]) - wv[c, order]
                need |= over[c, ps] & (wv[c, order] > 0) & (before < exc[c, ps] - 1e-9)
            sel = order[need]
            # per target part while its room lasts
            sel = sel[np.lexsort((-prio[sel], q[sel]))]
            t = q[sel]
            fit = np.ones(sel.size, dtype=bool)
            for c in range(wv.shape[0]):
                fit &= group_cumsum(t, wv[c, sel]) <= room[c, t] + 1e-9
            if not fit.any():
                break
            a[cand[sel[fit]]] = t[fit]
        if not (self.loads(a) > caps[:, None] + 1e-9).any():
            return True
        return self._rebalance_sequential(a)

    def _rebalance_sequential(self, a: np.ndarray, passes: int = 3, limit: int = 200_000) -> bool:
        """One node at a time: ``v: p -> q`` only if it removes more overload
        ``sum_c max(0, load - cap) / cap`` at ``p`` than it adds at ``q`` (parts over in different
        constraints can trade hubs for light nodes). At most ``limit`` candidates per pass."""
        caps = self.caps
        for _ in range(passes):
            load = self.loads(a)
            over = load > caps[:, None] + 1e-9
            if not over.any():
                return True
            cand = np.flatnonzero(over.any(0)[a])[:limit]
            g = self.gains(a, self.phi(a), cand)
            g[~np.isfinite(g)] = -1e18
            wv = self.w[:, cand]
            p = a[cand]
            exc = np.maximum(load - caps[:, None], 0.0)
            dec = (np.minimum(wv, exc[:, p]) / caps[:, None]).sum(0)
            order = np.argsort(-(g.max(1) - 1.0) / np.maximum(dec, 1e-12) * (dec > 0)
                               - 1e30 * (dec <= 0), kind="stable")
            moved = 0
            for i in order.tolist():
                pi = int(a[cand[i]])
                wi = wv[:, i]
                if not (over[:, pi] & (wi > 0)).any():
                    continue
                lp = load[:, pi]
                red_src = (np.minimum(wi, np.maximum(lp - caps, 0.0)) / caps).sum()
                inc = ((np.maximum(load + wi[:, None] - caps[:, None], 0.0)
                        - np.maximum(load - caps[:, None], 0.0)) / caps[:, None]).sum(0)
                red = red_src - inc
                red[pi] = -1.0
                ok = red > 1e-12
                if not ok.any():
                    continue
                gi = g[i]
                score = np.where(gi > 0, 1e6 + gi, gi / np.maximum(red, 1e-12))
                score[~ok] = -np.inf
                q = int(score.argmax())
                a[cand[i]] = q
                load[:, pi] -= wi
                load[:, q] += wi
                over = load > caps[:, None] + 1e-9
                moved += 1
                if not over.any():
                    return True
            if moved == 0:
                break
        return not (self.loads(a) > caps[:, None] + 1e-9).any()

    # ------------------------------------------------------------------ moves
    def _independent(self, a, phi: PinCounts, cand, target, prio) -> np.ndarray:
        """Mask of movers whose gains stay exact (or get better) when they all move together.

        Move ``u: p -> q`` counts net ``e`` as saved when ``Phi[e, p] == 1`` and as new when
        ``Phi[e, q] == 0``. Simultaneous moves can only make that wrong when one mover leaves
        part ``r`` as the single pin of ``e`` in ``r`` (``Phi[e, r] == 1``) while another
        enters ``r`` in ``e``. For every such key ``(e, r)`` only the highest-priority mover
        involved is kept."""
        k = self.k
        sub = self.m[cand]
        r = np.repeat(np.arange(cand.size), np.diff(sub.indptr))
        e = sub.indices.astype(np.int64)
        ko = e * k + a[cand][r]  # leaving keys
        ki = e * k + target[r]   # entering keys
        out_m = phi.get(ko) == 1
        in_m = phi.get(ki) == 1
        ko, ro = ko[out_m], r[out_m]
        ki, ri = ki[in_m], r[in_m]
        keep_o, keep_i = np.isin(ko, ki), np.isin(ki, ko)
        keys = np.concatenate([ko[keep_o], ki[keep_i]])
        rows = np.concatenate([ro[keep_o], ri[keep_i]])
        if keys.size == 0:
            return np.ones(cand.size, dtype=bool)
        uk, inv = np.unique(keys, return_inverse=True)
        pr = prio[rows]
        top = np.full(uk.size, -np.inf)
        np.maximum.at(top, inv.reshape(-1), pr)
        beaten = pr < top[inv.reshape(-1)]
        return np.bincount(rows, weights=beaten, minlength=cand.size) == 0

    def _admit_exchange(self, a, cand, target, prio) -> np.ndarray:
        """Indices of moves admitted so that every part ends within its caps, crediting the
        weight that leaves a part in the same round (fixpoint: the set only shrinks)."""
        load = self.loads(a)
        sel = np.arange(cand.size)
        for _ in range(64):
            src = a[cand[sel]]
            out = np.stack([np.bincount(src, weights=self.w[c, cand[sel]], minlength=self.k)
                            for c in range(self.w.shape[0])])
            room = self.caps[:, None] - load + out
            order = sel[np.lexsort((-prio[sel], target[sel]))]
            t = target[order]
            ok = np.ones(order.size, dtype=bool)
            for c in range(self.w.shape[0]):
                ok &= group_cumsum(t, self.w[c, cand[order]]) <= room[c, t] + 1e-9
            if ok.all():
                return order
            sel = order[ok]
        return sel[:0]

    def gain_round(self, a: np.ndarray, phi: PinCounts, rng, zero_frac: float = 0.0) -> int:
        """One round of moves with positive gain - plus, with ``zero_frac > 0``, that fraction
        of the zero-gain moves (a plateau walk that lets later rounds find new positive
        moves). Movers are independent and caps are kept, so the objective never rises."""
        cand = self.boundary(phi)
        if cand.size == 0:
            return 0
        target, best = self.best_moves(a, phi, cand)
        pos = best > 0
        if zero_frac > 0:
            pos |= (best == 0) & (rng.random(cand.size) < zero_frac)
        cand, target, best = cand[pos], target[pos], best[pos]
        if cand.size == 0:
            return 0
        prio = best + rng.random(cand.size) * 0.5  # random tie-break below one unit of gain
        ind = self._independent(a, phi, cand, target, prio)
        cand, target, prio = cand[ind], target[ind], prio[ind]
        adm = self._admit_exchange(a, cand, target, prio)
        a[cand[adm]] = target[adm]
        return int(adm.size)

    def run(self, a: np.ndarray, *, rounds: int = 60, tol: float = 1e-4, seed: int = 0,
            zero_frac: float = 0.3) -> np.ndarray:
        """Rebalance into every cap, then pairs of rounds (positive gains; positive plus a
        ``zero_frac`` share of zero gains) until a pair saves less than ``tol`` of the
        objective or ``rounds`` rounds ran. The objective never rises."""
        a = np.asarray(a, dtype=np.int64).copy()
        rng = np.random.default_rng(seed)
        self.rebalance(a)
        phi = self.phi(a)
        vol = pair_start = self.volume(a, phi)
        for it in range(rounds):
            walk = it % 2 == 1
            moved = self.gain_round(a, phi, rng, zero_frac if walk else 0.0)
            if moved:
                phi = self.phi(a)
                vol = self.volume(a, phi)
            if walk:
                if pair_start - vol < tol * max(vol, 1):
                    break
                pair_start = vol
        return a


def refine(graph, a: np.ndarray, k: int, weights: Weights, **kw) -> np.ndarray:
    """Convenience: ``VolumeRefiner(graph, k, weights).run(a, **kw)``."""
    return VolumeRefiner(graph, k, weights).run(a, **kw)
