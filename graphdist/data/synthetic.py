"""Synthetic graphs, vectorised: planted-partition SBM (a learnable task) and Graph500 R-MAT.

Both draw every edge at once with numpy (no Python loop per edge): 1M nodes / 20M directed
edges of SBM take a few seconds and ~2 GB here.
"""
from __future__ import annotations

import numpy as np
import torch

from graphdist.data.graph import Graph
from graphdist.errors import SpecError


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
    order = np.argsort(y, kind="stable")
    size = np.bincount(y, minlength=classes)
    offset = np.concatenate([[0], np.cumsum(size)[:-1]])
    m = int(round(nodes * avg_degree / 2))  # undirected pairs; symmetrised below
    src = rng.integers(0, nodes, m)
    same = rng.random(m, dtype=np.float32) < homophily
    shift = rng.integers(1, classes, m) if classes > 1 else np.zeros(m, dtype=np.int64)
    cls = np.where(same, y[src], (y[src] + shift) % classes)
    cls_size = size[cls]
    pick = (rng.random(m) * cls_size).astype(np.int64)
    dst = order[offset[cls] + np.minimum(pick, cls_size - 1)]
    del same, shift, cls, cls_size, pick
    x = None
    if features:
        means = rng.standard_normal((classes, features)).astype(np.float32)
        x = rng.standard_normal((nodes, features), dtype=np.float32)
        x += signal * means[y]
    tr, va, te = random_splits(rng, nodes, train, val)
    return Graph.from_edges(src, dst, nodes, symmetrize=True, self_loops=False, x=x,
                            y=torch.from_numpy(y), train_mask=tr, val_mask=va, test_mask=te,
                            meta={"directed": False, "generator": "sbm"})


def rmat_edges(scale, edge_factor, a, b, c, rng):
    """Graph500 R-MAT edge endpoints: each of ``scale`` levels picks a quadrant with
    probabilities (a, b, c, d = 1 - a - b - c)."""
    m = int(edge_factor) << int(scale)
    src = np.zeros(m, dtype=np.int64)
    dst = np.zeros(m, dtype=np.int64)
    for level in range(scale):
        r = rng.random(m, dtype=np.float32)
        bit = np.int64(1) << level
        src |= np.where(r >= a + b, bit, 0)
        dst |= np.where(((r >= a) & (r < a + b)) | (r >= a + b + c), bit, 0)
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
    perm = rng.permutation(n)
    src, dst = perm[src], perm[dst]
    kw = {}
    if features:
        kw["x"] = rng.standard_normal((n, features), dtype=np.float32)
    if classes:
        kw["y"] = torch.from_numpy(rng.integers(0, classes, n))
        kw["train_mask"], kw["val_mask"], kw["test_mask"] = random_splits(rng, n, 0.1, 0.1)
    return Graph.from_edges(src, dst, n, symmetrize=True, self_loops=False,
                            meta={"directed": False, "generator": "rmat"}, **kw)
