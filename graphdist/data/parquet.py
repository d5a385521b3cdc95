"""Parquet inputs: an edge list and its node tables as pandas, polars, Spark or DuckDB write them,
read by column (pyarrow), where a text file would have to be written first.

    edgelist:edges.parquet          the first two columns: source, destination (more: ignored)
    ,labels=labels.parquet          node, label: integer classes, or class names (strings); null, nan: none
    ,features=features.parquet      node, then F number columns, or one list column of F numbers
                                    (an ``infer`` output's ``embedding`` reads back as features)
    ratings:ratings.parquet         user, item[, rating[, timestamp]]: the first four columns

A file is Parquet by its first bytes (``PAR1``), whatever its name. An edge list's ids are read
as a text edge list's are: integers (an integer column, or strings that are all integers, ``007``
as 7) where every id is one below 2^62, else every id a string (integers in decimal). A rating
log's user and item columns are read as its text reader reads them (:mod:`graphdist.rec.data`). Node rows are matched to the edge list's ids as the
text tables are (:mod:`graphdist.data.node_tables`): an id that is no node, a node given twice, a
null id, a feature that is null, nan or infinite, a column of another type: one line naming the
file, the row (0-based) and the column.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from graphdist.errors import DataFormatError

__all__ = ["MAGIC", "is_parquet", "alike", "edge_columns", "edge_ids", "labels_by_id", "features_by_id", "interactions",
           "first_column", "plain_columns"]

MAGIC = b"PAR1"
_LIMIT = 2**62  # as graphdist.data.table: larger integer ids are kept as the strings they write


def is_parquet(path) -> bool:
    """Whether the file starts with Parquet's magic bytes."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def _columns(path: Path, least: int, what: str, row_groups: list[int] | None = None, first: int | None = None):
    """``(names, arrays)`` of every column (the ``first`` ones; of the row groups ``row_groups``,
    all without): pyarrow arrays, one chunk each, dictionaries decoded."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
        if len(names) < least:
            raise DataFormatError(path, f"has {len(names)} column(s) {names}; {what}")
        cols = names[:first] if first else None
        table = pf.read(columns=cols) if row_groups is None else pf.read_row_groups(row_groups, columns=cols)
    except (OSError, pa.ArrowException) as e:
        raise DataFormatError(path, f"not a readable Parquet file ({e})") from None
    return table.column_names, plain_columns(table)


def plain_columns(table) -> list:
    """The columns of a pyarrow table as one array each (one chunk), categorical (dictionary)
    columns decoded: pandas' category, polars' Categorical."""
    import pyarrow as pa
    cols = []
    for c in table.columns:
        a = c.combine_chunks()
        if pa.types.is_dictionary(a.type):
            a = a.dictionary_decode()
        cols.append(a)
    return cols


def _first_null(a) -> int | None:
    if a.null_count == 0:
        return None
    return int(np.flatnonzero(a.is_null().to_numpy(zero_copy_only=False))[0])


def _ids(path: Path, a, name: str, row0: int = 0) -> np.ndarray:
    """A column of node ids: int64, or ``str`` (``row0``: the file's row of its first, for the
    messages)."""
    import pyarrow as pa
    i = _first_null(a)
    if i is not None:
        raise DataFormatError(path, f"row {row0 + i}: column {name!r} is null (a node id is needed)")
    t = a.type
    if pa.types.is_integer(t):
        v = a.to_numpy(zero_copy_only=False)
        if v.size and (v < 0).any():
            i = int(np.flatnonzero(v < 0)[0])
            raise DataFormatError(path, f"row {row0 + i}: negative node id {int(v[i])} in column {name!r}")
        if v.size and int(v.max()) >= _LIMIT:
            return v.astype(str)
        return v.astype(np.int64)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return np.asarray(a.to_numpy(zero_copy_only=False), dtype=str)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        raw = a.to_numpy(zero_copy_only=False)
        try:
            return np.array([b.decode("utf-8") for b in raw], dtype=str)
        except UnicodeDecodeError:
            i = next(j for j, b in enumerate(raw) if not _utf8(b))
            raise DataFormatError(path, f"row {row0 + i}: node id {raw[i]!r} in column {name!r} is not UTF-8 text") from None
    raise DataFormatError(path, f"column {name!r} is {t}: node ids are integers or strings")


def _shown(v) -> str:
    """An id for a message: ``'alice'``, ``7``."""
    v = v.item() if hasattr(v, "item") else v
    return repr(v.decode(errors="replace") if isinstance(v, bytes) else v)


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def alike(cols: list[np.ndarray]) -> list[np.ndarray]:
    """Id columns of one kind: integers where every id reads as one below 2^62 (a string column
    of numbers too, as the text reader reads ``007`` as 7), else every id a string."""
    if all(c.dtype.kind in "iu" for c in cols):
        return cols
    ints = [c if c.dtype.kind in "iu" else _as_ints(c) for c in cols]
    if all(v is not None for v in ints):
        return ints
    return [c if c.dtype.kind == "U" else c.astype(str) for c in cols]


def _as_ints(col: np.ndarray) -> np.ndarray | None:
    """``col`` (strings) as int64 where each is an integer in [0, 2^62), else None."""
    try:
        v = col.astype(np.int64)
    except (ValueError, OverflowError):
        return None
    return v if not v.size or (v.min() >= 0 and v.max() < _LIMIT) else None


def edge_columns(path: Path, rank: int = 0, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` ids as their columns hold them (int64, or ``str``; :func:`alike` makes them
    one kind) of the row groups ``[r G/k, (r+1) G/k)`` of the file's G: a rank's shard of the
    k-worker build (:mod:`graphdist.partition.edges`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        groups = pq.ParquetFile(path).metadata
    except (OSError, pa.ArrowException) as e:
        raise DataFormatError(path, f"not a readable Parquet file ({e})") from None
    g = groups.num_row_groups
    mine = list(range(rank * g // k, (rank + 1) * g // k))
    row0 = sum(groups.row_group(i).num_rows for i in range(mine[0])) if mine else 0
    names, cols = _columns(path, 2, "an edge list needs two columns: source and destination", mine, first=2)
    return _ids(path, cols[0], names[0], row0), _ids(path, cols[1], names[1], row0)


def edge_ids(path: Path):
    """``(ids [N] ascending, src [E], dst [E])`` of a Parquet edge list, as
    :func:`graphdist.data.files._edge_ids` returns a text one's."""
    src, dst = alike(list(edge_columns(path)))
    if src.size == 0:
        raise DataFormatError(path, "no edges found")
    ids, inv = np.unique(np.concatenate([src, dst]), return_inverse=True)
    inv = inv.reshape(-1)
    return ids, inv[:src.size], inv[src.size:]


