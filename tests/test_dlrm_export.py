"""graphdist export / score of train-dlrm checkpoints (issue 45 item 5): a W = 4 row-wise and a
2D G = 2 checkpoint unshard into one model on CPU without a process group, and scoring the rows
the training evaluated gives the training's AUC, log loss and NE; each row's probability equals
an independent unsharded reference (DCP's own whole-checkpoint converter into graphdist's
training model); the exported model.py turns raw Criteo lines into the same probabilities in a
process that never imports graphdist; Criteo line numbers survive skipped lines; int8 tables;
refusals in one line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.cli_ranks import run_cli
from tests.conftest import once_per_run

pytest.importorskip("torchrec")
pq = pytest.importorskip("pyarrow.parquet")

BAD = {7: "1\t2\tnot a criteo line\n", 301: "0\t" + "\t" * 30 + "\n"}
"""Malformed lines inserted into the eval file (0-based line: text); --skip-bad-lines drops them."""
TRAIN = ["--skip-bad-lines", "--sharding", "row_wise", "--batch-size", "64", "--eval-batch-size", "256", "--steps", "31",
         "--num-embeddings", "500", "--embedding-dim", "16", "--dense-arch", "16", "--over-arch", "16",
         "--embedding-lr", "0.1", "--dense-optimizer", "sgd", "--dense-lr", "0.1", "--no-progress"]


def _ok(runs):
    for code, text in runs:
        assert code == 0, text
    return runs


def _data(root: Path) -> None:
    """2,600 rows of one planted click model: 2,000 to train on, 600 (plus two bad lines) to
    evaluate; ``good.tsv`` is the eval file without its bad lines."""
    from embeddings.synth import generate, write_tsv
    d = generate(rows=2600, scale=0.0005, seed=3)
    write_tsv(d.slice(0, 2000), str(root / "train.tsv"))
    write_tsv(d.slice(2000, 2600), str(root / "good.tsv"))
    lines = (root / "good.tsv").read_text().splitlines(keepends=True)
    for at, text in sorted(BAD.items()):
        lines.insert(at, text)
    (root / "eval.tsv").write_text("".join(lines))


def _train(root: Path) -> dict:
    """Both trainings on one set of 4 ranks (the imports paid once), then the exports."""
    from graphdist.cli import main
    _data(root)
    data = [f"criteo:{root / 'train.tsv'}", "--eval-data", f"criteo:{root / 'eval.tsv'}"]
    _ok(run_cli([["train-dlrm", *data, *TRAIN, "--checkpoint-dir", str(root / "ck-rw"), "--report", str(root / "rw.json")],
                 ["train-dlrm", *data, *TRAIN, "--sparse-groups", "2", "--checkpoint-dir", str(root / "ck-2d"),
                  "--report", str(root / "2d.json")]], world_size=4))
    for name, extra in (("rw", []), ("2d", []), ("int8", ["--quantize", "int8"])):
        ck = root / ("ck-2d" if name == "2d" else "ck-rw")
        assert main(["export", "--checkpoint-dir", str(ck), "--out", str(root / f"ex-{name}"), *extra]) == 0
    return {"root": str(root)}


@pytest.fixture
def run(tmp_path_factory) -> Path:
    return Path(once_per_run(tmp_path_factory, "dlrm-export", _train)["root"])


def _score(run: Path, name: str, out: Path) -> dict:
    from graphdist.cli import main
    js = out.parent / f"{out.name}.json"
    assert main(["score", str(run / f"ex-{name}"), f"criteo:{run / 'eval.tsv'}", "--skip-bad-lines", "--out", str(out),
                 "--json", str(js), "--batch-size", "100"]) == 0
    return json.loads(js.read_text())


def _reference_probs(run: Path, ck: str) -> np.ndarray:
    """Each eval row's probability from the whole checkpoint as DCP's own converter writes it
    (``dcp_to_torch_save``: every tensor, optimizer state too) loaded into graphdist's training
    model (:func:`embeddings.model.build_model`), one process."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from embeddings.data import load_click_data, make_batch
    from embeddings.model import LossWrapper, ModelConfig, build_model
    snap = run / ck / (run / ck / "latest").read_text().strip()
    flat = run / f"{ck}.pt"
    if not flat.exists():
        dcp_to_torch_save(str(snap), str(flat))
    state = torch.load(flat, weights_only=False)["model"]
    m = LossWrapper(build_model(ModelConfig(embedding_dim=16, dense_arch=[16], over_arch=[16]), 13, [500] * 26, 0))
    m.load_state_dict(state)
    data = load_click_data(f"criteo:{run / 'eval.tsv'}", num_embeddings_cap=500, skip_bad_lines=True)
    batch, n = make_batch(data, 0, len(data), 0, 1)
    with torch.no_grad():
        return torch.sigmoid(m.model(batch.dense_features, batch.sparse_features).squeeze(-1)).numpy()[:n]


def _good_lines() -> list[int]:
    good, at = [], 0
    while len(good) < 600:
        if at not in BAD:
            good.append(at)
        at += 1
    return good


