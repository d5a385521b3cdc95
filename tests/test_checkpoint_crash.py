"""A checkpoint survives a crash at any point of a save: the writer is killed (SIGKILL) before
each file-system step of a save in turn; ``latest`` must then name a complete snapshot holding
either the old or the new values (never a mix, never nothing), and the next save must work."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _writer(root: Path, stop_at: int, scenario: str) -> str:
    p = subprocess.Popen([sys.executable, "-m", "tests.ckpt_crash_entry", str(root), str(stop_at), scenario],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    line = p.stdout.readline().strip()
    if line == "PAUSED":
        p.send_signal(signal.SIGKILL)  # a crash: no cleanup, no atexit, nothing flushed later
    _, err = p.communicate(timeout=120)
    assert line, err[-2000:]
    return line


def _read(root: Path):
    from graphdist.checkpoint import Checkpointer
    c = Checkpointer(root)
    snap = c.latest()
    assert snap is not None, sorted(os.listdir(root))
    state = {"w": torch.zeros(64)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        meta = c.load(snap, state)
    return snap, meta, state["w"]


@pytest.mark.parametrize("scenario, old, new", [("new", (1, 1.0), (2, 2.0)), ("same", (1, 1.0), (1, 3.0))])
def test_kill_at_every_step_of_a_save_leaves_a_complete_latest(tmp_path, scenario, old, new):
    done = _writer(tmp_path / "dry", 10**9, scenario)
    steps = int(done.split()[1])
    assert steps >= 6, done  # mkdir, DCP write, fsyncs, renames: the kill points are real
    seen = set()
    for i in range(1, steps + 1):
        root = tmp_path / f"kill{i}"
        assert _writer(root, i, scenario) == "PAUSED"
        snap, meta, w = _read(root)
        got = (int(meta["step"]), float(w[0]))
        assert got in (old, new), (i, snap, got)
        assert bool((w == w[0]).all()), (i, snap)  # one snapshot's values, never a mix
        assert meta["history"]["v"] == got[1]
        seen.add(got)
        # resuming after the crash: the next save works and becomes latest
        from graphdist.checkpoint import Checkpointer
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Checkpointer(root, keep=2).save(5, {"w": torch.full((64,), 5.0)}, {"history": {"v": 5.0}})
        assert (int(_read(root)[1]["step"]), float(_read(root)[2][0])) == (5, 5.0)
        assert not [n for n in os.listdir(root) if n.endswith(".tmp")], os.listdir(root)
    assert seen == {old, new}  # early kills keep the old snapshot, late ones the new
