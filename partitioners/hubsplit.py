"""``hubsplit``: METIS on the graph without its hubs, the hubs placed afterwards.

With pre/post aggregation (:mod:`partitioners.cover`) a node whose neighbours sit in other
parts costs at most one raw row and one partial sum per such part, whatever its degree, while
a plain edge cut pays for every edge. So cut edges at hubs are cheap, and the edge balance is
easiest to meet with hubs, which carry most of the in-edges of a power-law graph. This initial
partition leaves the ``frac`` share of highest-degree nodes out of multi-constraint METIS
(nodes and in-edges of the others balanced to ``imbalance``), then places the hubs, heaviest
first, each into the part holding most of its neighbours among those with room for it in every
cap (else the least loaded part); :func:`partitioners.api.partition`'s refinement rebalances
whatever is left over.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from partitioners.common import CSR, Weights, sym_csr

__all__ = ["hubsplit_partition"]


def hubsplit_partition(graph, k: int, weights: Weights, *, frac: float = 0.01, imbalance: float = 0.01,
                       seed: int = 0, objective: str = "vol") -> np.ndarray:
    """``[N]`` int64 parts (see the module docstring); needs METIS (:mod:`partitioners.backends`)."""
    from partitioners.metis import metis_kway
    n = int(graph.num_nodes)
    s = sym_csr(graph)
    deg = np.diff(s.indptr)
    hubs = np.argsort(-deg, kind="stable")[:int(frac * n)]
    rest = np.ones(n, dtype=bool)
    rest[hubs] = False
    idx = np.flatnonzero(rest)
    sub = sp.csr_matrix((np.ones(s.indices.size, dtype=np.int8), s.indices, s.indptr), shape=(n, n))[idx][:, idx]
    sub = sub.tocsr()
    w = np.stack(weights.w)
    vw = np.stack([np.maximum(np.round(x[idx] if np.allclose(x, np.round(x))
                                       else 16 * x[idx] / max(float(x.mean()), 1e-12)), 1).astype(np.int64)
                   for x in w], 1)
    a = np.full(n, -1, dtype=np.int64)
    if idx.size >= k:
        a[idx] = metis_kway(CSR(sub.indptr.astype(np.int64), sub.indices.astype(np.int32)), k, vw,
                            imbalance=imbalance, seed=seed, objective=objective)
    else:
        a[idx] = np.arange(idx.size) % k
    caps = np.asarray(weights.caps, dtype=np.float64)
    load = np.stack([np.bincount(a[idx], weights=x[idx], minlength=k) for x in w])
    for h in hubs[np.argsort(-w[-1, hubs], kind="stable")].tolist():
        nb = a[s.indices[s.indptr[h]:s.indptr[h + 1]]]
        cnt = np.bincount(nb[nb >= 0], minlength=k)
        fits = ((load + w[:, h][:, None]) <= caps[:, None] + 1e-9).all(0)
        q = int(np.argmax(np.where(fits, cnt, -1))) if fits.any() else int(np.argmin((load / caps[:, None]).max(0)))
        a[h] = q
        load[:, q] += w[:, h]
    return a
