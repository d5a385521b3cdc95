"""Vectorised boundary refinement on the halo-volume objective under several balance caps.

The halo volume is the km1 metric of the *column-net* hypergraph: net ``j`` holds ``j`` and
every destination of an edge ``j -> i``; its connectivity ``lambda_j`` is the number of parts
among its pins, and ``volume = sum_j (lambda_j - 1)``. Node ``v`` is a pin of net ``v`` and of
the net of every in-neighbour, i.e. its pins are row ``v`` of ``M = A + I`` (in-CSR + self)::

    Phi[e, q] = pins of net e in part q                 (bincount over all pins, [N, k])
    conn[v, q] = #{e ∋ v : Phi[e, q] > 0}                (M @ [Phi > 0] on candidate rows)
    keep[v]    = #{e ∋ v : Phi[e, a[v]] == 1}            (v is the last pin of e in its part)
    gain(v -> q) = keep[v] - deg_M(v) + conn[v, q]       (volume saved by the move)

Each round scores all boundary nodes against the state before the round (Jacobi style) and
keeps positive-gain moves whose gains stay exact when they happen together (per net and part,
at most one mover that could spoil another's count, see :meth:`VolumeRefiner._independent`);
they are admitted per target part in gain order while every cap holds, crediting weight that
leaves the part in the same round. So each round strictly lowers the volume and never breaks
a cap. Every second round also takes a random share of the zero-gain moves (a plateau walk,
which keeps finding new positive moves). :meth:`VolumeRefiner.rebalance` first moves the
nodes that cost least per unit of excess weight out of any part over a cap.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from partitioners.common import Weights, group_cumsum, in_csr

__all__ = ["VolumeRefiner", "refine"]


class VolumeRefiner:
    """Holds the pin structure of one graph; :meth:`run` refines an assignment."""

    def __init__(self, graph, k: int, weights: Weights):
        n = int(graph.num_nodes)
        indptr, indices = in_csr(graph)
        a = sp.csr_matrix((np.ones(indices.size, dtype=np.float32), indices, indptr), shape=(n, n))
        m = (a + sp.identity(n, dtype=np.float32, format="csr")).tocsr()
        m.data[:] = 1.0
        self.m = m  # rows = nodes, cols = nets they belong to
        self.rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(m.indptr))
        self.cols = m.indices.astype(np.int64)
        self.deg = np.diff(m.indptr).astype(np.int64)
        self.n, self.k = n, int(k)
        self.w = np.stack(weights.w)  # [C, N]
        self.caps = np.asarray(weights.caps, dtype=np.float64)

    # ------------------------------------------------------------------ state
    def phi(self, a: np.ndarray) -> np.ndarray:
        """``[N, k]`` pins of every net in every part."""
        k = self.k
        return np.bincount(self.cols * k + a[self.rows], minlength=self.n * k).reshape(self.n, k)

    def volume(self, a: np.ndarray, phi: np.ndarray | None = None) -> int:
        phi = self.phi(a) if phi is None else phi
        return int((phi > 0).sum() - self.n)

    def loads(self, a: np.ndarray) -> np.ndarray:
        return np.stack([np.bincount(a, weights=w, minlength=self.k) for w in self.w])

    def gains(self, a: np.ndarray, phi: np.ndarray, cand: np.ndarray) -> np.ndarray:
        """``[len(cand), k]`` volume gain of moving each candidate to each part (own part: -inf)."""
        sub = self.m[cand]
        pos = (phi > 0).astype(np.float32)
        conn = np.asarray(sub @ pos)
        r = np.repeat(np.arange(cand.size), np.diff(sub.indptr))
        own = a[cand]
        last = (phi.reshape(-1)[sub.indices.astype(np.int64) * self.k + own[r]] == 1)
        keep = np.bincount(r, weights=last, minlength=cand.size)
        g = conn + (keep - self.deg[cand])[:, None]
        g[np.arange(cand.size), own] = -np.inf
        return g

    def boundary(self, phi: np.ndarray) -> np.ndarray:
        cut_net = (phi > 0).sum(1) > 1
        return np.flatnonzero(np.bincount(self.rows, weights=cut_net[self.cols], minlength=self.n) > 0)

    # ------------------------------------------------------------------ moves
    def rebalance(self, a: np.ndarray, passes: int = 3) -> bool:
        """Move nodes out of over-cap parts (in place); True when every cap holds at the end.

        Over-cap overload ``P = sum_c sum_p max(0, load[c, p] - cap_c) / cap_c`` drops with
        every move: ``v: p -> q`` is taken only if it removes more overload at ``p`` than it adds
        at ``q`` (so two parts over in different constraints can trade hubs for light nodes).
        Candidates come in order of volume cost per unit of overload removed (gains computed
        once per pass); the loop is sequential over the few nodes that must move."""
        caps = self.caps
        for _ in range(passes):
            load = self.loads(a)
            over = load > caps[:, None] + 1e-9
            if not over.any():
                return True
            cand = np.flatnonzero(over.any(0)[a])
            phi = self.phi(a)
            g = self.gains(a, phi, cand)
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

    def _independent(self, a, phi, cand, target, prio) -> np.ndarray:
        """Mask of movers whose gains stay exact (or get better) when they all move together.

        Move ``u: p -> q`` counts net ``e`` as saved when ``Phi[e, p] == 1`` and as new when
        ``Phi[e, q] == 0``. Simultaneous moves can only make that wrong when one mover leaves
        part ``r`` as the single pin of ``e`` in ``r`` (``Phi[e, r] == 1``) while another
        enters ``r`` in ``e``. For every such key ``(e, r)`` only the highest-priority mover
        involved is kept."""
        import torch
        k = self.k
        sub = self.m[cand]
        r = np.repeat(np.arange(cand.size), np.diff(sub.indptr))
        e = sub.indices.astype(np.int64)
        flat = phi.reshape(-1)
        ko = e * k + a[cand][r]  # leaving keys
        ki = e * k + target[r]   # entering keys
        out_m = flat[ko] == 1
        in_m = flat[ki] == 1
        ko, ro = ko[out_m], r[out_m]
        ki, ri = ki[in_m], r[in_m]
        has_out = np.zeros(self.n * k, dtype=bool)
        has_out[ko] = True
        has_in = np.zeros(self.n * k, dtype=bool)
        has_in[ki] = True
        keep_o, keep_i = has_in[ko], has_out[ki]
        keys = np.concatenate([ko[keep_o], ki[keep_i]])
        rows = np.concatenate([ro[keep_o], ri[keep_i]])
        if keys.size == 0:
            return np.ones(cand.size, dtype=bool)
        kt = torch.from_numpy(keys)
        pr = torch.from_numpy(prio[rows].astype(np.float64))
        top = torch.full((self.n * k,), -np.inf, dtype=torch.float64).scatter_reduce_(0, kt, pr, "amax")
        beaten = (pr < top[kt]).numpy()
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

    def gain_round(self, a: np.ndarray, phi: np.ndarray, rng, zero_frac: float = 0.0) -> int:
        """One round of moves with positive gain - plus, with ``zero_frac > 0``, that fraction
        of the zero-gain moves (a plateau walk that lets later rounds find new positive
        moves). Movers are independent and caps are kept, so the volume never rises."""
        cand = self.boundary(phi)
        if cand.size == 0:
            return 0
        g = self.gains(a, phi, cand)
        target = g.argmax(1)
        best = g[np.arange(cand.size), target]
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
        ``zero_frac`` share of zero gains) until a pair saves less than ``tol`` of the volume
        or ``rounds`` rounds ran. The volume never rises."""
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