def test_w4_row_wise_and_2d_g2_checkpoints_unshard_and_score_the_training_auc(run, tmp_path):
    import duckdb
    aucs = []
    for name, ck in (("rw", "ck-rw"), ("2d", "ck-2d")):
        trained = json.loads((run / f"{name}.json").read_text())
        scored = _score(run, name, tmp_path / name)
        assert trained["world_size"] == 4 and trained["eval_samples"] == scored["rows"] == 600
        assert trained["sparse_groups"] == (2 if name == "2d" else 1)
        for key in ("auc", "logloss", "ne"):
            assert abs(scored[key] - trained[key]) <= 1e-6, (name, key, scored[key], trained[key])
        assert trained["auc"] > 0.7  # a model that learned, not noise
        aucs.append(scored["auc"])
        lines, probs, labels = (np.asarray(c) for c in zip(*duckdb.sql(
            f"SELECT line, prob, label FROM '{tmp_path / name}/*.parquet' ORDER BY line").fetchall()))
        assert lines.tolist() == _good_lines()  # the skipped lines keep their numbers
        truth = [int(x.split("\t")[0]) for x in (run / "good.tsv").read_text().splitlines()]
        assert labels.tolist() == truth
        assert np.abs(probs - _reference_probs(run, ck)).max() < 1e-6
        man = json.loads((tmp_path / name / "_manifest.json").read_text())
        assert man["command"] == "score" and man["rows"] == 600 and man["metrics"]["auc"] == scored["auc"]
        assert man["columns"] == {"line": "int64", "prob": "float32", "label": "int8"}
        spec = json.loads((run / f"ex-{name}" / "model.json").read_text())
        assert spec["world_size"] == 4 and spec["sparse_groups"] == trained["sparse_groups"]
        assert spec["input"]["rows"] == [500] * 26 and spec["quantize"] == "none"
    assert abs(aucs[0] - aucs[1]) > 1e-4  # 2D trained another model: two different checkpoints were read


FRESH = """
import json, sys
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
import model
lines = open(sys.argv[2], "rb").read().splitlines()
net = model.build()
out = []
for rows in (lines, [b"\\t".join(x.split(b"\\t")[1:]) for x in lines]):  # labelled, then without labels
    dense, sparse, labels = model.features(rows)
    with torch.no_grad():
        out.append(torch.sigmoid(net(dense, sparse).squeeze(-1)).numpy())
    print(labels is None)
np.save(sys.argv[3], np.stack(out))
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("graphdist", "partitioners", "embeddings"))))
"""


