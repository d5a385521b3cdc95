"""Orders of a rank's owned rows for the locality of the owned-block product ``A_own @ h``
(``--reorder``). The product gathers, for each row, the input rows of its columns: its rate is
set by how much of the input a run of consecutive rows touches. Every order is a permutation of
the owned rows only (halo columns and message order stay as they are), and no result depends on
it beyond float rounding.

    blocks     the owned block cut by METIS into blocks whose input rows (``width`` columns of
               float32) take at most BLOCK_BYTES, each block in reverse Cuthill-McKee order::

                   rows  [ block 0 (RCM) | block 1 (RCM) | ... | block B-1 (RCM) ]

               so a block's product reads mostly its own slice of the input, which stays in the
               last-level cache; with one block (a part whose input fits) it is ``rcm``
    rcm        reverse Cuthill-McKee of the owned block (a narrow band)
    community  rows grouped by label propagation (:func:`community_order`)
    degree     descending in-degree
"""
from __future__ import annotations

import numpy as np
import torch

ORDERS = ("blocks", "rcm", "community", "degree", "none")
BLOCK_BYTES = 16 << 20
"""Input rows one block of the ``blocks`` order may read, in bytes: half a 32 MiB last-level
cache (the rest holds the CSR stream, the output rows and the other rows a block reads). A fixed
figure, not the machine's: the order, and so the rounding of every product, is the same wherever
the part is trained or resumed. Measured at products size (2.45M rows, 125M entries, 64 columns,
one thread, quiet box): METIS blocks of this size in RCM order run the product 1.87x faster than
RCM of the whole part, and the k = 1 epoch in 0.69x the time (BENCHMARKS.md, "A cache-sized
block order")."""
COMMUNITY_ROUNDS = 5
"""Label-propagation rounds of ``--reorder community``."""


def locality_order(indptr: torch.Tensor, indices: torch.Tensor, n: int, order: str, width: int = 64) -> torch.Tensor:
    """``[n]`` int64 permutation of the owned rows of the local CSR ``indptr``/``indices``
    (owned columns ``< n`` come first in every row) in ``order`` (module docstring)."""
    if order == "degree":
        return torch.argsort(indptr[1:] - indptr[:-1], descending=True, stable=True)
    if order not in ("rcm", "community", "blocks"):
        raise ValueError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    ptr, cols = indptr.numpy(), indices.numpy()
    if order == "community":
        return torch.from_numpy(community_order(ptr, cols, n))
    m = _owned_block(ptr, cols, n)
    blocks = block_count(n, width) if order == "blocks" else 1
    if blocks <= 1:
        return torch.from_numpy(_rcm(m))
    return torch.from_numpy(cache_blocks(m, blocks))


