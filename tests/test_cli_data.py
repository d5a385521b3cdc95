"""``graphdist --help`` and ``graphdist data info``."""
from __future__ import annotations

import json
import subprocess
import sys

from graphdist.cli import main


def test_help_lists_data():
    r = subprocess.run([sys.executable, "-m", "graphdist", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "data" in r.stdout


def test_data_info_default_sbm(capsys):
    assert main(["data", "info", "sbm:nodes=500,classes=2,avg_degree=4,features=3"]) == 0
    out = capsys.readouterr().out
    assert "nodes" in out and "500" in out and "fingerprint" in out and "split train/val/test" in out


def test_data_info_json(capsys, cora_dir):
    assert main(["data", "info", f"planetoid:{cora_dir}", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["nodes"] == 2708 and s["edges"] == 10556 and s["classes"] == 7 and s["features"] == 1433
    assert s["train"] == 140 and s["degree_max"] == 168 and len(s["fingerprint"]) == 16
