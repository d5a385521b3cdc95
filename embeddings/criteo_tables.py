"""``criteo:PATH`` as tables: the Criteo click log in Parquet (a file, or a folder of them as
Spark, pandas, DuckDB or the Hugging Face Hub write them) and as comma-separated text with a line
of column names (reczoo's ``Criteo_x1`` / ``Criteo_x4`` ``train.csv``), read into the cache the TSV
fills (:mod:`embeddings.criteo`), value for value as the same lines in the TSV would be.

A Parquet file's 40 columns are taken by name where it has ``label``, ``I1`` .. ``I13`` and
``C1`` .. ``C26`` (any case; other columns are not read), else in order (then it has exactly 40)::

    label       0 or 1: an integer, boolean, float or string column
    I1 .. I13   integer counts: an integer column, a float column of whole numbers (as pandas
                writes an integer column with gaps), or strings of integers (every column read
                as text: pandas' ``read_csv(dtype=str)``); null or nan: missing (0)
    C1 .. C26   ids: strings of up to 8 hex digits (as in the TSV), or integers in [0, 2^32);
                null or empty: missing (0)

A row with a null label or one not 0 or 1, a count that is not a whole number, an id that is not
hex or not in [0, 2^32) is refused in one line naming the file, the row (0-based, over the file's
rows) and the column, or skipped with ``--skip-bad-lines`` (a skipped row counts as a bad line).
The text form is the TSV's with commas (40 fields a line, the TSV's rules); a first line whose
first field is not a number is the column names, not data (:func:`csv_layout`).
"""
from __future__ import annotations

import numpy as np

from embeddings.criteo_text import dense_values, hex_ids
from embeddings.data import NUM_DENSE, NUM_SPARSE
from graphdist.errors import DataFormatError

NAMES = ["label", *[f"I{i}" for i in range(1, NUM_DENSE + 1)], *[f"C{i}" for i in range(1, NUM_SPARSE + 1)]]
"""The columns in the order of a TSV line, as Criteo's own description and reczoo's CSV name them."""
_FIELDS = len(NAMES)


def csv_layout(first_line: bytes) -> tuple[bool, bool]:
    """``(comma-separated, first line is column names)`` of a text file by its first line: commas
    where it has no tab and 40 comma-separated fields; names where its first field is no number."""
    line = first_line.rstrip(b"\r\n")
    if b"\t" in line or line.count(b",") != _FIELDS - 1:
        return False, False
    first = line.split(b",", 1)[0].strip()
    try:
        float(first)
        return True, False
    except ValueError:
        return True, True


def rows(path: str) -> int:
    """The rows of a Parquet file (from its footer: nothing is read)."""
    return parquet_file(path).metadata.num_rows


def parquet_file(path: str):
    """``pyarrow.parquet.ParquetFile`` of ``path``; a file pyarrow cannot read is one line."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    try:
        return pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as e:
        raise DataFormatError(path, f"not a readable Parquet file ({e})") from None


def columns(path: str, names: list[str]) -> list[str]:
    """The file's columns to read, in the order of :data:`NAMES`."""
    by_name = {n.lower(): n for n in names}
    if all(n.lower() in by_name for n in NAMES):
        return [by_name[n.lower()] for n in NAMES]
    if len(names) == _FIELDS:
        return list(names)
    raise DataFormatError(path, f"has {len(names)} column(s), not Criteo's 40: give columns named label, "
                                f"I1..I{NUM_DENSE}, C1..C{NUM_SPARSE}, or exactly 40 in that order "
                                f"(the label, {NUM_DENSE} integer counts, {NUM_SPARSE} categorical ids)")


def chunks(path: str, skip_bad: bool):
    """``(dense, sparse, labels, bad rows)`` of each row group of the Parquet file ``path`` in
    turn: the arrays of its good rows and the 0-based rows (of the group) it skipped."""
    pf = parquet_file(path)
    cols = columns(path, pf.schema_arrow.names)
    row0 = 0
    for g in range(pf.metadata.num_row_groups):
        arrays = read_group(pf, g, cols, path)
        yield _convert(path, cols, arrays, row0, skip_bad)
        row0 += len(arrays[0])


def read_group(pf, g: int, cols: list[str], path: str) -> list:
    """The columns ``cols`` of row group ``g`` of ``pf`` (a file pyarrow cannot read is one line
    naming ``path``) as one array each, categorical (dictionary) columns decoded and a column
    without any value (Parquet's null type, as pandas writes an object column of None) as text
    that is all null."""
    import pyarrow as pa
    try:
        table = pf.read_row_group(g, columns=cols)
    except (OSError, pa.ArrowException) as e:
        raise DataFormatError(path, f"not a readable Parquet file ({e})") from None
    from graphdist.data.parquet import plain_columns
    return [pa.nulls(len(a), pa.string()) if pa.types.is_null(a.type) else a for a in plain_columns(table)]


