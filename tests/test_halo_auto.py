"""``--halo auto``: the exact mode with the lower predicted epoch time, resolved before anything
is built, recorded in the report, equal to the same run with that mode given."""
from __future__ import annotations

import json
import subprocess
import sys

from graphdist.gnn.plan import PlanConfig, plan

SPEC = "sbm:nodes=3000,classes=4,avg_degree=12,features=32,seed=0"
RUN = ["train-gcn", SPEC, "--parts", "2", "--method", "metis", "--hidden", "16", "--epochs", "3", "--no-progress"]


def _train(tmp_path, name, flags):
    rep = tmp_path / f"{name}.json"
    r = subprocess.run([sys.executable, "-m", "graphdist", *RUN, "--nproc", "2", "--report", str(rep), *flags],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(rep.read_text()), r.stderr


def test_auto_picks_a_mode_and_trains_as_that_mode(tmp_path):
    # a slow modelled link: bytes decide, and mvc moves fewer of them on this graph
    auto, err = _train(tmp_path, "auto", ["--halo", "auto", "--link-gbps", "0.05"])
    choice = auto["comm/halo_auto"]
    assert set(choice["modes"]) == {"plain", "mvc"} and choice["link"].startswith("given")
    b = {m: d["comm/halo_bytes_per_epoch"] for m, d in choice["modes"].items()}
    assert b["mvc"] < b["plain"]
    assert choice["chosen"] == auto["comm/halo"] == "mvc"
    assert "--halo auto: mvc" in err
    # the prediction's bytes are the trainer's own count of the chosen mode
    assert b["mvc"] == auto["comm/halo_bytes_per_epoch"]
    # the chosen mode given by hand: the same run, bit for bit
    fixed, _ = _train(tmp_path, "mvc", ["--halo", "mvc", "--link-gbps", "0.05"])
    assert fixed["losses"] == auto["losses"] and fixed["comm/halo_auto"] is None


def test_auto_on_a_measured_link(tmp_path):
    auto, _ = _train(tmp_path, "auto", ["--halo", "auto"])
    choice = auto["comm/halo_auto"]
    assert choice["link"] == "measured at start-up" and choice["link_bytes_per_s"] > 0
    assert choice["link_latency_s"] >= 0
    fastest = min(choice["modes"], key=lambda m: (choice["modes"][m]["time/epoch_s"], m != "mvc"))
    assert auto["comm/halo"] == choice["chosen"] == fastest
    assert choice["modes"][fastest]["comm/halo_bytes_per_epoch"] == auto["comm/halo_bytes_per_epoch"]


def test_plan_auto_is_the_fastest_exact_mode_of_its_table():
    base = dict(spec=SPEC, parts=2, method="metis", hidden=16, spmm_rate=1e9)
    for gbps in (0.05, 1000.0):
        out = plan(PlanConfig(halo="auto", link_gbps=gbps, **base))
        exact = [c for c in out["comm/choices"] if c["exact"]]
        assert out["comm/halo"] == exact[0]["comm/halo"]
        assert out["comm/halo_bytes_per_epoch"] == exact[0]["comm/halo_bytes_per_epoch"]
    assert plan(PlanConfig(halo="auto", link_gbps=0.05, **base))["comm/halo"] == "mvc"
