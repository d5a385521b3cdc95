"""Will a ``recommend`` (or a recommender's ``export``) rank fit? Checked on every rank once its part
is loaded and its propagation built (the part and the interaction data let go), before the table
is read: from the resident set at that moment (``rss``, which holds the process, the adjacency
and the rank's interaction index) and what is still to come, by phase (``n`` own rows, ``h``
halo rows, ``D`` the table's width, ``n_old`` the largest shard of the checkpoint, ``u`` users
ranked, ``K`` the top-K, ``t`` their training items, ``I_own`` own items, ``S`` the largest item
shard of another rank, ``I`` all items)::

    need  = max(peak so far, rss + max(read, propagate, rank, write))
    read      = 4 D n + (8 + 4 D) n_old + 24 n + READ_BYTES         the rows, one old shard, the id sort
    propagate = 4 D (PROP_ROWS n + PROP_HALO h)                     rows, their copy, the layer sum, a layer
    rank      = 4 D (n + I_own + S + u) + TRAIN_PAIR t + 16 I       final vectors, item shards, queries
                + SCORE_BYTES + TOP_ROW u K                          a chunk of scores, the running top-K
    write     = 4 D n + WRITE_ROW u K + WRITER_BYTES + a row group  the rows, as arrays and as Parquet
    (export)  = 4 D n + EXPORT_COPIES 4 D max(users, items) + WRITER_BYTES

then :func:`graphdist.fits.check_fits` (the machine's memory shared by its ranks, each rank's
process limit). The coefficients are rounded up from the measured phases (BENCHMARKS.md, "After
training: outputs").
"""
from __future__ import annotations

import numpy as np

from graphdist.outputs import ROWS_PER_GROUP, WRITER_BYTES

__all__ = ["recommend_memory", "check_recommend_fits", "check_export_fits"]

PROP_ROWS = 6
"""Copies of the own rows while propagating: the rows read, the module's parameter, the layer sum,
a layer's input and output, the product's row block."""
PROP_HALO = 3
"""Copies of the halo rows: the rows received, the send buffer, the halo block's input."""
READ_BYTES = 32 * 2 ** 20
"""Reading the checkpoint (its metadata, the reader's buffers): 19 MiB measured beyond the rows."""
TRAIN_PAIR = 16
"""Bytes per training pair of the ranked users: their (user, column) pairs by item shard."""
SCORE_BYTES = 64 * 2 ** 20
"""A chunk of scores (``graphdist.rec.metrics``: 2^22 float32 cells, 16 MiB) with the top-K's
temporaries and the ring's buffers: 37-58 MiB measured with 500-1,000 users."""
TOP_ROW = 3 * 12
"""Bytes per user and K of the running top-K (float32 score, int64 item): the list kept, a
shard's list and their merge."""
WRITE_ROW = 64
"""Bytes per output row: scores and items, ranks, the repeated user id, the item id, as NumPy
arrays and as Arrow columns."""
STRING_ID = 32
"""Extra bytes per row of a string id column."""
EXPORT_COPIES = 3
"""Copies of one written block of vectors: the rows taken, the Arrow list column, its encoding."""


def recommend_memory(n: int, h: int, dim: int, n_old: int, users: int, k: int, pairs: int, items_own: int,
                     shard: int, items: int, strings: int = 0) -> dict:
    """Bytes still to come for a rank by phase (the module docstring); ``strings``: how many of the
    two id columns are strings."""
    row = 4 * dim
    group = min(users * k, ROWS_PER_GROUP) * (WRITE_ROW + STRING_ID * strings)
    phases = {"read": row * n + (8 + row) * n_old + 24 * n + READ_BYTES,
              "propagate": row * (PROP_ROWS * n + PROP_HALO * h),
              "rank": row * (n + items_own + shard + users) + TRAIN_PAIR * pairs + 16 * items + SCORE_BYTES
              + TOP_ROW * users * k,
              "write": row * n + (WRITE_ROW + STRING_ID * strings) * users * k + WRITER_BYTES + group}
    return {**{f"{p}_bytes": int(b) for p, b in phases.items()}, "extra_bytes": int(max(phases.values()))}


def _sizes(tr, lp) -> dict:
    """What the model reads of a loaded part and its checkpoint."""
    from graphdist import comm
    lay = tr.layout()
    old = int(tr.meta.get("world_size", 1))
    rd = lp.rd
    own_items = int(rd.item_rows().size)
    per_rank = np.bincount(rd.item_owner, minlength=comm.world()[1])
    others = np.delete(per_rank, comm.world()[0])
    return {"n": int(rd.owned.numel()), "h": int(lp.halo_rows), "dim": int(lay["embedding.rank0"][1]),
            "n_old": max(int(lay[f"ids.rank{j}"][0]) for j in range(old)) if "ids.rank0" in lay else 0,
            "items_own": own_items, "shard": int(others.max()) if others.size else 0, "items": int(rd.item_owner.size)}


def _need(extra: int) -> int:
    from graphdist.memory import peak_rss_bytes, resident_bytes
    return max(peak_rss_bytes(), (resident_bytes() or 0) + extra)


def check_recommend_fits(tr, lp, users: np.ndarray, top_k: int, device) -> dict:
    """Collective: refuse in one line a ``recommend`` rank (``lp``: its
    :class:`~graphdist.rec.recommend.LoadedPart`; ``users``: the users it ranks) that would not fit
    its machine or its process limit; returns every rank's estimate of its peak."""
    from graphdist.fits import check_fits
    from graphdist.ids import STRING
    idx = lp.rd.index
    at = np.searchsorted(idx.users, users)
    hit = at < idx.users.size
    hit[hit] = idx.users[at[hit]] == users[hit]
    pairs = int((idx.indptr[at[hit] + 1] - idx.indptr[at[hit]]).sum())
    sz = _sizes(tr, lp)
    k = min(int(top_k), sz["items"])
    strings = sum(kind == STRING for kind in lp.kinds)
    m = recommend_memory(sz["n"], sz["h"], sz["dim"], sz["n_old"], int(users.size), k, pairs, sz["items_own"],
                         sz["shard"], sz["items"], strings)
    return check_fits(f"recommend (top {top_k} for {users.size:,} users on this rank)",
                      "use more ranks (--nproc, or an artifact of more parts)", _need(m["extra_bytes"]), device)


def check_export_fits(tr, lp, device) -> dict:
    """Collective: the same for a recommender's ``export`` (it writes vectors, ranks nothing)."""
    from graphdist.fits import check_fits
    sz = _sizes(tr, lp)
    m = recommend_memory(sz["n"], sz["h"], sz["dim"], sz["n_old"], 0, 0, 0, 0, 0, 0)
    row = 4 * sz["dim"]
    write = row * sz["n"] + EXPORT_COPIES * row * max(sz["n"] - sz["items_own"], sz["items_own"]) + WRITER_BYTES
    extra = max(m["read_bytes"], m["propagate_bytes"], write)
    return check_fits("export of the recommender's vectors", "use more ranks (--nproc, or an artifact of more parts)",
                      _need(extra), device)
