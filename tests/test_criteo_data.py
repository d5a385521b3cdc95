"""Criteo TSV parsing, bad lines, cache, batches (KJT layout), metrics, CLI errors (exit 2).

All fixtures are generated here in tmp dirs; no Criteo data is read or committed.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from embeddings.criteo import cache_path, load_criteo
from embeddings.data import ClickData, make_batch, split_eval
from embeddings.metrics import auc, logloss, normalized_entropy
from graphdist.errors import ConfigError, DataFormatError


def line(label="1", dense=None, cats=None):
    dense = dense if dense is not None else ["1"] * 13
    cats = cats if cats is not None else ["0000000a"] * 26
    return "\t".join([label, *dense, *cats]) + "\n"


def write(path, lines):
    path.write_text("".join(lines))
    return str(path)


def test_parse_values(tmp_path):
    dense = ["0", "5", "", "-3", "100", "1", "2", "3", "4", "5", "6", "7", "8"]
    cats = ["68fd1e64", "", "FFFFFFFF", *["00000001"] * 23]
    p = write(tmp_path / "train.txt", [line("0", dense, cats), line("1")])
    d = load_criteo(p, num_embeddings_cap=1000)
    assert len(d) == 2
    np.testing.assert_allclose(d.dense[0, :5], [0, math.log(6), 0, 0, math.log(101)], rtol=1e-6)
    assert d.cat[0, 0, 0] == 0x68fd1e64 and d.cat[0, 1, 0] == 0 and d.cat[0, 2, 0] == 0xFFFFFFFF
    assert list(d.labels) == [0, 1]
    assert os.path.exists(os.path.join(cache_path(p, None), "sparse.npy"))
    assert sorted(os.listdir(tmp_path)) == ["train.txt"]  # nothing written beside the data


def test_a_read_only_data_folder_is_read_and_cached_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    data = tmp_path / "ro"
    data.mkdir()
    p = write(data / "train.txt", [line("0"), line("1")])
    data.chmod(0o555)
    try:
        assert len(load_criteo(p, num_embeddings_cap=1000)) == 2
        assert cache_path(p, None).startswith(str(tmp_path / "xdg" / "graphdist" / "criteo" / "train.txt-"))
        assert os.listdir(data) == ["train.txt"]
    finally:
        data.chmod(0o755)


@pytest.mark.parametrize("bad,msg", [
    (line("1", cats=["0000000a"] * 25), "expected 40 tab-separated fields, got 39"),
    (line("1", dense=["1"] * 12 + ["1.5"]), "dense field 13 is not an integer: '1.5'"),
    (line("1", cats=["0000000a"] * 25 + ["zz12"]), "categorical field 26 is not an 8-digit hex id: 'zz12'"),
    (line("2"), "label must be 0 or 1"),
])
def test_bad_line_names_file_and_line(tmp_path, bad, msg):
    p = write(tmp_path / "t.txt", [line(), line(), bad, line()])
    with pytest.raises(DataFormatError) as e:
        load_criteo(p)
    assert f"{p}:3:" in str(e.value) and msg in str(e.value)
    d = load_criteo(p, skip_bad_lines=True)
    assert len(d) == 3 and d.bad_lines == 1
    with pytest.raises(DataFormatError):  # a skip-built cache is not reused without the flag
        load_criteo(p)


def test_empty_file_and_directory(tmp_path):
    p = write(tmp_path / "empty.txt", [])
    with pytest.raises(DataFormatError, match="no data lines"):
        load_criteo(p)
    dd = tmp_path / "days"
    dd.mkdir()
    write(dd / "day_0", [line("0")] * 3)
    write(dd / "day_1", [line("1")] * 2)
    d = load_criteo(str(dd))
    assert list(d.labels) == [0, 0, 0, 1, 1]


def test_cache_reused_and_rebuilt(tmp_path):
    p = write(tmp_path / "t.txt", [line("0")] * 4)
    load_criteo(p)
    meta = Path(cache_path(p, None)) / "meta.json"
    t0 = meta.stat().st_mtime_ns
    load_criteo(p)
    assert meta.stat().st_mtime_ns == t0  # reused
    write(tmp_path / "t.txt", [line("1")] * 5)
    os.utime(p, (1, 1))  # a different size/mtime signature
    assert len(load_criteo(p)) == 5


def test_synth_tsv_roundtrip(tmp_path):
    from embeddings.synth import generate, write_tsv
    s = generate(rows=50, scale=0.001, seed=4)
    p = str(tmp_path / "s.tsv")
    write_tsv(s, p)
    d = load_criteo(p)
    np.testing.assert_allclose(d.dense, s.dense, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(d.cat[:, :, 0], s.cat[:, :, 0])
    np.testing.assert_array_equal(d.labels, s.labels)


def test_batch_layout_hand_checked():
    """2 samples, 26 features, multi-hot H=2; rank 1 of 2 takes sample 1."""
    cat = np.zeros((2, 26, 2), dtype=np.int64)
    lengths = np.ones((2, 26), dtype=np.int64)
    cat[1, 0] = [7, 3]
    lengths[1, 0] = 2
    cat[1, 1] = [12, 0]  # 12 % 10 = 2
    lengths[1, 2] = 0
    d = ClickData(dense=np.arange(26, dtype=np.float32).reshape(2, 13), cat=cat,
                  labels=np.array([0, 1], np.float32), num_embeddings=[10] * 26, lengths=lengths)
    (dense, kjt, y), n = make_batch(d, 0, 2, 1, 2)
    assert n == 1 and y.tolist() == [1.0] and dense[0, 0] == 13
    assert kjt.keys()[:3] == ["f_0", "f_1", "f_2"]
    assert kjt.lengths().tolist()[:3] == [2, 1, 0]
    assert kjt.values().tolist()[:3] == [7, 3, 2]
    assert kjt.values().numel() == 2 + 1 + 23
    with pytest.raises(ConfigError, match="not divisible"):
        make_batch(d, 0, 3, 0, 2)


def test_split_eval_bounds():
    d = ClickData(np.zeros((10, 13), np.float32), np.zeros((10, 26, 1), np.int64),
                  np.zeros(10, np.float32), [4] * 26)
    tr, ev = split_eval(d, 0.2)
    assert len(tr) == 8 and len(ev) == 2
    for f in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(ConfigError, match=r"\(0, 1\)"):
            split_eval(d, f)


def test_metrics_hand_checked():
    y = np.array([0, 0, 1, 1, 0, 1])
    s = np.array([0.1, 0.4, 0.35, 0.8, 0.35, 0.9])
    # pairs (pos, neg): 3 pos x 3 neg = 9; pos 0.35 vs neg {0.1 win, 0.4 loss, 0.35 tie}
    assert auc(y, s) == pytest.approx((1 + 0 + 0.5 + 3 + 3) / 9)
    tm = pytest.importorskip("torchmetrics.functional")
    assert auc(y, s) == pytest.approx(float(tm.auroc(torch.tensor(s), torch.tensor(y), task="binary")))
    p = np.full(6, 0.5)
    assert logloss(y, p) == pytest.approx(math.log(2))
    assert normalized_entropy(y, p) == pytest.approx(1.0)


def test_auc_is_torchmetrics_auroc_on_scores_with_ties():
    """graphdist counts the pairs itself (exactly, in integers); torchmetrics' ``binary_auroc``
    (its ROC curve's trapezoids, in float32) is the reference."""
    tm = pytest.importorskip("torchmetrics.functional.classification")
    rng = np.random.default_rng(0)
    for n, decimals in [(2, 1), (9, 1), (500, 1), (500, 3), (40_000, 2), (40_000, 6)]:
        y = rng.integers(0, 2, n)
        y[:2] = [0, 1]
        s = np.round(rng.normal(size=n) + 0.7 * y, decimals)  # ties within and across the classes
        want = float(tm.binary_auroc(torch.tensor(s), torch.tensor(y)))
        assert auc(y, s) == pytest.approx(want, abs=1e-6), (n, decimals)
    assert auc([0, 1, 0, 1], [0.3] * 4) == 0.5 and auc([0, 0, 1], [0.1, 0.2, 0.3]) == 1.0
    assert math.isnan(auc([1, 1], [0.1, 0.2])) and math.isnan(auc([], []))


def test_a_one_class_evaluation_says_auc_and_ne_are_undefined():
    """A log whose evaluated rows are all non-clicks (or all clicks) has no AUC (nan) and an NE
    divided by a near-zero base entropy (millions): the training summary and score's line say why
    instead of printing them; both classes present: the figures as before."""
    from embeddings.job import summary_line
    from embeddings.metrics import click_metrics, metrics_text
    m = click_metrics(np.zeros(600, np.float32), np.linspace(-3, 1, 600, dtype=np.float32))
    assert math.isnan(m["auc"]) and m["ne"] > 1e6 and m["eval_click_rate"] == 0.0
    assert metrics_text(m["auc"], m["logloss"], m["ne"], 600, m["eval_click_rate"]) == (
        f"auc -  logloss {m['logloss']:.4f}  ne -  (evaluated on 600 rows, all non-clicks: AUC and NE need "
        "both clicks and non-clicks)")
    assert "600 rows, all clicks:" in metrics_text(float("nan"), 9.0, 1e9, 600, 1.0)
    assert metrics_text(0.75, 0.5, 0.9, 600, 0.25, 6) == "auc 0.750000  logloss 0.500000  ne 0.900000"
    rep = {"auc": m["auc"], "logloss": m["logloss"], "ne": m["ne"], "eval_samples": 600, "eval_click_rate": 0.0,
           "throughput/samples_per_s": 1000.0, "steps": 5, "world_size": 1, "mem/peak_bytes": 2**29, "bad_lines": 0}
    assert summary_line(rep).startswith("auc -  logloss ") and "nan" not in summary_line(rep)
    assert summary_line({**rep, "auc": 0.7, "ne": 0.95, "eval_click_rate": 0.2}).startswith(
        f"auc 0.7000  logloss {m['logloss']:.4f}  ne 0.9500  throughput 1000 samples/s")


def test_normalized_entropy_is_torchrecs_ne():
    """The same float64 operations as torchrec's ``compute_cross_entropy`` / ``compute_ne`` (unit
    weights), so the same bits, clamped probabilities and one-class sets included."""
    ne = pytest.importorskip("torchrec.metrics.ne")
    from embeddings.metrics import _ETA
    rng = np.random.default_rng(1)
    for n in (1, 7, 1000, 50_000):
        y = rng.integers(0, 2, n).astype(np.float64)
        p = rng.uniform(size=n)
        p[: min(n, 2)] = [0.0, 1.0][: min(n, 2)]
        for labels in (y, np.zeros(n)):
            t, q = torch.tensor(labels), torch.tensor(p)
            w = torch.ones_like(t)
            ce = ne.compute_cross_entropy(t, q, w, _ETA).sum()
            want = float(ne.compute_ne(ce, w.sum(), t.sum(), w.sum() - t.sum(), _ETA))
            assert normalized_entropy(labels, p) == want, (n, labels.sum())


def _cli(argv):
    from graphdist.cli import main
    return main(argv)


def test_cli_errors_one_line_exit_2(tmp_path, capsys, restore_dist_env):
    bad = write(tmp_path / "bad.txt", [line()] * 5 + [line("1", cats=["xyz"] * 26)])
    assert _cli(["train-dlrm", f"criteo:{bad}", "--steps", "1", "--batch-size", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{bad}:6:" in err[0] and "not an 8-digit hex" in err[0]
    assert _cli(["train-dlrm", "criteo-synth:rows=100", "--eval-fraction", "1.5"]) == 2
    assert "--eval-fraction must be in (0, 1), got 1.5" in capsys.readouterr().err
    empty = write(tmp_path / "empty.txt", [])
    assert _cli(["train-dlrm", f"criteo:{empty}", "--steps", "1"]) == 2
    assert "no data lines" in capsys.readouterr().err
    assert _cli(["train-dlrm", "criteo-synth:rows=400,scale=0.001", "--steps", "1", "--batch-size", "8",
                 "--sharding", "row_wise", "--memory-budget-gb", "0.00001", "--no-progress"]) == 2
    e = capsys.readouterr().err.strip().splitlines()
    assert "sharding plan does not fit: rank 0 needs" in e[-1]


def test_fast_parser_matches_line_by_line():
    from embeddings.criteo_text import parse_lines, parse_lines_fast
    rng = np.random.default_rng(0)
    lines = []
    for i in range(300):
        dense = [str(int(v)) for v in rng.integers(-5, 10**6, 13)]
        cats = [format(int(v), "08x") for v in rng.integers(0, 2**32, 26)]
        for j in rng.integers(0, 39, 4):  # some missing values
            (dense if j < 13 else cats)[j % 13 if j < 13 else j - 13] = ""
        cats[int(rng.integers(0, 26))] = "AbC1"  # short, mixed-case hex
        lines.append("\t".join([str(i % 2), *dense, *cats]) + ("\r\n" if i % 7 == 0 else "\n"))
    fast = parse_lines_fast([x.encode() for x in lines])
    slow = parse_lines(lines, "x", 1, False)
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)
    for bad in (line("1", cats=["0000000g"] * 26), line("10"), line("1", dense=["1.5"] * 13),
                line("1", cats=["0a0a0a0a0"] * 26), line("1", cats=["0a"] * 25)):
        assert parse_lines_fast([lines[0].encode(), bad.encode()]) is None


def test_every_line_checked_not_only_the_total(tmp_path):
    """A 41-field line next to a 39-field line has the right total field count; both are named."""
    from embeddings.criteo_text import parse_lines_fast
    long = line("1", cats=["0000000a"] * 27)   # 41 fields
    short = line("0", cats=["0000000b"] * 25)  # 39 fields
    assert parse_lines_fast([line().encode(), long.encode(), short.encode()]) is None
    p = write(tmp_path / "shift.txt", [line(), long, short, line()])
    with pytest.raises(DataFormatError) as e:
        load_criteo(p)
    assert f"{p}:2:" in str(e.value) and "expected 40 tab-separated fields, got 41" in str(e.value)
    d = load_criteo(p, skip_bad_lines=True)
    assert len(d) == 2 and d.bad_lines == 2
    assert d.cat[:, :, 0].tolist() == [[10] * 26, [10] * 26]  # no column shifted in
