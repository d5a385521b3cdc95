"""Training curves: ``--tensorboard DIR`` writes event files that TensorBoard's own reader loads
(every trainer, through the one loop), and ``graphdist report`` draws runs side by side."""
from __future__ import annotations

import json

import pytest

from graphdist.cli import main


def _scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_train_gcn_writes_its_curves_for_tensorboard(tmp_path):
    rep, tb = tmp_path / "r.json", tmp_path / "tb"
    assert main(["train-gcn", "sbm:nodes=300,classes=3,avg_degree=5,features=8", "--epochs", "6", "--no-progress",
                 "--report", str(rep), "--tensorboard", str(tb)]) == 0
    got, losses = _scalars(tb), json.loads(rep.read_text())["losses"]
    assert [s for s, _ in got["losses"]] == list(range(1, 7))
    assert [v for _, v in got["losses"]] == pytest.approx(losses, rel=1e-6)
    assert {"val_acc", "test_acc", "epoch_s", "comm/halo_bytes_per_epoch", "mem/peak_rss_bytes"} <= set(got)
    assert all(v > 0 for _, v in got["mem/peak_rss_bytes"])


def test_train_dlrm_charts_each_step_and_a_resume_adds_the_rest(tmp_path):
    """DLRM's losses arrive at the end of each checkpoint segment; each is charted at its own step,
    and a resumed run adds only the steps it ran."""
    tb, ck = tmp_path / "tb", tmp_path / "ck"
    run = ["train-dlrm", "criteo-synth:rows=2000", "--batch-size", "64", "--no-progress", "--checkpoint-dir", str(ck),
           "--checkpoint-every", "3", "--tensorboard", str(tb)]
    assert main(run + ["--steps", "6"]) == 0
    assert main(run + ["--steps", "9", "--resume"]) == 0
    steps = sorted(s for s, _ in _scalars(tb)["losses"])
    assert steps == list(range(1, 10))


def test_report_prints_and_plots_runs_side_by_side(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"losses": [1.0, 0.8, 0.5], "val_acc": [0.3, 0.5, 0.6]}))
    b.write_text(json.dumps({"losses": [0.7, 0.6], "eval": [{"epoch": 2, "recall@20": 0.4, "ndcg@20": 0.2}]}))
    png = tmp_path / "c.png"
    assert main(["report", str(a), str(b), "--plot", str(png)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["a: 3 epochs, final loss 0.5000, best val_acc 0.6000",
                       "b: 2 epochs, final loss 0.6000, best recall@20 0.4000, best ndcg@20 0.2000"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # nan: not measured (an empty validation or test split), wherever it stands in the curve
    c = tmp_path / "c.json"
    c.write_text(json.dumps({"losses": [0.7, 0.6], "val_acc": [float("nan"), 0.5, 0.4],
                             "eval": [{"epoch": 2, "recall@20": float("nan"), "ndcg@20": float("nan")}]}))
    assert main(["report", str(c)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "c: 2 epochs, final loss 0.6000, best val_acc 0.5000, recall@20 not measured, ndcg@20 not measured"]
    (tmp_path / "bad.json").write_text("{")
    assert main(["report", str(tmp_path / "bad.json")]) == 2
    assert main(["report", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "bad.json:1: not a JSON report" in err[0] and "none.json not found" in err[1], err