def block_count(n: int, width: int) -> int:
    """Blocks of the ``blocks`` order for ``n`` rows of ``width`` float32 columns."""
    rows = max(1, BLOCK_BYTES // (4 * max(1, width)))
    return -(-n // rows)


def _owned_block(ptr, cols, n: int):
    """The owned block ``[n, n]`` of the local CSR as a scipy pattern matrix (int8 ones)."""
    import scipy.sparse as sp
    own = cols < n  # the owned block: a prefix of every row (owned columns come first)
    if not own.all():
        cs = np.zeros(cols.size + 1, dtype=np.int64)
        np.cumsum(own, out=cs[1:])
        ptr, cols = cs[ptr], cols[own]
        del cs
    del own
    it = np.int32 if max(n, cols.size) < 2**31 - 1 else np.int64
    return sp.csr_matrix((np.ones(cols.size, dtype=np.int8), cols.astype(it, copy=False), ptr.astype(it)),
                         shape=(n, n), copy=False)


def _rcm(m) -> np.ndarray:
    from scipy.sparse.csgraph import reverse_cuthill_mckee
    return np.asarray(reverse_cuthill_mckee(m, symmetric_mode=True), dtype=np.int64)


def cache_blocks(m, blocks: int, seed: int = 0) -> np.ndarray:
    """Rows of the square pattern ``m`` (CSR, columns sorted within rows) cut into ``blocks``
    by METIS k-way (edge cut on the symmetrised pattern without self-loops,
    :func:`partitioners.common.sym_csr`; 5% imbalance), blocks in METIS's numbering, each in
    reverse Cuthill-McKee order of its own sub-block. Deterministic for a seed."""
    from types import SimpleNamespace

    import scipy.sparse as sp

    from partitioners.metis import metis_kway
    from partitioners.common import sym_csr
    n = m.shape[0]
    sym = sym_csr(SimpleNamespace(num_nodes=n, indptr=m.indptr, indices=m.indices, meta={}))
    part = metis_kway(sym, int(blocks), np.ones((n, 1), dtype=np.int64), imbalance=0.05, seed=seed)
    s = sp.csr_matrix((np.ones(sym.nnz, dtype=np.int8), sym.indices, sym.indptr), shape=(n, n), copy=False)
    del sym
    order = np.argsort(part, kind="stable")
    starts = np.searchsorted(part[order], np.arange(blocks + 1))
    out = np.empty(n, dtype=np.int64)
    for b in range(blocks):
        idx = order[starts[b]:starts[b + 1]]
        if idx.size:
            out[starts[b]:starts[b + 1]] = idx[_rcm(s[idx][:, idx].tocsr())]
    return out


def community_order(ptr, cols, n: int, rounds: int = COMMUNITY_ROUNDS, seed: int = 0):
    """Owned rows grouped by community (``--reorder community``): label propagation on the
    owned block (columns ``< n`` of the CSR ``ptr``/``cols``), each round every node (in the
    first round) or every node of a random half (later: no oscillation) taking the label most
    frequent among its neighbours (ties: the lowest of random label ids), then rows sorted by label (stable: ids ascending within a community). Rows of one
    community read mostly each other's input rows, so a block of the product touches a slice of
    the input instead of all of it. O(rounds x E log E), deterministic for a seed."""
    import numpy as np
    rng = np.random.default_rng(seed)
    ptr = np.asarray(ptr, dtype=np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
    cols = np.asarray(cols)
    own = cols < n
    if not own.all():
        rows, cols = rows[own], cols[own]
    del own
    cols = cols.astype(np.int64, copy=False)
    lab = rng.permutation(n).astype(np.int64)
    for rnd in range(rounds):
        key = rows * n
        key += lab[cols]
        key.sort()
        starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
        counts = np.diff(np.append(starts, key.size))
        uniq = key[starts]
        del key, starts
        v, lv = uniq // n, uniq % n
        del uniq
        best = np.zeros(n, dtype=np.int64)
        np.maximum.at(best, v, counts) if v.size < 1 << 16 else _group_max(best, v, counts)
        top = counts == best[v]
        # v ascending, labels ascending within v: the first top label of each v is its lowest
        vt, lt = v[top], lv[top]
        first = np.concatenate([[True], vt[1:] != vt[:-1]]) if vt.size else np.zeros(0, dtype=bool)
        new = lab.copy()
        new[vt[first]] = lt[first]
        move = rng.random(n) < 0.5  # after the first round (all nodes), half: no oscillation
        lab = new if rnd == 0 else np.where(move, new, lab)
        del v, lv, counts, best, top, vt, lt, first, new, move
    return np.argsort(lab, kind="stable").astype(np.int64)


def _group_max(best, v, counts):
    """``best[v] = max(best[v], counts)`` for ``v`` ascending (grouped), without ``ufunc.at``."""
    import numpy as np
    starts = np.flatnonzero(np.concatenate([[True], v[1:] != v[:-1]]))
    best[v[starts]] = np.maximum.reduceat(counts, starts)


KEPT = "order"
"""The sub-folder of a run's checkpoint folder that keeps its parts' locality orders."""


def kept_name(fingerprint: str, order: str, width: int, k: int, rank: int) -> str:
    """File name of a kept order: the graph, the order and its width, the part of k parts."""
    return f"{(fingerprint or 'graph')[:16]}-{order}-w{int(width)}-k{int(k)}-part{int(rank):05d}.npy"


def read_kept(folder, name: str, owned: torch.Tensor) -> torch.Tensor | None:
    """The permutation of ``owned`` (this part's global ids in their order) that a kept order
    (:func:`keep`) gives: None when ``folder`` keeps none under ``name``, or one of other rows
    (another partition of the same graph), or a file that cannot be read."""
    from pathlib import Path
    path = Path(folder) / KEPT / name
    try:
        ids = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    own = owned.numpy()
    if ids.dtype != np.int64 or ids.shape != own.shape:
        return None
    by_id = np.argsort(own, kind="stable")
    pos = np.searchsorted(own, ids, sorter=by_id)
    pos = by_id[np.minimum(pos, own.size - 1)]
    if not np.array_equal(own[pos], ids) or np.unique(pos).size != own.size:
        return None
    return torch.from_numpy(pos.astype(np.int64))


def keep(folder, name: str, ids: torch.Tensor) -> None:
    """Keep a part's order in ``folder`` (its global ids in that order), written atomically; a
    folder that cannot be written keeps nothing (the order is computed again next time)."""
    import os
    from pathlib import Path

    from graphdist.fileio import replace_durably
    path = Path(folder) / KEPT / name
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            np.save(f, ids.numpy().astype(np.int64, copy=False), allow_pickle=False)
        replace_durably(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
