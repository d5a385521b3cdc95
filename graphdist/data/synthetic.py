"""Synthetic graphs, vectorised: planted-partition SBM (a learnable task) and Graph500 R-MAT.

Both draw every edge with numpy (no Python loop per edge), in blocks of ``BLOCK`` draws whose
values are narrowed to int32 as they come (the same random stream as one draw of the whole
array, so a spec always gives the same graph): no E-sized int64 array is made. The CSR is built
before the features are drawn, so the edge arrays are gone when ``x`` arrives.
"""
from __future__ import annotations

import numpy as np
import torch

from graphdist.data.graph import Graph
from graphdist.errors import SpecError

BLOCK = 1 << 22
"""Draws per block: bounds the int64/float64 temporaries of the generators."""


def _ids(n: int):
    return np.int32 if n < 2**31 - 1 else np.int64


def _blocks(m: int, dtype, draw) -> np.ndarray:
    """``[m]`` array of ``dtype`` filled block by block with ``draw(count)``."""
    out = np.empty(m, dtype=dtype)
    for i in range(0, m, BLOCK):
        out[i:i + BLOCK] = draw(min(BLOCK, m - i))
    return out


def random_splits(rng, n, train, val):
    """Random train/val/test masks with the given fractions (test = the rest)."""
    if not (0 < train < 1 and 0 <= val < 1 and train + val < 1):
        raise SpecError(f"train={train} and val={val} must be fractions with train + val < 1")
    perm = rng.permutation(n)
    n_tr, n_va = int(round(train * n)), int(round(val * n))
    masks = []
    for lo, hi in ((0, n_tr), (n_tr, n_tr + n_va), (n_tr + n_va, n)):
        m = np.zeros(n, dtype=bool)
        m[perm[lo:hi]] = True
        masks.append(torch.from_numpy(m))
    return masks


def label_splits(y, train: float, val: float, seed: int = 0) -> list[torch.Tensor]:
    """Random train/val/test masks ``[N]`` over the labelled nodes (``y >= 0``) with the given
    fractions (test = the rest), drawn from ``seed``: the same wherever ``y`` is read (one process,
    or every rank of the k-worker build from the labels file)."""
    lab = np.flatnonzero(np.asarray(y) >= 0)
    out = []
    for m in random_splits(np.random.default_rng(seed), lab.size, train, val):
        full = np.zeros(len(y), dtype=bool)
        full[lab[m.numpy()]] = True
        out.append(torch.from_numpy(full))
    return out


