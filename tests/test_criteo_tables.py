"""``criteo:`` from Parquet (a file, a folder of them) and from comma-separated text with a line of
column names: the cache holds what the same lines as a TSV give, value for value; each bad row is
one line naming the file, the row and the column, or is skipped with --skip-bad-lines and its
line number kept. All data is made here."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

from embeddings.criteo import load_criteo, row_lines
from embeddings.criteo_tables import NAMES
from graphdist.errors import DataFormatError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _rows(n=57, seed=0):
    """Criteo-shaped rows as the TSV writes them (strings; "" missing): negative and large counts,
    upper-case and short hex ids, gaps in both."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(n):
        label = str(int(rng.random() < 0.3))
        dense = [str(int(v)) for v in rng.integers(-3, 5000, 13)]
        cats = [f"{int(v):08x}" for v in rng.integers(0, 2**32, 26, dtype=np.uint64)]
        for i in rng.choice(13, 3, replace=False):
            dense[i] = ""
        for i in rng.choice(26, 4, replace=False):
            cats[i] = ""
        cats[r % 26] = cats[r % 26].upper() if cats[r % 26] else "ab"
        out.append([label, *dense, *cats])
    return out


def _tsv(path, rows):
    path.write_text("".join("\t".join(r) + "\n" for r in rows))
    return str(path)


def _same(a, b):
    assert len(a) == len(b)
    assert np.array_equal(np.asarray(a.dense), np.asarray(b.dense))
    assert np.array_equal(np.asarray(a.cat), np.asarray(b.cat))
    assert np.array_equal(np.asarray(a.labels), np.asarray(b.labels))


def _table(rows, *, ints=False, floats=False, text=False, names=None, shuffle=False, extra=False):
    """The rows as a Parquet table: ids as strings (``ints``: as integers), counts as nullable
    integers (``floats``: as pandas writes a column with gaps, float with nan; ``text``: every
    column strings, as pandas' ``read_csv(dtype=str)``)."""
    cols = {}
    for j, name in enumerate(NAMES):
        vals = [r[j] for r in rows]
        if text:
            cols[name] = pa.array([v if v else None for v in vals], pa.string())
        elif j == 0:
            cols[name] = pa.array([int(v) for v in vals], pa.int64())
        elif j <= 13:
            if floats:
                cols[name] = pa.array([float(v) if v else math.nan for v in vals], pa.float64())
            else:
                cols[name] = pa.array([int(v) if v else None for v in vals], pa.int64())
        elif ints:
            cols[name] = pa.array([int(v, 16) if v else None for v in vals], pa.int64())
        else:
            cols[name] = pa.array([v if v else None for v in vals], pa.string())
    order = list(cols)
    if shuffle:
        order = order[::-1]
    t = pa.table({(names[NAMES.index(k)] if names else k): cols[k] for k in order})
    if extra:
        t = t.append_column("__index_level_0__", pa.array(range(len(rows)), pa.int64()))
    return t


def test_parquet_and_csv_fill_the_cache_the_tsv_fills(tmp_path):
    rows = _rows()
    tsv = load_criteo(_tsv(tmp_path / "train.txt", rows), num_embeddings_cap=1000)
    assert tsv.cat[:, :, 0].max() > 2**31  # ids over 2^31 are among them
    variants = {
        "strings": dict(),
        "int ids, pandas floats": dict(ints=True, floats=True),
        "upper-case names, reversed, an index column": dict(names=[n.upper() for n in NAMES], shuffle=True, extra=True),
        "unnamed, in order": dict(names=[f"col{i}" for i in range(40)]),
        "every column text": dict(text=True, names=[str(i) for i in range(40)]),
    }
    for i, (what, kw) in enumerate(variants.items()):
        p = tmp_path / f"v{i}.parquet"
        pq.write_table(_table(rows, **kw), p, row_group_size=10)  # 6 row groups
        _same(tsv, load_criteo(str(p), num_embeddings_cap=1000))
    # the guide's command: pandas reads the TSV as text and writes Parquet
    pd = pytest.importorskip("pandas")
    pd.read_csv(tmp_path / "train.txt", sep="\t", header=None, dtype=str).to_parquet(tmp_path / "pd.parquet")
    _same(tsv, load_criteo(str(tmp_path / "pd.parquet"), num_embeddings_cap=1000))
    # columns without any value, of Parquet's null type (pandas writes an object column of None so)
    empty = [[*r[:5], "", *r[6:20], "", *r[21:]] for r in rows]
    t = _table(empty)
    for j in (5, 20):
        t = t.set_column(j, NAMES[j], pa.nulls(len(rows)))
    pq.write_table(t, tmp_path / "empty.parquet")
    assert str(pq.read_schema(tmp_path / "empty.parquet").field(5).type) == "null"
    _same(load_criteo(_tsv(tmp_path / "empty.txt", empty), num_embeddings_cap=1000),
          load_criteo(str(tmp_path / "empty.parquet"), num_embeddings_cap=1000))
    # a pandas category column (dictionary) and a folder of parts in name order
    t = _table(rows)
    t = t.set_column(20, NAMES[20], t.column(20).dictionary_encode())
    parts = tmp_path / "spark_out"
    parts.mkdir()
    pq.write_table(t.slice(0, 30), parts / "part-00000-x.snappy.parquet")
    pq.write_table(t.slice(30), parts / "part-00001-x.snappy.parquet")
    (parts / "_SUCCESS").write_text("")
    _same(tsv, load_criteo(str(parts), num_embeddings_cap=1000))
    # reczoo's train.csv: a line of column names, then the TSV's fields with commas
    csv = tmp_path / "train.csv"
    csv.write_text(",".join(NAMES) + "\n" + "".join(",".join(r) + "\n" for r in rows))
    _same(tsv, load_criteo(str(csv), num_embeddings_cap=1000))
    assert list(row_lines(str(csv), [0, 1, 56])) == [1, 2, 57]  # the names are line 0
    bare = tmp_path / "bare.csv"  # no names line, Windows line ends
    bare.write_bytes("".join(",".join(r) + "\r\n" for r in rows).encode())
    _same(tsv, load_criteo(str(bare), num_embeddings_cap=1000))
    assert list(row_lines(str(bare), [0, 56])) == [0, 56]


