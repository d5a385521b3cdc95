"""graphdist/outputs.py: the Parquet folder every output command writes, read back by pandas,
polars, pyarrow.dataset and DuckDB; its checks before any work and its atomic swap."""
from __future__ import annotations

import glob
import json

import numpy as np
import pytest

from graphdist.errors import ConfigError
from graphdist.outputs import PartsWriter, check_out, id_array, vectors

pa = pytest.importorskip("pyarrow")


def _table(ids, rows):
    return pa.table({"node_id": id_array(ids), "embedding": vectors(np.asarray(rows, dtype=np.float32))})


def test_one_table_for_every_reader(tmp_path):
    out = tmp_path / "out"
    ids = np.array(["18446744073709551617", "00042", "7"])
    rows = np.arange(6, dtype=np.float32).reshape(3, 2)
    with PartsWriter(out) as w:
        info = w.write(_table(ids, rows))
        man = w.close({"command": "test", "fingerprint": "abc"})
    assert info["rows"] == 3 and sorted(p.name for p in out.iterdir()) == ["_manifest.json", "part-00000.parquet"]
    assert json.loads((out / "_manifest.json").read_text()) == man
    assert man["columns"] == {"node_id": "string", "embedding": "list<float32>[2]"} and man["rows"] == 3
    files = sorted(glob.glob(f"{out}/*.parquet"))
    import duckdb
    got = duckdb.sql(f"SELECT node_id, embedding FROM '{out}/*.parquet' ORDER BY embedding[1]").fetchall()
    assert got == [(i, list(r)) for i, r in zip(ids.tolist(), rows.tolist())]
    import pandas as pd
    df = pd.read_parquet(files)
    assert df.node_id.tolist() == ids.tolist() and np.stack(df.embedding).tolist() == rows.tolist()
    import polars as pl
    assert pl.read_parquet(f"{out}/*.parquet")["node_id"].to_list() == ids.tolist()
    import pyarrow.dataset as ds
    t = ds.dataset(files, format="parquet").to_table()
    assert t.schema.field("embedding").type == pa.list_(pa.float32(), 2) and t.num_rows == 3
    # the folder itself, as Spark's and Hive's are read: the manifest's leading _ keeps it out
    import pyarrow.parquet as pq
    assert pd.read_parquet(out).node_id.tolist() == ids.tolist()
    assert pq.read_table(out).num_rows == 3 and ds.dataset(out, format="parquet").to_table().num_rows == 3


def test_checks_before_any_work(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("1")
    with pytest.raises(ConfigError, match=r"--out .*full: exists and is not empty; add --overwrite"):
        check_out(full, False)
    check_out(full, True)
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ConfigError, match=r"--out .*afile/out: cannot write there \(.*afile is a file"):
        check_out(afile / "out", False)
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        check_out(afile, True)
    check_out(tmp_path / "new" / "out", False)
    assert not (tmp_path / "new").exists()  # nothing made before the work


def test_overwrite_swaps_whole_folder_and_abort_leaves_none(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with PartsWriter(out, overwrite=True) as w:
        w.write(_table(np.array([1, 2]), [[0.0], [1.0]]))
        w.close({"command": "test"})
    assert sorted(p.name for p in out.iterdir()) == ["_manifest.json", "part-00000.parquet"]
    with pytest.raises(RuntimeError):
        with PartsWriter(tmp_path / "never") as w:
            w.write(_table(np.array([1]), [[0.0]]))
            raise RuntimeError("crash before close")
    assert not (tmp_path / "never").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
