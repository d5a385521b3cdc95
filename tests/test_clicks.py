"""``clicks:PATH``: DLRM on a click log of the user's own columns. A log whose columns are Criteo's
fills the cache ``criteo:`` fills from the same rows, value for value; ids hash as FNV-1a (text)
and a 32-bit fold (integers), the same in the exported ``model.py``; the columns are chosen by
type or by name, refused in one line where they cannot serve; a model trained on 2 ranks,
exported, scores the log with ``graphdist score`` and with ``model.features(DataFrame)`` alike."""
from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from embeddings.clicks import fnv1a32, fold32, load_clicks
from embeddings.criteo import load_criteo
from graphdist.errors import DataFormatError, SpecError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _criteo_rows(n=40, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        dense = ["" if rng.random() < 0.2 else str(int(v)) for v in rng.integers(-2, 3000, 13)]
        ids = ["" if rng.random() < 0.2 else f"{int(v):08x}" for v in rng.integers(0, 2**32, 26, dtype=np.uint64)]
        rows.append([str(int(rng.random() < 0.4)), *dense, *ids])
    return rows


def test_a_log_of_criteos_columns_fills_the_cache_criteo_fills(tmp_path):
    rows = _criteo_rows()
    tsv = tmp_path / "day_0"
    tsv.write_text("".join("\t".join(r) + "\n" for r in rows))
    want = load_criteo(str(tsv), num_embeddings_cap=1000)
    cols = {"click": pa.array([int(r[0]) for r in rows], pa.int8())}
    for j in range(13):
        cols[f"d{j}"] = pa.array([math.log1p(max(int(r[1 + j]), 0)) if r[1 + j] else None for r in rows], pa.float32())
    for j in range(26):
        cols[f"c{j}"] = pa.array([int(r[14 + j], 16) if r[14 + j] else None for r in rows], pa.uint32())
    p = tmp_path / "log.parquet"
    pq.write_table(pa.table(cols), p, row_group_size=7)
    got = load_clicks(str(p), label="click")
    assert np.array_equal(np.asarray(got.dense), np.asarray(want.dense))
    assert np.array_equal(np.asarray(got.cat), np.asarray(want.cat))
    assert np.array_equal(np.asarray(got.labels), np.asarray(want.labels))
    assert got.columns == {"label": "click", "dense": [f"d{j}" for j in range(13)],
                           "sparse": [f"c{j}" for j in range(26)]}


def test_ids_hash_as_fnv1a_and_a_fold_and_the_exported_file_agrees():
    # FNV-1a 32 of "" and "a" (the published test vectors); an integer below 2^32 is itself
    assert list(fnv1a32(np.array([b"", b"a", b"foobar"], dtype="S"))) == [0x811C9DC5, 0xE40C292C, 0xBF9CF968]
    v = np.array([0, 7, 2**32 - 1, 2**32, -1, 2**62 + 5], dtype=np.int64)
    lo, hi = v.astype(np.uint64) & 0xFFFFFFFF, v.astype(np.uint64) >> 32
    assert list(fold32(v)) == [int(a) ^ (int(b) * 0x9E3779B1 & 0xFFFFFFFF) for a, b in zip(lo, hi)]
    assert list(fold32(v))[:3] == [0, 7, 2**32 - 1]
    from embeddings.export import MODEL_PY
    ns: dict = {"__name__": "exported", "__file__": "model.py"}
    exec(compile(MODEL_PY, "model.py", "exec"), ns)  # noqa: S102 - the file export writes
    text = ["", "a", "paris", "z\u00fcrich", "\u6771\u4eac"]
    want = list(fnv1a32(np.array([t.encode() for t in text], dtype="S")))
    assert [ns["_id"](t) for t in text] == want
    assert [ns["_id"](int(x)) for x in v] == list(fold32(v))
    assert [ns["_id"](x) for x in (True, False, None, float("nan"), 7.0, np.float64(2.0**40))] == \
        [1, 0, 0, 0, 7, int(fold32(np.array([2**40]))[0])]


def _log(tmp_path, n=30):
    rng = np.random.default_rng(1)
    t = pa.table({"clicked": pa.array(rng.integers(0, 2, n), pa.int64()), "age": rng.normal(30, 5, n),
                  "user": pa.array(rng.integers(0, 9, n), pa.int64()),
                  "city": pa.array(rng.choice(["paris", "rome", None], n)),
                  "seen": pa.array(rng.integers(0, 2, n).astype(bool)),
                  "ts": pa.array(np.arange(n) * 1000, pa.timestamp("ms"))})
    p = tmp_path / "log.parquet"
    pq.write_table(t, p)
    return p, t


def test_columns_by_type_or_by_name(tmp_path):
    p, t = _log(tmp_path)
    d = load_clicks(str(p), label="clicked")
    assert d.columns == {"label": "clicked", "dense": ["age"], "sparse": ["user", "city", "seen"]}
    assert np.array_equal(np.asarray(d.dense)[:, 0], t.column("age").to_numpy().astype(np.float32))
    cat = np.asarray(d.cat)[:, :, 0]
    assert list(cat[:, 0]) == t.column("user").to_pylist()
    city = t.column("city").to_pylist()
    assert list(cat[:, 1]) == [0 if c is None else int(fnv1a32(np.array([c.encode()], dtype="S"))[0]) for c in city]
    d = load_clicks(str(p), label="clicked", dense="age+user")
    assert d.columns["dense"] == ["age", "user"] and d.columns["sparse"] == ["city", "seen"]
    d = load_clicks(str(p), label="clicked", sparse="city")
    assert d.columns["dense"] == ["age", "user", "seen"] and d.columns["sparse"] == ["city"]
    refusals = [
        (dict(), DataFormatError, "has no label column 'label' (its columns: clicked, age, user, city, seen, ts); "
                                  "name it with ,label=COLUMN"),
        (dict(label="clicked", sparse="age"), DataFormatError, "column 'age' is double: an id column holds integers "
                                                               "or text (name a number column in dense=)"),
        (dict(label="clicked", dense="city"), DataFormatError, "column 'city' is string: a dense column holds numbers"),
        (dict(label="clicked", dense="agee"), DataFormatError, "dense=agee: no column 'agee'"),
        (dict(label="clicked", dense="clicked"), SpecError, "dense=clicked: 'clicked' is the label column"),
        (dict(label="clicked", dense="age+user", sparse="user"), SpecError,
         "dense=age+user, sparse=user: 'user' is in both"),
        (dict(label="clicked", dense="age", sparse="user+ts"), DataFormatError, "column 'ts' is timestamp[ms]"),
    ]
    for kw, err, msg in refusals:
        with pytest.raises(err) as e:
            load_clicks(str(p), **kw)
        assert msg in str(e.value), (kw, str(e.value))
    ids_only = tmp_path / "ids.parquet"
    pq.write_table(t.select(["clicked", "user", "city"]), ids_only)
    with pytest.raises(DataFormatError, match=r"0 dense and 2 id column\(s\): DLRM needs at least one of each"):
        load_clicks(str(ids_only), label="clicked")
    csv = tmp_path / "log.csv"
    csv.write_text("clicked,age\n1,2\n")
    with pytest.raises(DataFormatError, match="is not Parquet: clicks: reads Parquet"):
        load_clicks(str(csv))


def test_a_bad_row_is_one_line_or_skipped(tmp_path):
    p, t = _log(tmp_path)
    y = t.column("clicked").to_pylist()
    y[11] = None
    pq.write_table(t.set_column(0, "clicked", pa.array(y, pa.int64())), p, row_group_size=8)
    with pytest.raises(DataFormatError) as e:
        load_clicks(str(p), label="clicked")
    assert str(e.value) == (f"{p}: row 11: column 'clicked' is null (the label is needed) "
                            "(use --skip-bad-lines to skip such rows)")
    d = load_clicks(str(p), label="clicked", skip_bad_lines=True)
    assert len(d) == len(y) - 1 and d.bad_lines == 1
    from embeddings.clicks import ClicksReader
    from embeddings.criteo import row_lines
    assert list(row_lines(str(p), [10, 11], tag=ClicksReader(str(p), label="clicked").tag)) == [10, 12]
    age = t.column("age").to_pylist()
    age[20] = math.inf
    pq.write_table(t.set_column(1, "age", pa.array(age)), p)
    with pytest.raises(DataFormatError, match=r"row 20: value in column 'age' is inf, not a finite number"):
        load_clicks(str(p), label="clicked")


def test_two_ranks_train_export_and_score_alike(tmp_path, capsys):
    from graphdist.cli import main
    from tests.cli_ranks import run_cli
    rng = np.random.default_rng(0)
    n = 3000
    user, city = rng.integers(0, 50, n), rng.choice(["paris", "rome", "oslo"], n)
    pref = rng.normal(0, 1.5, 50)
    y = (rng.random(n) < 1 / (1 + np.exp(-pref[user]))).astype(np.int64)
    gaps = [None if i % 17 == 0 else int(u) for i, u in enumerate(user)]  # pandas reads them back as floats
    pq.write_table(pa.table({"clicked": y, "x": rng.normal(0, 1, n), "user": pa.array(gaps, pa.int64()), "city": city}),
                   tmp_path / "log.parquet")
    spec = f"clicks:{tmp_path / 'log.parquet'},label=clicked"
    ck = str(tmp_path / "ck")
    [(code, out)] = run_cli([["train-dlrm", spec, "--nproc", "2", "--steps", "40", "--batch-size", "128",
                              "--num-embeddings", "64", "--checkpoint-dir", ck, "--no-progress"]], world_size=2)
    assert code == 0, out
    auc = float(out.split("auc ")[1].split()[0])
    assert auc > 0.65, out  # the users' preferences are learnt
    assert main(["export", "--checkpoint-dir", ck, "--out", str(tmp_path / "m")]) == 0
    assert main(["score", str(tmp_path / "m"), spec, "--out", str(tmp_path / "sc")]) == 0
    import pandas as pd
    import torch
    sc = pd.read_parquet(tmp_path / "sc").sort_values("line")
    spec_ = importlib.util.spec_from_file_location("exported_clicks_model", tmp_path / "m" / "model.py")
    model = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(model)
    df = pd.read_parquet(tmp_path / "log.parquet")
    assert df.user.dtype == np.float64 and df.user.isna().any()
    dense, sparse, labels = model.features(df.drop(columns=["clicked"]).head(500))
    assert labels is None
    with torch.no_grad():
        prob = torch.sigmoid(model.build()(dense, sparse).squeeze(-1)).numpy()
    assert np.allclose(prob, sc.prob.to_numpy()[:500], atol=1e-6)
    assert model.spec()["input"]["sparse_columns"] == ["user", "city"]
    capsys.readouterr()
    assert main(["score", str(tmp_path / "m"), "criteo-synth:rows=300", "--out", str(tmp_path / "sc2")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"graphdist: error: criteo-synth:rows=300 has 13 dense and 26 id features, but the model in {tmp_path / 'm'} "
        "takes 1 and 2 (dense x; ids user, city): score data of the training's columns")


def test_eval_data_of_other_columns_is_one_line(tmp_path, capsys):
    from graphdist.cli import main
    p, t = _log(tmp_path, n=300)
    other = tmp_path / "eval.parquet"
    pq.write_table(t.append_column("extra", pa.array(np.ones(300))), other)
    spec, ev = f"clicks:{p},label=clicked", f"clicks:{other},label=clicked"
    assert main(["train-dlrm", spec, "--eval-data", ev, "--steps", "2", "--batch-size", "64", "--no-progress"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"graphdist: error: --eval-data {ev} has 2 dense and 3 id features (dense age, extra; ids user, city, seen) "
        f"but the training data {spec} has 1 dense and 3 id features (dense age; ids user, city, seen): evaluate on "
        "data of the training's columns")
    assert main(["train-dlrm", spec, "--eval-data", ev + ",dense=age", "--steps", "2", "--batch-size", "64",
                 "--no-progress"]) == 0