def test_exported_model_py_turns_criteo_lines_into_the_scored_probabilities_without_graphdist(run, tmp_path):
    for name in ("rw", "int8"):
        _score(run, name, tmp_path / name)
        got = pq.read_table(tmp_path / name / "part-00000.parquet").to_pydict()
        r = subprocess.run([sys.executable, "-c", FRESH, str(run / f"ex-{name}"), str(run / "good.tsv"),
                            str(tmp_path / "p.npy")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        out = r.stdout.strip().splitlines()
        assert out[:2] == ["False", "True"] and json.loads(out[-1]) == []  # graphdist never imported
        probs = np.load(tmp_path / "p.npy")
        assert np.abs(probs - np.asarray(got["prob"])[None, :]).max() < 1e-6


def test_int8_export_is_smaller_and_scores_close_to_float(run, tmp_path):
    from embeddings.export import int8_row_bytes
    spec = json.loads((run / "ex-int8" / "model.json").read_text())
    assert spec["quantize"] == "int8" and int8_row_bytes(16) == 32  # 16 values, fp16 scale and bias, padded
    assert spec["tables_bytes"] == 26 * 500 * 32 == json.loads((run / "ex-rw" / "model.json").read_text())[
        "tables_bytes"] // 2
    sd = torch.load(run / "ex-int8" / "model.pt", weights_only=True)
    assert sd["sparse_arch.embedding_bag_collection.embedding_bags.t_0.weight"].dtype == torch.uint8
    f, q = _score(run, "rw", tmp_path / "f"), _score(run, "int8", tmp_path / "q")
    assert q["quantize"] == "int8" and abs(q["auc"] - f["auc"]) < 2e-3
    pf = np.asarray(pq.read_table(tmp_path / "f" / "part-00000.parquet").column("prob"))
    pq8 = np.asarray(pq.read_table(tmp_path / "q" / "part-00000.parquet").column("prob"))
    assert 0 < np.abs(pf - pq8).max() < 5e-3


def test_criteo_line_numbers_survive_skipped_lines_over_day_files(tmp_path):
    from embeddings.criteo import cache_path, load_criteo, row_lines
    good = "\t".join(["1", *["3"] * 13, *["0000000a"] * 26]) + "\n"
    days = tmp_path / "days"
    days.mkdir()
    (days / "day_0").write_text(good + "bad\n" + good)  # lines 0 1 2
    (days / "day_1").write_text("bad\n" + good + good + "also bad\n" + good)  # lines 3 4 5 6 7
    d = load_criteo(str(days), skip_bad_lines=True, cache_dir=str(tmp_path / "c"))
    assert len(d) == 5 and d.bad_lines == 3
    assert row_lines(str(days), np.arange(5), str(tmp_path / "c")).tolist() == [0, 2, 4, 5, 7]
    cache = Path(cache_path(str(days), str(tmp_path / "c")))
    assert np.load(cache / "skipped.npy").tolist() == [1, 3, 6]
    os.remove(cache / "skipped.npy")  # a cache from before line numbers were kept: built again
    load_criteo(str(days), skip_bad_lines=True, cache_dir=str(tmp_path / "c"))
    assert np.load(cache / "skipped.npy").tolist() == [1, 3, 6]


def _one_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("graphdist: error:"), text
    return lines[0]


def test_refusals_in_one_line(run, tmp_path_factory, tmp_path, capsys):
    from graphdist.cli import main
    from tests.test_outputs_gcn import _user
    gcn = Path(once_per_run(tmp_path_factory, "outputs-user", _user))
    spec = f"criteo:{run / 'eval.tsv'}"
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    afile = tmp_path / "afile"
    afile.write_text("")
    fresh = tmp_path / "fresh.tsv"  # a file no cache was built for
    fresh.write_text((run / "good.tsv").read_text())
    cache = tmp_path / "cache"
    calls = [["score", str(gcn / "exp"), spec, "--out", str(tmp_path / "a")],
             ["score", str(run / "ck-rw"), spec, "--out", str(tmp_path / "b")],
             ["export", "--checkpoint-dir", str(gcn / "ck"), "--out", str(tmp_path / "c"), "--quantize", "int8"],
             ["score", str(run / "ex-rw"), spec, "--skip-bad-lines", "--out", str(full)],
             ["export", "--checkpoint-dir", str(run / "ck-rw"), "--out", str(full)],
             ["score", str(run / "ex-rw"), f"criteo:{fresh}", "--cache-dir", str(cache), "--out", str(afile / "o")],
             ["score", str(run / "ex-rw"), f"criteo:{fresh}", "--cache-dir", str(cache), "--out", str(tmp_path / "d"),
              "--json", str(afile / "m.json")]]
    for argv in calls:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = _one_line(capsys.readouterr().err)
        argv.append(err)
    errs = [c[-1] for c in calls]
    assert "an export of train-gcn (GCN / GraphSAGE / PyG model), but score needs one of train-dlrm" in errs[0]
    assert "a training checkpoint, not an export: run graphdist export --checkpoint-dir" in errs[1]
    assert "--quantize int8: only for a checkpoint of train-dlrm" in errs[2] and "train-gcn" in errs[2]
    assert "full: exists and is not empty; add --overwrite" in errs[3] and "exists and is not empty" in errs[4]
    assert "afile is a file" in errs[5] and "--json" in errs[6] and "afile" in errs[6]
    assert (full / "keep.txt").read_text() == "x" and sorted(p.name for p in full.iterdir()) == ["keep.txt"]
    assert not cache.exists()  # refused before any work: no Criteo cache was built
    assert not any((tmp_path / x).exists() for x in "abcd")


LIMITED = """
import resource, sys
from graphdist.cli import main
from partitioners.sysmem import proc_status_bytes
ck, out = sys.argv[1], sys.argv[2]
assert main(["export", "--checkpoint-dir", ck, "--out", out + "-first"]) == 0  # every module it uses imported
vm = proc_status_bytes("VmData")["VmData"]
for room in (300_000, 20_000_000):  # less than the tables, then enough
    resource.setrlimit(resource.RLIMIT_DATA, (vm + room, resource.RLIM_INFINITY))
    print("exit", main(["export", "--checkpoint-dir", ck, "--out", f"{out}-{room}"]), flush=True)
"""


def test_export_says_what_it_needs_and_refuses_what_will_not_fit(run, tmp_path):
    """Under a ``ulimit -d`` that leaves less than the tables (832,000 bytes) the export stops
    before reading, in one line with the numbers; with room it prints them and goes ahead."""
    r = subprocess.run([sys.executable, "-c", LIMITED, str(run / "ck-rw"), str(tmp_path / "x")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    err = _one_line(r.stderr)
    assert "the unsharded model of" in err and "13,000 table rows 812.5 KiB" in err and "(its ulimit -d / -v)" in err
    assert "needs 860.4 KiB (13,000 table rows 812.5 KiB, dense layers 25.0 KiB, the largest stored chunk 22.9 KiB)" in err
    said = [ln for ln in r.stdout.splitlines() if ln.startswith("export: the unsharded model takes 860.4 KiB")]
    assert len(said) == 2 and [ln for ln in r.stdout.splitlines() if ln.startswith("exit")] == ["exit 2", "exit 0"]
    assert not (tmp_path / "x-300000").exists() and (tmp_path / "x-20000000" / "model.pt").is_file()