def _nodes(path: Path, col: np.ndarray, ids: np.ndarray, graph: str, name: str) -> np.ndarray:
    """Each row's node (an index into the graph's ascending ``ids``); ids the graph has not, or
    given twice, refused naming the row."""
    if ids.dtype.kind in "US" and col.dtype.kind != "U":
        col = col.astype(str)
    if ids.dtype.kind == "S":  # the k-worker build's ids: UTF-8 bytes
        col = np.char.encode(col, "utf-8")
    elif ids.dtype.kind in "iu" and col.dtype.kind == "U":  # numbers written as strings are numbers
        col = _as_ints(col)
        if col is None:
            raise DataFormatError(path, f"column {name!r} holds words but the nodes of {graph} are integers")
    from graphdist.data.node_tables import place
    pos, bad, twice = place(col, np.ones(col.size, dtype=bool), ids)
    if bad.size:
        shown = ", ".join(_shown(v) for v in col[bad[:3]])
        raise DataFormatError(path, f"row {int(bad[0])}: {bad.size:,} of its {col.size:,} ids are not nodes of "
                                    f"{graph}: {shown}{' ...' if bad.size > 3 else ''}")
    if twice:
        a, b = twice
        raise DataFormatError(path, f"row {b}: node {_shown(col[b])} has two rows ({a} and {b})")
    return pos


def labels_by_id(path: Path, ids: np.ndarray, graph: str) -> tuple[np.ndarray, np.ndarray | None]:
    """``(y int64 [len(ids)], class names or None)`` from the columns ``node, label``: -1 for a
    node without a row or with a null (or nan) label; integer labels are classes, strings class names
    (numbered in ascending order, as :func:`graphdist.data.node_tables.labels_by_id` numbers them)."""
    import pyarrow as pa
    names, cols = _columns(path, 2, "a labels table needs two columns: node and label")
    pos = _nodes(path, _ids(path, cols[0], names[0]), ids, graph, names[0])
    a, t = cols[1], cols[1].type
    known = ~a.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_floating(t):  # pandas writes a missing label of an integer column as nan
        known &= ~np.isnan(a.to_numpy(zero_copy_only=False))
    classes = None
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        v = np.asarray(a.to_numpy(zero_copy_only=False)[known], dtype=str)
        classes, vals = np.unique(v, return_inverse=True)
        vals = vals.reshape(-1)
    elif pa.types.is_integer(t) or pa.types.is_floating(t):
        v = a.to_numpy(zero_copy_only=False)[known].astype(np.float64)
        bad = ~((v == np.floor(v)) & (v >= -1) & np.isfinite(v))
        if bad.any():
            i = int(np.flatnonzero(known)[np.flatnonzero(bad)[0]])
            raise DataFormatError(path, f"row {i}: label {a[i].as_py()!r} in column {names[1]!r} is not a class "
                                        "(0, 1, ...; -1 or null: none)")
        vals = v.astype(np.int64)
    else:
        raise DataFormatError(path, f"column {names[1]!r} is {t}: labels are integer classes or class names")
    y = np.full(len(ids), -1, dtype=np.int64)
    y[pos[known]] = vals
    return y, classes


