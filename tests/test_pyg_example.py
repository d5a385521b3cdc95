"""``examples/gat_cora.py`` as a user runs it: under ``torchrun --nproc-per-node 2`` (gloo) it prints
the losses a plain one-process run prints (dropout off, so the runs must agree) and writes the same
predictions with ``--out``, and a bad data
argument ends in one line with exit code 2."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO

SPEC = "sbm:nodes=400,classes=3,avg_degree=6,homophily=0.8,features=16,seed=0"
ARGS = ["--epochs", "4", "--dropout", "0", "--log-every", "1", "--hidden", "4", "--heads", "2"]


def _run(cmd, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def _losses(out: str) -> list[float]:
    return [float(v) for v in re.findall(r"loss (\d+\.\d+)", out)]


def test_example_under_torchrun_matches_one_process(tmp_path):
    script = str(REPO / "examples" / "gat_cora.py")
    one = _run([sys.executable, script, SPEC, *ARGS, "--out", str(tmp_path / "p1")])
    assert one.returncode == 0, one.stderr[-2000:]
    two = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                script, SPEC, *ARGS, "--out", str(tmp_path / "p2")])
    assert two.returncode == 0, two.stderr[-2000:]
    a, b = _losses(one.stdout), _losses(two.stdout)
    assert len(a) == 4 and len(b) == 4, (one.stdout, two.stdout)
    assert all(abs(x - y) <= 1e-5 * x for x, y in zip(a, b)), (a, b)
    assert a[-1] < a[0]  # it learns
    assert "2 rank(s); halo: conv1 plain, conv2 plain" in two.stdout
    assert "1 rank(s)" in one.stdout
    import numpy as np
    import pandas as pd
    p1, p2 = (pd.read_parquet(tmp_path / d).sort_values("node_id") for d in ("p1", "p2"))  # --out: its predictions
    assert p1.node_id.tolist() == p2.node_id.tolist() == list(range(400))
    assert np.allclose(np.stack(p1.logits), np.stack(p2.logits), atol=1e-4)


def test_example_bad_data_is_one_line():
    r = _run([sys.executable, str(REPO / "examples" / "gat_cora.py"), "sbm:nodes=1", "--epochs", "1"])
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("graphdist: error: sbm:"), r.stderr
