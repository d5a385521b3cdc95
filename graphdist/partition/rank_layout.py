"""One rank's :class:`~graphdist.partition.local.LocalGraph` from its own rows and its peers' replies,
for an artifact built by k ranks together (:mod:`graphdist.partition.build`).

The one-process builder (:mod:`graphdist.partition.layout`) cuts every part's layouts from whole-graph
arrays. Here rank ``r`` holds only the in-edges of its owned rows, which is all it needs for its
receive side: its halo ``[halo from peer 0 | ... ]`` (ascending id within a peer), the cover of
the cut into ``r`` (:func:`partitioners.cover.part_cover` on the same block) and the partial sums
it receives. The send side of each peer ``p`` comes from two messages ``r -> p``::

    [u, raw]   one row per halo row r needs from p (ascending u)        -> p's send_idx, send_raw
    [v, u]     one row per edge u -> v that p must sum for r (by v, u)  -> p's pre_dst/ptr/src

received by ``p`` in rank order, which is the one-process order (by receiving part, then id).
Every tensor has the dtype and layout :func:`graphdist.partition.layout.build_layout` gives it, so the
saved part file is byte for byte the same.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from graphdist import comm
from graphdist.torch_internals import tensor_from_numpy

__all__ = ["local_part"]


def _t(x, dtype=np.int64) -> torch.Tensor:
    """A fresh tensor (no view of a larger array) with torch's own strides, so the part file is
    byte for byte the one-process artifact's (:func:`graphdist.torch_internals.tensor_from_numpy`)."""
    return tensor_from_numpy(np.asarray(x, dtype=dtype))


def local_part(rank: int, k: int, n: int, a: np.ndarray, owned: np.ndarray, indptr: np.ndarray,
               cols: np.ndarray, deg: np.ndarray, x, y, num_classes: int, fingerprint: str, masks=None,
               class_names: list[str] | None = None):
    """``(LocalGraph of part rank, [per-part counts of every rank])``: ``owned`` ascending global
    ids, ``indptr``/``cols`` their in-rows in global ids (sorted, no repeats), ``deg`` the global
    in-degree without self-loops of every node; ``masks`` the owned rows' train/val/test masks, or
    None. Every rank calls it at once (two all-to-alls)."""
    from partitioners.cover import part_cover

    from graphdist.partition.local import LocalGraph, gathered_csr
    n_own = owned.size
    row_len = np.diff(indptr)
    cut = a[cols] != rank
    cu = cols[cut].astype(np.int64)                              # cut edges u -> v, by (v, u)
    cv = np.repeat(owned, row_len)[cut]
    halo_u, urow = np.unique(cu, return_inverse=True)            # cover rows: u ascending
    h_order = np.argsort(a[halo_u], kind="stable")
    halo = halo_u[h_order]                                       # [halo from peer 0 | ...]
    ckey, ccol = np.unique(cv * k + a[cu], return_inverse=True)  # cover columns: (v, part of u)
    b = sp.csr_matrix((np.ones(cu.size, dtype=np.int8), (urow.reshape(-1), ccol.reshape(-1))),
                      shape=(halo_u.size, ckey.size))
    b.sum_duplicates()
    raw_u, pre_c, _ = part_cover(b)
    del b
    # partial sums received: covered (v, p), by (p, v)
    pv, pp = ckey[pre_c] // k, ckey[pre_c] % k
    o = np.lexsort((pv, pp))
    pre_v, pre_p = pv[o], pp[o]
    # to each peer p: [u, raw] for the halo rows from p; [v, u] for each edge p sums for us
    hp = a[halo]
    ask = np.stack([halo, raw_u[h_order].astype(np.int64)], 1)
    summed = ~raw_u[urow.reshape(-1)]
    sv, su = cv[summed], cu[summed]
    sp_ = a[su]
    o = np.lexsort((su, sv, sp_))
    want = np.stack([sv[o], su[o]], 1)
    if np.unique(want[:, 0] * k + sp_[o]).size != pre_v.size:
        raise RuntimeError("partial sums asked for do not match the cover")  # a bug, never user input
    got_ask, ask_from = comm.all_to_all_varied(torch.from_numpy(ask), np.bincount(hp, minlength=k).tolist())
    got_want, want_from = comm.all_to_all_varied(torch.from_numpy(want),
                                                 np.bincount(sp_[o], minlength=k).tolist())
    got_ask, got_want = got_ask.numpy(), got_want.numpy()
    # send side: rows asked for (by asking part, ascending u), partial sums wanted (by part, v, u)
    send_idx = np.searchsorted(owned, got_ask[:, 0])
    wv, wu = got_want[:, 0], got_want[:, 1]
    part_of = np.repeat(np.arange(k), want_from)
    new = np.ones(wv.size, dtype=bool)
    if wv.size:
        new[1:] = (wv[1:] != wv[:-1]) | (part_of[1:] != part_of[:-1])
    starts = np.flatnonzero(new)
    pre_ptr = np.append(starts, wv.size)
    # the local CSR in [owned | halo] columns, as layout._local_csr makes it
    n_cols = n_own + halo.size
    it = np.int32 if n_cols < 2**31 - 1 else np.int64
    col_of = np.full(n, -1, dtype=it)
    col_of[owned] = np.arange(n_own, dtype=it)
    col_of[halo] = np.arange(n_own, n_cols, dtype=it)
    lptr, lidx = gathered_csr(torch.from_numpy(indptr), torch.from_numpy(cols),
                              torch.arange(n_own), col_of, n_cols)
    del col_of
    count = lambda parts: np.bincount(parts, minlength=k).tolist()  # noqa: E731
    lg = LocalGraph(
        rank=rank, world_size=k, num_global_nodes=n, owned=_t(owned), indptr=lptr, indices=lidx,
        halo=_t(halo), recv_counts=count(hp), send_idx=_t(send_idx), send_counts=list(ask_from),
        col_deg=torch.cat([_t(deg[owned]), _t(deg[halo])]), x=x, y=y,
        **dict(zip(("train_mask", "val_mask", "test_mask"), [_t(m, bool) for m in masks] if masks else [None] * 3)),
        num_classes=num_classes, fingerprint=fingerprint, class_names=class_names,
        halo_raw=_t(raw_u[h_order], bool),
        send_raw=_t(got_ask[:, 1] != 0, bool),
        pre_rows=_t(np.searchsorted(owned, pre_v)), pre_recv_counts=count(pre_p),
        pre_ptr=_t(pre_ptr), pre_src=_t(np.searchsorted(owned, wu)), pre_dst=_t(wv[starts]),
        pre_send_counts=count(part_of[starts]))
    mine = {"owned_nodes": int(n_own), "halo_rows": int(halo.size), "local_edges": int(lidx.numel()),
            "moved_rows": int(raw_u.sum()) + int(pre_v.size), "cut_edges": int(cu.size),
            "sent_rows": int(send_idx.size)}
    return lg, comm.all_gather_json(mine)
