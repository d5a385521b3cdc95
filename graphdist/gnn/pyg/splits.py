"""A split drawn on each part, said once: PyG's split idioms (``T.RandomNodeSplit``,
``random_planetoid_splits``) run on a rank's part draw their numbers on every rank, so the
training set has k times the nodes per class, and validation and test k times their size.

The masks graphdist makes over the whole graph (a dataset's own split, :func:`gd.random_split
<graphdist.gnn.pyg.idioms.random_split>`) are recorded (:func:`graph_wide`). Any other mask given
to ``gd.cross_entropy`` / ``gd.nll_loss`` / ``gd.accuracy`` in their first :data:`CHECKED` calls
is compared across the ranks (one gather of its per-class counts), and one line is said when:

* on every rank it selects, of each class, the same number ``c`` of nodes, or all of them
  where the rank has fewer (a draw of ``c`` per class on each rank), ``c`` binding somewhere; or
* two masks each select as many nodes on every rank (a draw of a fixed number on each rank).

A mask over the whole graph spread over k parts meets the first by chance about once in 10^5
(at k = 2 with 7 classes: per class about one in 6), the second about once in 10^3.
"""
from __future__ import annotations

import weakref

import torch

from graphdist import comm

__all__ = ["graph_wide", "is_graph_wide", "check_split", "CHECKED"]

CHECKED = 8
"""Calls of the losses and ``gd.accuracy`` whose mask is compared across the ranks (the first
ones: a training step and an evaluation see every mask of a split)."""

_GRAPH_WIDE: dict[int, weakref.ref] = {}
_STATE: dict = {"calls": 0, "equal": {}}


def graph_wide(*masks) -> None:
    """Record ``masks`` as drawn over the whole graph (not on each part)."""
    for m in masks:
        if torch.is_tensor(m):
            _GRAPH_WIDE[id(m)] = weakref.ref(m, lambda _, k=id(m): _GRAPH_WIDE.pop(k, None))


def is_graph_wide(mask) -> bool:
    ref = _GRAPH_WIDE.get(id(mask))
    return ref is not None and ref() is mask


def check_split(mask, y: torch.Tensor) -> None:
    """Called by the losses and ``gd.accuracy`` with their mask and this rank's labels ``y``
    (owned rows); in the first :data:`CHECKED` calls a collective (every rank makes the same
    calls), then nothing."""
    rank, ws = comm.world()
    if ws == 1 or _STATE["calls"] >= CHECKED:
        return
    _STATE["calls"] += 1
    skip = mask is None or is_graph_wide(mask) or mask.dtype != torch.bool or mask.shape[0] != y.shape[0]
    mine = None if skip else _counts(mask, y)
    every = comm.all_gather_json(mine)
    if any(e is None for e in every):
        return
    from graphdist.gnn.pyg.sync import say_once
    per_class = _per_class_draw(every)
    totals = [e[0] for e in every]
    if per_class is None and len(set(totals)) == 1 and totals[0] > 0 and any(e[0] < e[1] for e in every):
        _STATE["equal"][id(mask)] = totals[0]
    if per_class is not None:
        what = f"{per_class} of each class on each of the {ws} ranks"
    elif len(_STATE["equal"]) >= 2:
        what = (f"as many nodes on each of the {ws} ranks, in two masks "
                f"({' and '.join(map(str, list(_STATE['equal'].values())[:2]))} on each)")
    else:
        return
    say_once("split", f"a mask given to gd.cross_entropy / gd.accuracy selects {what}: a split drawn on each part "
             f"(T.RandomNodeSplit, PyG's random_planetoid_splits) draws per rank, {ws} times the nodes; draw it "
             "once over the whole graph with gd.random_split(part, ...)")


def _counts(mask: torch.Tensor, y: torch.Tensor) -> tuple[int, int, list[int], list[int]]:
    """``(selected, labelled rows, selected per class, rows per class)`` of this rank."""
    lab = y >= 0
    n_cls = int(y[lab].max()) + 1 if bool(lab.any()) else 0
    sel = torch.bincount(y[mask & lab], minlength=n_cls)[:n_cls] if n_cls else y.new_zeros(0)
    have = torch.bincount(y[lab], minlength=n_cls) if n_cls else y.new_zeros(0)
    return int(mask.sum()), int(lab.sum()), sel.tolist(), have.tolist()


def _per_class_draw(every: list) -> int | None:
    """``c`` when every rank selected ``min(c, its nodes of the class)`` of every class, ``c``
    below some rank's count of some class; else None."""
    n_cls = max(len(e[2]) for e in every)
    pad = [(e[2] + [0] * (n_cls - len(e[2])), e[3] + [0] * (n_cls - len(e[3]))) for e in every]
    c = max((s for sel, _ in pad for s in sel), default=0)
    if c == 0:
        return None
    binds = any(h > c for _, have in pad for h in have)
    fits = all(s == min(c, h) for sel, have in pad for s, h in zip(sel, have))
    return c if binds and fits else None