def _convert(path, names, arrays, row0, skip_bad):
    label, lbad = labels_of(path, names[0], arrays[0])
    dense = np.zeros((len(label), NUM_DENSE), dtype=np.float32)
    sparse = np.zeros((len(label), NUM_SPARSE), dtype=np.uint32)
    bads = [lbad]
    for i in range(NUM_DENSE):
        dense[:, i], b = _counts(path, names[1 + i], arrays[1 + i])
        bads.append(b)
    for i in range(NUM_SPARSE):
        sparse[:, i], b = _ids(path, names[1 + NUM_DENSE + i], arrays[1 + NUM_DENSE + i])
        bads.append(b)
    bad = np.logical_or.reduce([b for b, _ in bads])
    if bad.any() and not skip_bad:
        r = int(np.flatnonzero(bad)[0])
        why = next(w(r) for b, w in bads if b[r])
        raise DataFormatError(path, f"row {row0 + r}: {why} (use --skip-bad-lines to skip such rows)")
    keep = ~bad
    return dense[keep], sparse[keep], label[keep], np.flatnonzero(bad)


def _values(a):
    return a.to_numpy(zero_copy_only=False)


def labels_of(path, name, a):
    """``(labels int8, (bad, why))`` of a label column: 0 or 1 as an integer, boolean, float or
    string; ``bad`` marks a null or another value, ``why(row)`` says which in a message."""
    import pyarrow as pa
    t = a.type
    null = a.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_boolean(t):
        v = a.fill_null(False).to_numpy(zero_copy_only=False).astype(np.int8)
        return v, (null, lambda r: f"column {name!r} is null (the label is needed)")
    if is_text(t):
        s = text_bytes(a)
        v = np.where(s == b"1", 1.0, np.where(s == b"0", 0.0, np.nan))
    elif pa.types.is_integer(t) or pa.types.is_floating(t):
        v = _values(a.fill_null(0)).astype(np.float64)
        s = v
    else:
        raise DataFormatError(path, f"column {name!r} is {t}: the label is 0 or 1 (an integer, boolean, float or "
                                    "string column)")
    bad = null | ~((v == 0) | (v == 1))

    def why(r):
        return f"column {name!r} is null (the label is needed)" if null[r] else \
            f"label in column {name!r} must be 0 or 1, got {_shown(s[r])}"
    return (v == 1).astype(np.int8), (bad, why)


def _counts(path, name, a):
    import pyarrow as pa
    t = a.type
    if pa.types.is_integer(t):
        v = _values(a.fill_null(0)).astype(np.int64)
        return dense_values(v), (np.zeros(len(v), dtype=bool), None)
    if is_text(t):  # every column read as text (pandas' dtype=str): the TSV's integers
        s = text_bytes(a)
        bad = np.zeros(len(s), dtype=bool)
        try:
            v = np.where(s == b"", b"0", s).astype(np.int64)
        except (ValueError, OverflowError):
            v = np.zeros(len(s), dtype=np.int64)
            for r, x in enumerate(s):
                try:
                    v[r] = int(x or b"0")
                except (ValueError, OverflowError):
                    bad[r] = True
        return dense_values(v), (bad, lambda r: f"count in column {name!r} is not an integer: {_shown(s[r])}")
    if not pa.types.is_floating(t):
        raise DataFormatError(path, f"column {name!r} is {t}: the counts I1..I{NUM_DENSE} are integer, float or "
                                    "string columns")
    v = _values(a.fill_null(np.nan)).astype(np.float64)
    v = np.where(np.isnan(v), 0.0, v)
    bad = ~np.isfinite(v) | (v != np.floor(v)) | (np.abs(v) >= 2.0**63)
    good = np.where(bad, 0.0, v).astype(np.int64)
    return dense_values(good), (bad, lambda r: f"count in column {name!r} is not a whole number: {_shown(v[r])}")


def _ids(path, name, a):
    import pyarrow as pa
    t = a.type
    if pa.types.is_integer(t):
        v = _values(a.fill_null(0)).astype(np.int64) if pa.types.is_signed_integer(t) else \
            _values(a.fill_null(0)).astype(np.uint64)
        bad = (v < 0) | (v >= 2**32)
        return np.where(bad, 0, v).astype(np.uint32), \
            (bad, lambda r: f"id in column {name!r} is {int(v[r])}, not in [0, 2^32)")
    if not is_text(t):
        raise DataFormatError(path, f"column {name!r} is {t}: the ids C1..C{NUM_SPARSE} are hex strings or integers")
    cs = text_bytes(a)
    vals, bad = hex_ids(cs)
    return vals, (bad, lambda r: f"id in column {name!r} is not an 8-digit hex id: {_shown(cs[r])}")


def is_text(t) -> bool:
    """Whether a pyarrow type is a string or binary one."""
    import pyarrow as pa
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)


def text_bytes(a) -> np.ndarray:
    """A string or binary column as byte strings (null: ``b""``)."""
    import pyarrow as pa
    binary = pa.types.is_binary(a.type) or pa.types.is_large_binary(a.type)
    raw = a.fill_null(b"" if binary else "").cast(pa.large_binary())
    return np.array(_values(raw), dtype="S") if len(raw) else np.zeros(0, dtype="S8")


def _shown(v) -> str:
    if isinstance(v, bytes):
        return repr(v.decode("utf-8", "replace"))
    v = float(v)
    return str(int(v)) if v.is_integer() else repr(v)