@pytest.mark.parametrize("col, value, why", [
    ("label", None, "column 'label' is null (the label is needed)"),
    ("label", 2, "label in column 'label' must be 0 or 1, got 2"),
    ("I4", 1.5, "count in column 'I4' is not a whole number: 1.5"),
    ("I5", "7x", "count in column 'I5' is not an integer: '7x'"),
    ("C7", "zz12", "id in column 'C7' is not an 8-digit hex id: 'zz12'"),
    ("C7", "123456789", "id in column 'C7' is not an 8-digit hex id: '123456789'"),
    ("C9", -5, "id in column 'C9' is -5, not in [0, 2^32)"),
    ("C9", 2**32, f"id in column 'C9' is {2**32}, not in [0, 2^32)"),
])
def test_a_bad_row_is_one_line_or_skipped(tmp_path, col, value, why):
    rows = _rows(20)
    t = _table(rows, ints=col == "C9", floats=col == "I4", text=col == "I5")
    j = NAMES.index(col)
    vals = t.column(j).to_pylist()
    vals[13] = value
    if col == "label" and value is None:
        t = t.set_column(j, col, pa.array(vals, pa.int64()))
    else:
        t = t.set_column(j, col, pa.array(vals, t.column(j).type))
    p = tmp_path / "bad.parquet"
    pq.write_table(t, p, row_group_size=8)
    with pytest.raises(DataFormatError) as e:
        load_criteo(str(p), num_embeddings_cap=1000)
    assert str(e.value) == f"{p}: row 13: {why} (use --skip-bad-lines to skip such rows)"
    d = load_criteo(str(p), num_embeddings_cap=1000, skip_bad_lines=True)
    good = _tsv(tmp_path / "good.txt", rows[:13] + rows[14:])
    _same(load_criteo(good, num_embeddings_cap=1000), d)
    assert d.bad_lines == 1
    assert list(row_lines(str(p), [12, 13, 18])) == [12, 14, 19]


def test_refusals_of_a_whole_file(tmp_path):
    rows = _rows(5)
    t = _table(rows, names=[f"x{i}" for i in range(40)]).drop_columns(["x39"])
    p = tmp_path / "short.parquet"
    pq.write_table(t, p)
    with pytest.raises(DataFormatError, match=r"short.parquet: has 39 column\(s\), not Criteo's 40: give columns "
                                              r"named label, I1..I13, C1..C26, or exactly 40 in that order"):
        load_criteo(str(p))
    t = _table(rows)
    t = t.set_column(3, "I3", pa.array([[1]] * 5, pa.list_(pa.int64())))
    pq.write_table(t, p)
    with pytest.raises(DataFormatError, match=r"column 'I3' is list<\w+: int64>: the counts I1..I13 are integer, "
                                              "float or string columns"):
        load_criteo(str(p))
    cut = tmp_path / "cut.parquet"
    pq.write_table(_table(rows), cut)
    cut.write_bytes(cut.read_bytes()[:-100])
    with pytest.raises(DataFormatError, match="cut.parquet: not a readable Parquet file"):
        load_criteo(str(cut))
    empty = tmp_path / "none"
    empty.mkdir()
    with pytest.raises(Exception, match=r"directory has no day_\* files \(nor \*.parquet files\)"):
        load_criteo(str(empty))
    csv = tmp_path / "short.csv"
    csv.write_text(",".join(NAMES) + "\n" + ",".join(rows[0]) + "\n" + ",".join(rows[1][:-1]) + "\n")
    with pytest.raises(DataFormatError) as e:
        load_criteo(str(csv))
    assert str(e.value) == f"{csv}:3: expected 40 comma-separated fields, got 39 (use --skip-bad-lines to skip such lines)"
    assert os.path.getsize(csv) > 0
