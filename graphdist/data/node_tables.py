"""Node data keyed by the input's own ids: ``labels=L.csv`` and ``features=F.csv`` of an
``edgelist:`` spec, where a ``.npy`` file would have to be ordered as graphdist orders the ids.

    labels.csv                 features.csv
    node,label                 node,f0,f1,f2
    alice,0                    alice,0.5,1,0
    bob,2                      bob,0.1,0,3
    # carol: no row, no label  carol,0,0,1

Separators, ``#`` comments, blank lines, CRLF and ``.gz`` as in :mod:`graphdist.data.table`; a
first line of column names is skipped (a line whose values are not numbers). Ids are matched to
the edge list's ids as written (integers as integers: ``007`` is 7 where the edge list's ids are
numbers). Labels are integer classes (``-1``: none); a node without a row has no label. Every node
needs a row of features, with at least as many values as the first row (F, the width; values
past F are not read). Any id that is no node of the graph, a node given twice, a value that is
no number: one line naming the file, the line and the id.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from graphdist.data import table as tb
from graphdist.data import tokens
from graphdist.errors import DataFormatError

__all__ = ["labels_by_id", "features_by_id"]


def labels_by_id(path: Path, ids: np.ndarray, graph: str) -> np.ndarray:
    """``y`` int64 ``[len(ids)]`` from the table ``node_id label`` at ``path``: each node's
    label, -1 for a node the file leaves out. ``ids``: the graph's ids, ascending (int64 or str);
    ``graph``: its file's name, for the messages."""
    cols, tab = _rows(path, 2)
    vals = _numbers(cols[1], tab, np.int64, "label", "an integer class (0, 1, ...; -1: none)")
    if vals.size and int(vals.min()) < -1:
        i = int(np.argmin(vals))
        raise DataFormatError(path, f"label {int(vals[i])} is not a class (0, 1, ...; -1: none)", tab.line_of(i))
    y = np.full(len(ids), -1, dtype=np.int64)
    y[_nodes(path, cols[0], tab, ids, graph)] = vals
    return y


def features_by_id(path: Path, ids: np.ndarray, graph: str) -> np.ndarray:
    """``x`` float32 ``[len(ids), F]`` from the table ``node_id v1 .. vF`` at ``path``, F from its
    first row; every node of the graph needs its row."""
    width = _width(path)
    cols, tab = _rows(path, width)
    x = np.stack([_numbers(c, tab, np.float32, "feature", "a number") for c in cols[1:]], axis=1) \
        if cols[0].size else np.zeros((0, width - 1), np.float32)
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        v = x[i][~np.isfinite(x[i])][0]
        raise DataFormatError(path, f"feature {v} of node {cols[0][i].decode(errors='replace')!r} is not a finite "
                                    "number: fill missing values before training (a nan trains to a nan loss)",
                              tab.line_of(i))
    pos = _nodes(path, cols[0], tab, ids, graph)
    if pos.size < len(ids):
        have = np.zeros(len(ids), dtype=bool)
        have[pos] = True
        missing = ids[~have]
        shown = ", ".join(repr(v.item() if hasattr(v, "item") else v) for v in missing[:3])
        raise DataFormatError(path, f"{missing.size:,} of the {len(ids):,} nodes of {graph} have no row of "
                                    f"features (first: {shown}): every node needs one")
    out = np.empty((len(ids), width - 1), dtype=np.float32)
    out[pos] = x
    return out


def _width(path: Path) -> int:
    """Fields on the first data line past column names (the id and F values)."""
    head = next(iter(tb.blocks(path)), b"")
    lines = tb.data_lines(head, 2)
    if not lines:
        raise DataFormatError(path, "no rows found")
    first = lines[1] if len(lines) == 2 and _names(lines[0][2][1:]) else lines[0]
    if len(first[2]) < 2:
        raise DataFormatError(path, "a row needs a node id and at least one value")
    return len(first[2])


def _names(values: list[bytes]) -> bool:
    """A first line of column names: none of its values (past the id) a number."""
    return bool(values) and not any(map(tb.is_number, values))


def _rows(path: Path, ncols: int):
    """The first ``ncols`` fields of every row (a row with fewer refused naming its line), a
    first line of column names left out."""
    cols, tab = tokens.read_fields(path, ncols, header=False)
    if cols[0].size and _names([bytes(c[0]) for c in cols[1:]]):
        cols, tab = tokens.drop_first(cols, tab)
    if cols[0].size == 0:
        raise DataFormatError(path, "no rows found")
    return cols, tab


def _numbers(col: np.ndarray, tab, dtype, what: str, form: str) -> np.ndarray:
    try:
        if dtype == np.int64:
            v = col.astype(np.float64)
            if not (v == np.floor(v)).all():
                raise ValueError
            return v.astype(np.int64)
        return col.astype(dtype)
    except ValueError:
        for i, t in enumerate(col.tolist()):
            try:
                x = float(t)
                if dtype != np.int64 or x == int(x):
                    continue
            except (ValueError, OverflowError):
                pass
            raise DataFormatError(tab.path, f"{what} {t.decode(errors='replace')!r} is not {form}",
                                  tab.line_of(i)) from None
        raise


def _nodes(path: Path, col: np.ndarray, tab, ids: np.ndarray, graph: str) -> np.ndarray:
    """Each row's node (an index into ``ids``); ids the graph has not, or given twice, refused."""
    n = len(ids)
    if ids.dtype.kind in "iu":  # numbers, as the edge list's reader reads them (007 is 7)
        want, ok = _ints(col)
    elif ids.dtype.kind == "S":  # the k-worker build's ids: the bytes written
        want, ok = col, np.ones(col.size, dtype=bool)
    else:
        want, ok = tokens.as_text(col, tab, "node"), np.ones(col.size, dtype=bool)
    pos = np.searchsorted(ids, want) if n else np.zeros(col.size, dtype=np.int64)
    pos = np.minimum(pos, max(n - 1, 0))
    found = ok & (ids[pos] == want) if n else np.zeros(col.size, dtype=bool)
    if not found.all():
        bad = np.flatnonzero(~found)
        shown = ", ".join(repr(col[i].decode(errors="replace")) for i in bad[:3])
        raise DataFormatError(path, f"{bad.size:,} of its {col.size:,} ids are not nodes of {graph}: {shown}"
                                    f"{' ...' if bad.size > 3 else ''}", tab.line_of(int(bad[0])))
    order = np.argsort(pos, kind="stable")
    twice = np.flatnonzero(pos[order][1:] == pos[order][:-1])
    if twice.size:
        a, b = int(order[twice[0]]), int(order[twice[0] + 1])
        raise DataFormatError(path, f"node {col[b].decode(errors='replace')!r} has two rows (lines "
                                    f"{tab.line_of(a)} and {tab.line_of(b)})", tab.line_of(b))
    return pos.astype(np.int64)


def _ints(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, ok)``: the integer of each token; ``ok`` False for a word or a fraction."""
    try:
        return col.astype(np.int64), np.ones(col.size, dtype=bool)
    except (ValueError, OverflowError):
        pass
    out, ok = np.zeros(col.size, dtype=np.int64), np.zeros(col.size, dtype=bool)
    for i, t in enumerate(col.tolist()):
        try:
            out[i], ok[i] = int(t), True
        except (ValueError, OverflowError):
            pass
    return out, ok