def features_by_id(path: Path, ids: np.ndarray, graph: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x float32 [N', F], ids [N'])`` from the columns ``node, v1 .. vF`` (numbers) or ``node,
    vector`` (one list column); every node of the graph needs its row, and a row of an id that is
    no node of the edge list is a node without edges (``ids`` grows by it)."""
    import pyarrow as pa
    names, cols = _columns(path, 2, "a features table needs a node column and at least one feature column")
    col = _ids(path, cols[0], names[0])
    rest, rest_names = cols[1:], names[1:]
    if len(rest) == 1 and (pa.types.is_list(rest[0].type) or pa.types.is_fixed_size_list(rest[0].type)
                           or pa.types.is_large_list(rest[0].type)):
        x = _list_rows(path, rest[0], rest_names[0])
    else:
        for a, name in zip(rest, rest_names):
            if not (pa.types.is_integer(a.type) or pa.types.is_floating(a.type)):
                raise DataFormatError(path, f"column {name!r} is {a.type}: features are numbers (or one list "
                                            "column of numbers)")
            i = _first_null(a)
            if i is not None:
                raise DataFormatError(path, f"row {i}: feature {name!r} of node {col[i].item()!r} is null: fill "
                                            "missing values before training (a nan trains to a nan loss)")
        x = np.stack([a.to_numpy(zero_copy_only=False).astype(np.float32) for a in rest], axis=1) \
            if col.size else np.zeros((0, len(rest)), np.float32)
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        i = int(np.argmax(bad))
        raise DataFormatError(path, f"row {i}: feature {x[i][~np.isfinite(x[i])][0]} of node {col[i].item()!r} is "
                                    "not a finite number: fill missing values before training (a nan trains to "
                                    "a nan loss)")
    from graphdist.data.node_tables import every_node, with_isolated
    given = col.astype(str) if ids.dtype.kind == "U" else col if col.dtype.kind in "iu" else _as_ints(col)
    if given is not None:  # (words for integer nodes: refused below)
        ids = with_isolated(given, ids, path, graph)
    pos = _nodes(path, col, ids, graph, names[0])
    return every_node(path, x, pos, ids, graph), ids


def _list_rows(path: Path, a, name: str) -> np.ndarray:
    """``[rows, F]`` float32 of a list column whose every row holds F numbers."""
    import pyarrow as pa
    i = _first_null(a)
    if i is not None:
        raise DataFormatError(path, f"row {i}: column {name!r} is null (every node needs its features)")
    if not (pa.types.is_integer(a.type.value_type) or pa.types.is_floating(a.type.value_type)):
        raise DataFormatError(path, f"column {name!r} is {a.type}: features are numbers")
    lengths = np.diff(a.offsets.to_numpy()) if not pa.types.is_fixed_size_list(a.type) else \
        np.full(len(a), a.type.list_size)
    if lengths.size and (lengths != lengths[0]).any():
        i = int(np.flatnonzero(lengths != lengths[0])[0])
        raise DataFormatError(path, f"row {i}: column {name!r} holds {int(lengths[i])} numbers, row 0 holds "
                                    f"{int(lengths[0])}: every row needs as many")
    width = int(lengths[0]) if lengths.size else 0
    flat = a.flatten()
    if flat.null_count:
        i = int(np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0]) // max(width, 1)
        raise DataFormatError(path, f"row {i}: column {name!r} holds a null: fill missing values before training")
    return flat.to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(a), width)


def interactions(path: Path) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """``(user ids, item ids, [rating[, timestamp]] float64)`` of a Parquet rating log: its
    first two columns are the user and the item (each an id column of its own kind), a third the
    rating, a fourth the time (numbers, or a Parquet timestamp: its integer count of its unit)."""
    import pyarrow as pa
    names, cols = _columns(path, 2, "a rating log needs two columns: user and item", first=4)
    u, i = _ids(path, cols[0], names[0]), _ids(path, cols[1], names[1])
    vals = []
    for a, name in zip(cols[2:], names[2:]):
        if pa.types.is_timestamp(a.type) or pa.types.is_date(a.type):
            a = a.cast(pa.int64()) if pa.types.is_timestamp(a.type) else a.cast(pa.int32()).cast(pa.int64())
        if not (pa.types.is_integer(a.type) or pa.types.is_floating(a.type)):
            raise DataFormatError(path, f"column {name!r} is {a.type}: a rating and a time are numbers")
        j = _first_null(a)
        if j is not None:
            raise DataFormatError(path, f"row {j}: column {name!r} is null")
        vals.append(a.to_numpy(zero_copy_only=False).astype(np.float64))
    return u, i, vals


def first_column(path: Path) -> np.ndarray:
    """The ids of the file's first column (a list of users: ``recommend --users``)."""
    names, cols = _columns(path, 1, "a list of ids needs a column", first=1)
    return _ids(path, cols[0], names[0])
