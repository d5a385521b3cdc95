"""A script using ``graphdist.gnn.pyg`` without ``gd.main`` that fails with a graphdist error: one
line, once (not once per rank), exit code 2; under ``python -m graphdist.gnn.pyg.run`` at k = 2
nothing else is printed (torchrun would add its own report of the failed workers)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import graphdist.gnn.pyg as gd
part = gd.load_part("sbm:nodes=60,classes=3,avg_degree=4,features=4,seed=0")
from torch_geometric.nn import GraphNorm
gd.distribute(GraphNorm(4), part)
"""


def _run(args, tmp_path):
    script = tmp_path / "bad.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args, str(script)], capture_output=True, text=True, env=env, timeout=240)


def test_two_rank_script_error_is_printed_once(tmp_path):
    out = _run(["-m", "graphdist.gnn.pyg.run", "--nproc-per-node", "2"], tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphdist: error: layer <model> (GraphNorm) is not local"), lines
