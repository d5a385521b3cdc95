"""The README's main job, ``graphdist demo``, runs both workloads end to end and summarises them."""
from __future__ import annotations

import json

from graphdist.cli import main


def test_demo_runs_gcn_and_dlrm(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "== demo summary ==" in out and "GCN : test accuracy" in out and "DLRM: AUC" in out
    gcn = json.loads((tmp_path / "gcn_report.json").read_text())
    dlrm = json.loads((tmp_path / "dlrm_report.json").read_text())
    assert gcn["world_size"] == 2 and gcn["test_acc"] > 0.8
    assert dlrm["world_size"] == 2 and dlrm["auc"] > 0.7
