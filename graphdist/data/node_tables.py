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
numbers). A node without a row, or whose label is empty (``bob,``: pandas' missing value), has no
label. Every node needs a row of features, with at least
as many values as the first row (F, the width; values past F are not read); a row of features
whose id the edge list has not is a node without edges (the edge list cannot hold it). A label's
id that is no node of the graph, a node given twice, a value that is no number: one line naming
the file, the line and the id.

Labels are integer classes (``-1``: none), or class names: where any label is not a number
(past a first line of column names; a first line whose id is a node is data), every label is a
name as written (``spam``, ``Rule Learning``, ``3``), read whole as the second field of a comma-,
tab- or ``;``-separated row (CSV quoting), the classes numbered in ascending order of their names
(Python's ``sorted()``) and the names kept for the outputs (:attr:`Graph.class_names`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from graphdist.data import table as tb
from graphdist.data import tokens
from graphdist.errors import DataFormatError

__all__ = ["labels_by_id", "features_by_id", "class_index", "with_isolated", "every_node", "place"]


def labels_by_id(path: Path, ids: np.ndarray, graph: str) -> tuple[np.ndarray, np.ndarray | None]:
    """``(y int64 [len(ids)], class names str [C] or None)`` from the table ``node_id label`` at
    ``path``: each node's class, -1 for a node the file leaves out or whose label is empty; the
    names where the labels are names (the class of a node is its name's place among them), None
    where they are integers. ``ids``: the graph's ids, ascending (int64 or str); ``graph``: its
    file's name, for the messages."""
    try:
        cols, tab = tokens.read_fields(path, 2, header=False)
    except DataFormatError:  # a row without its label (pandas writes a missing one as `node,`)
        return _by_line(path, ids, graph)
    if cols[0].size and (not _all_numbers(cols[1][1:]) or
                         (not _all_numbers(cols[1][:1]) and _is_node(cols[0][:1], tab, ids))):
        return _by_line(path, ids, graph)  # a name past the first line, or on a first line of data
    cols, tab = _rows(path, 2, (cols, tab))
    y = np.full(len(ids), -1, dtype=np.int64)
    y[_nodes(path, cols[0], tab, ids, graph)] = _classes(cols[1], tab)
    return y, None


def _classes(col: np.ndarray, tab) -> np.ndarray:
    """Integer labels (bytes tokens) as int64; a fraction or a label below -1 refused."""
    vals = _numbers(col, tab, np.int64, "label", "an integer class (0, 1, ...; -1: none)")
    if vals.size and int(vals.min()) < -1:
        i = int(np.argmin(vals))
        raise DataFormatError(tab.path, f"label {int(vals[i])} is not a class (0, 1, ...; -1: none)", tab.line_of(i))
    return vals


def _by_line(path: Path, ids: np.ndarray, graph: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Labels read line by line (:func:`_name_rows`): class names, each read whole, or integer
    classes in a table where some row's label is empty (no label); the first line left out where
    its id is no node (column names)."""
    col, labels, tab, wide = _name_rows(path)
    if col.size and not _is_node(col[:1], tab, ids):
        col, labels, tab.lines, wide = col[1:], labels[1:], tab.lines[1:], [w for w in wide if w != tab.lines[0]]
    if col.size == 0:
        raise DataFormatError(path, "no rows found")
    labels = np.asarray(labels, dtype=str)
    known = np.flatnonzero(labels != "")
    pos = _nodes(path, col, tab, ids, graph)[known]
    given = np.char.encode(labels[known], "utf-8") if known.size else np.zeros(0, dtype="S1")
    y = np.full(len(ids), -1, dtype=np.int64)
    if _all_numbers(given):
        y[pos] = _classes(given, _Lines(path, [tab.lines[i] for i in known]))
        return y, None
    if wide:
        raise DataFormatError(path, "more than 2 fields separated by spaces: a class name is the second field, "
                                    "and one with a space in it needs commas or tabs between the fields "
                                    "('node,Rule Learning')", wide[0])
    classes, y_rows = np.unique(labels[known], return_inverse=True)
    y[pos] = y_rows.reshape(-1)
    return y, classes


class _Lines:
    """Where each row came from, for the messages (as a table's ``tab``)."""

    def __init__(self, path: Path, lines: list[int]):
        self.path, self.lines = path, lines

    def line_of(self, i: int) -> int:
        return self.lines[i]


def _name_rows(path: Path) -> tuple[np.ndarray, list[str], _Lines, list[int]]:
    """``(ids as bytes, labels as written ('' where empty), lines, lines of more than two fields
    separated by spaces)``: the separator is the first data line's tab, comma or ``;`` (fields
    read as CSV: ``"Neural, Networks"``), else spaces, where a row of more than two fields cannot
    say where a name ends (``Rule Learning`` is one name only between commas or tabs)."""
    import csv
    raw = b"".join(tb.blocks(path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataFormatError(path, "is not UTF-8 text", raw.count(b"\n", 0, e.start) + 1) from None
    rows = [(i, ln.rstrip("\r")) for i, ln in enumerate(text.split("\n"), 1)
            if ln.strip() and not ln.lstrip().startswith(("#", "%"))]
    sep = next((c for c in "\t,;" if rows and c in rows[0][1]), None)
    fields = csv.reader((ln for _, ln in rows), delimiter=sep) if sep else (ln.split() for _, ln in rows)
    got_ids, got, wide = [], [], []
    for (i, ln), f in zip(rows, fields):
        if len(f) < 2:
            raise DataFormatError(path, f"expected at least 2 fields, got {len(f)}: {ln.strip()!r}", i)
        if sep is None and len(f) > 2:
            wide.append(i)
        got_ids.append(f[0].strip().encode())
        got.append(f[1].strip())
    col = np.array(got_ids, dtype=bytes) if got_ids else np.zeros(0, dtype="S1")
    return col, got, _Lines(path, [i for i, _ in rows]), wide


def class_index(values: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray | None]:
    """``(y int64, names or None)`` of a label array read whole (a ``.npy``, an npz's ``y``):
    integers as they are; strings as class names, numbered in ascending order (as
    :func:`labels_by_id` numbers a table's; an empty string: no label). Anything else refused naming ``what``."""
    a = np.asarray(values).reshape(-1)
    if a.dtype.kind in "US":
        if a.dtype.kind == "S":
            try:
                a = np.char.decode(a, "utf-8")
            except UnicodeDecodeError:
                raise DataFormatError(what, "labels are bytes that are not UTF-8 text") from None
        a = a.astype(str)
        known = a != ""  # an empty name: no label, as an empty field of a table
        names, inv = np.unique(a[known], return_inverse=True)
        y = np.full(a.size, -1, dtype=np.int64)
        y[known] = inv.reshape(-1)
        return y, names
    if a.dtype.kind == "f" and a.size and not (np.isfinite(a) & (a == np.floor(a))).all():
        i = int(np.flatnonzero(~(np.isfinite(a) & (a == np.floor(a))))[0])
        raise DataFormatError(what, f"label {a[i].item()!r} of row {i} is not an integer class (0, 1, ...; -1: none) "
                                    "or a class name")
    if a.dtype.kind not in "iuf" and a.size:
        raise DataFormatError(what, f"labels must be integers or class names, got dtype {a.dtype}")
    return a.astype(np.int64), None


def features_by_id(path: Path, ids: np.ndarray, graph: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x float32 [N', F], ids [N'])`` from the table ``node_id v1 .. vF`` at ``path``, F from
    its first row: every node of the graph needs its row, and a row whose id is no node of the
    edge list is a node without edges (:func:`with_isolated`: ``ids`` grows by it)."""
    width = _width(path)
    cols, tab = _rows(path, width)
    if cols[0].size > 1 and _numbered_columns(cols, tab, ids):
        cols, tab = tokens.drop_first(cols, tab)
    x = np.stack([_numbers(c, tab, np.float32, "feature", "a number") for c in cols[1:]], axis=1) \
        if cols[0].size else np.zeros((0, width - 1), np.float32)
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        v = x[i][~np.isfinite(x[i])][0]
        raise DataFormatError(path, f"feature {v} of node {cols[0][i].decode(errors='replace')!r} is not a finite "
                                    "number: fill missing values before training (a nan trains to a nan loss)",
                              tab.line_of(i))
    if ids.dtype.kind in "iu":
        want, ok = _ints(cols[0])
        ids = with_isolated(want[ok], ids, path, graph)  # (a word among integer ids: refused below)
    else:
        ids = with_isolated(tokens.as_text(cols[0], tab, "node"), ids, path, graph)
    pos = _nodes(path, cols[0], tab, ids, graph)
    return every_node(path, x, pos, ids, graph), ids


def _numbered_columns(cols, tab, ids) -> bool:
    """A first line of column names that are numbers, as pandas writes a frame's default ones
    (``node,0,1,2``: values 0 .. F-1, or 1 .. F): its id is no node of the graph."""
    try:
        first = [float(c[0]) for c in cols[1:]]
    except ValueError:
        return False
    f = len(first)
    return first in ([float(i) for i in range(f)], [float(i) for i in range(1, f + 1)]) and \
        not _is_node(cols[0][:1], tab, ids)


def with_isolated(given: np.ndarray, ids: np.ndarray, path: Path, graph: str) -> np.ndarray:
    """``ids`` and the ids of ``given`` (a features table's, of the ids' kind) that are no node of
    the edge list: nodes without edges, predicted from their own features (rank 0 says how many)."""
    new = np.setdiff1d(given, ids)
    if new.size == 0:
        return ids
    from graphdist.log import get_logger
    shown = ", ".join(repr(v.item() if hasattr(v, "item") else v) for v in new[:3])
    get_logger().info(f"{path}: {new.size:,} node(s) without edges in {graph} (first: {shown}{' ...' if new.size > 3 else ''})"
                      ": kept as nodes of their own, predicted from their features")
    return np.union1d(ids, new)


def every_node(path: Path, x: np.ndarray, pos: np.ndarray, ids: np.ndarray, graph: str) -> np.ndarray:
    """``x`` rows placed at ``pos`` (each row's node); a node of ``ids`` without a row refused."""
    if pos.size < len(ids):
        have = np.zeros(len(ids), dtype=bool)
        have[pos] = True
        missing = ids[~have]
        shown = ", ".join(repr(v.item() if hasattr(v, "item") else v) for v in missing[:3])
        raise DataFormatError(path, f"{missing.size:,} of the {len(ids):,} nodes of {graph} have no row of "
                                    f"features (first: {shown}): every node needs one")
    out = np.empty((len(ids), x.shape[1]), dtype=np.float32)
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


def _rows(path: Path, ncols: int, read=None):
    """The first ``ncols`` fields of every row (a row with fewer refused naming its line), a
    first line of column names left out (``read``: the fields already read)."""
    cols, tab = read or tokens.read_fields(path, ncols, header=False)
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


def _all_numbers(col: np.ndarray) -> bool:
    """Whether every token reads as a number (integer classes; a fraction is refused later)."""
    try:
        col.astype(np.float64)
        return True
    except ValueError:
        return False


def _is_node(col: np.ndarray, tab, ids: np.ndarray) -> bool:
    """Whether the one token ``col`` is an id of the graph."""
    if ids.dtype.kind in "iu":
        want, ok = _ints(col)
        return bool(ok.all()) and bool(np.isin(want, ids).all())
    try:
        want = col if ids.dtype.kind == "S" else np.char.decode(col, "utf-8").astype(str)
    except UnicodeDecodeError:
        return False
    return bool(np.isin(want, ids).all())


def _nodes(path: Path, col: np.ndarray, tab, ids: np.ndarray, graph: str) -> np.ndarray:
    """Each row's node (an index into ``ids``); ids the graph has not, or given twice, refused."""
    n = len(ids)
    if ids.dtype.kind in "iu":  # numbers, as the edge list's reader reads them (007 is 7)
        want, ok = _ints(col)
    elif ids.dtype.kind == "S":  # the k-worker build's ids: the bytes written
        want, ok = col, np.ones(col.size, dtype=bool)
    else:
        want, ok = tokens.as_text(col, tab, "node"), np.ones(col.size, dtype=bool)
    pos, bad, twice = place(want, ok, ids)
    if bad.size:
        shown = ", ".join(repr(col[i].decode(errors="replace")) for i in bad[:3])
        raise DataFormatError(path, f"{bad.size:,} of its {col.size:,} ids are not nodes of {graph}: {shown}"
                                    f"{' ...' if bad.size > 3 else ''}", tab.line_of(int(bad[0])))
    if twice:
        a, b = twice
        raise DataFormatError(path, f"node {col[b].decode(errors='replace')!r} has two rows (lines "
                                    f"{tab.line_of(a)} and {tab.line_of(b)})", tab.line_of(b))
    return pos


def place(want: np.ndarray, ok: np.ndarray, ids: np.ndarray):
    """``(pos int64, rows whose id is no node, (a, b) the first two rows of one node or None)``:
    each row's place in the ascending ``ids`` (``ok`` False: no id of the graph's kind); the
    readers of text and Parquet tables word the refusals."""
    n = len(ids)
    pos = np.minimum(np.searchsorted(ids, want), max(n - 1, 0)) if n else np.zeros(want.size, dtype=np.int64)
    found = ok & (ids[pos] == want) if n else np.zeros(want.size, dtype=bool)
    bad = np.flatnonzero(~found)
    if bad.size:
        return pos, bad, None
    order = np.argsort(pos, kind="stable")
    twice = np.flatnonzero(pos[order][1:] == pos[order][:-1])
    pair = (int(order[twice[0]]), int(order[twice[0] + 1])) if twice.size else None
    return pos.astype(np.int64), bad, pair


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
