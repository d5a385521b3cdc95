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


def test_rank_filter_shows_rank_0_and_names_a_hidden_failure(tmp_path):
    """``--local-ranks-filter 0``: rank 0's output only; rank 1's failure, whose own output is
    filtered out, is one line naming rank 1 and its exit code."""
    script, said = tmp_path / "r.py", tmp_path / "rank0-printed"
    # rank 1 fails only once rank 0 has printed: otherwise, on a loaded box, the agent could stop a
    # rank 0 still starting when rank 1 failed, and there would be no output of rank 0 to show
    script.write_text("import os, sys, time\nprint('hello from', os.environ['RANK'], flush=True)\n"
                      f"said = {str(said)!r}\n"
                      "if os.environ['RANK'] == '0':\n    open(said, 'w').close()\n    sys.exit(0)\n"
                      "while not os.path.exists(said):\n    time.sleep(0.05)\nsys.exit(3)\n")
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-m", "graphdist.gnn.pyg.run", "--nproc-per-node", "2",
                          "--local-ranks-filter", "0", str(script)], capture_output=True, text=True, env=env,
                         timeout=240)
    assert out.returncode == 1, out.stderr
    assert out.stdout.splitlines() == ["hello from 0"], out.stdout
    lines = out.stderr.strip().splitlines()
    assert lines == [f"graphdist: error: rank 1 of {script} failed with exit code 3 (its output is not shown: "
                     "--local-ranks-filter 0)"], lines