def sbm_graph(nodes, classes, avg_degree, homophily, features, signal, train, val, seed) -> Graph:
    """Planted partition: each node has a class; a fraction ``homophily`` of its edges stays in
    the class, the rest go to a uniformly chosen other class. Features are a weak class mean
    (``signal`` times a random unit-variance direction per class) plus N(0, 1) noise, so one node's
    features say little (an MLP does poorly) while averaging ~``avg_degree`` homophilous neighbours
    says a lot (a GCN does well)."""
    if nodes < 2 or classes < 1 or classes > nodes:
        raise SpecError(f"sbm: need nodes >= 2 and 1 <= classes <= nodes (nodes={nodes}, classes={classes})")
    if not 0.0 <= homophily <= 1.0:
        raise SpecError(f"sbm: homophily={homophily} must be in [0, 1]")
    if avg_degree <= 0 or features < 0:
        raise SpecError(f"sbm: avg_degree={avg_degree} must be > 0 and features={features} >= 0")
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, nodes)
    it = _ids(nodes)
    order = np.argsort(y, kind="stable").astype(it)
    size = np.bincount(y, minlength=classes)
    offset = np.concatenate([[0], np.cumsum(size)[:-1]])
    m = int(round(nodes * avg_degree / 2))  # undirected pairs; symmetrised below
    src = _blocks(m, it, lambda c: rng.integers(0, nodes, c))
    same = _blocks(m, bool, lambda c: rng.random(c, dtype=np.float32) < homophily)
    ct = np.int16 if classes < 2**15 else np.int64
    if classes > 1:
        shift = _blocks(m, ct, lambda c: rng.integers(1, classes, c))
    else:
        shift = np.zeros(m, dtype=ct)
    yc = y.astype(ct)
    dst = np.empty(m, dtype=it)
    for i in range(0, m, BLOCK):  # the partner's class, then a uniform node of that class
        j = slice(i, i + BLOCK)
        ys = yc[src[j]].astype(np.int64)
        shift[j] = np.where(same[j], ys, (ys + shift[j]) % classes)
    del same
    cls = shift  # reused in place: the partner's class of every pair
    for i in range(0, m, BLOCK):
        j = slice(i, i + BLOCK)
        c = cls[j].astype(np.int64)
        cls_size = size[c]
        pick = (rng.random(c.size) * cls_size).astype(np.int64)
        dst[j] = order[offset[c] + np.minimum(pick, cls_size - 1)]
    del cls, shift, order
    g = Graph.from_edges(src, dst, nodes, symmetrize=True, self_loops=False,
                         y=torch.from_numpy(y), meta={"directed": False, "generator": "sbm"})
    del src, dst
    if features:
        means = rng.standard_normal((classes, features)).astype(np.float32)
        x = rng.standard_normal((nodes, features), dtype=np.float32)
        x += signal * means[y]
        g.x = torch.from_numpy(x)
    g.train_mask, g.val_mask, g.test_mask = random_splits(rng, nodes, train, val)
    return g


def rmat_edges(scale, edge_factor, a, b, c, rng):
    """Graph500 R-MAT edge endpoints: each of ``scale`` levels picks a quadrant with
    probabilities (a, b, c, d = 1 - a - b - c)."""
    m = int(edge_factor) << int(scale)
    it = _ids(1 << scale)
    src = np.zeros(m, dtype=it)
    dst = np.zeros(m, dtype=it)
    for level in range(scale):
        bit = it(1) << it(level)
        for i in range(0, m, BLOCK):
            j = slice(i, i + BLOCK)
            r = rng.random(min(BLOCK, m - i), dtype=np.float32)
            src[j] |= np.where(r >= a + b, bit, it(0))
            dst[j] |= np.where(((r >= a) & (r < a + b)) | (r >= a + b + c), bit, it(0))
    return src, dst


def rmat_graph(scale, edge_factor, a, b, c, features, classes, seed) -> Graph:
    """Graph500 R-MAT (a=0.57, b=c=0.19): 2^scale nodes, edge_factor * 2^scale sampled edges,
    vertex ids randomly permuted, symmetrised, duplicates and self-loops removed. Optional random
    features/labels (``features=F,classes=C``) make it trainable for scale tests."""
    if not 1 <= scale <= 32 or edge_factor < 1:
        raise SpecError(f"rmat: scale={scale} must be in 1..32 and edge_factor={edge_factor} >= 1")
    if min(a, b, c) < 0 or a + b + c > 1:
        raise SpecError(f"rmat: a={a}, b={b}, c={c} must be >= 0 with a + b + c <= 1")
    rng = np.random.default_rng(seed)
    n = 1 << scale
    src, dst = rmat_edges(scale, edge_factor, a, b, c, rng)
    perm = rng.permutation(n).astype(src.dtype)
    for i in range(0, src.size, BLOCK):  # relabel in place
        j = slice(i, i + BLOCK)
        src[j], dst[j] = perm[src[j]], perm[dst[j]]
    del perm
    g = Graph.from_edges(src, dst, n, symmetrize=True, self_loops=False,
                         meta={"directed": False, "generator": "rmat"})
    del src, dst
    if features:
        g.x = torch.from_numpy(rng.standard_normal((n, features), dtype=np.float32))
    if classes:
        g.y = torch.from_numpy(rng.integers(0, classes, n))
        g.train_mask, g.val_mask, g.test_mask = random_splits(rng, n, 0.1, 0.1)
    return g
