"""A checkpoint survives a crash at any point of a save: the writer is killed (SIGKILL) before
each file-system step of a save in turn; ``latest`` must then name a complete snapshot holding
either the old or the new values (never a mix, never nothing), and the next save must work."""
from __future__ import annotations

import os
import signal
import warnings
from pathlib import Path

import pytest
import torch

from graphdist.testing import fork, pipe
from tests.ckpt_crash_entry import main


def _writer(root: Path, stop_at: int, scenario: str) -> str:
    """The writer in a process forked from the rank server (torch imported once, not per kill)."""
    mine, theirs = pipe()
    p = fork(main, (str(root), stop_at, scenario, theirs))
    try:
        line = mine.recv() if mine.poll(120) else ""
        if line == "PAUSED":
            os.kill(p.pid, signal.SIGKILL)  # a crash: no cleanup, no atexit, nothing flushed later
        p.join(timeout=60)
        assert line, f"the writer said nothing (exit code {p.exitcode})"
        return line
    finally:
        if p.is_alive():
            p.kill()
            p.join()


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
