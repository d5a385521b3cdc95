"""The one training loop (:func:`graphdist.loop.run_loop`) on a small fake task, in the test's
own processes: what every trainer inherits from it (signals agreed across ranks, checkpoint
cadence, SIGTERM's checkpoint of the stopping unit, resume to the unbroken result, the settings
check) is tested here once; each trainer keeps one end-to-end signal/resume test of its own."""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import pytest
import torch

from graphdist.loop import Task
from graphdist.testing import run_ranks


@dataclass
class Settings:
    lr: float = 0.5
    """changes the result: a resume with another value is refused"""
    epochs: int = 8
    """may change on resume"""


class Counter(Task):
    """A task whose state is one tensor: unit t adds ``lr * t`` to it (rank-independent, so every
    rank holds the same value); the history records it after each unit. ``signal_at``: this rank
    sends itself ``sig`` during that unit, as a terminal or a scheduler would."""

    def __init__(self, lr=0.5, signal_at=None, sig=signal.SIGINT):
        self.w, self.lr = torch.zeros(1), lr
        self.history = {"w": []}
        self.signal_at, self.sig = signal_at, sig

    def run(self, units):
        for t in units:
            self.w += self.lr * t
            self.history["w"].append(float(self.w))
            if t == self.signal_at:
                os.kill(os.getpid(), self.sig)
            yield None

    def state(self):
        return {"w": self.w}

    def loaded(self, state):
        self.w = state["w"]


def _loop(task, ck, total, resume=False, lr=0.5):
    from graphdist.loop import LoopConfig, run_loop
    lc = LoopConfig(total=total, checkpoint_dir=ck, checkpoint_every=2, resume=resume, progress=False,
                    settings=Settings(lr=lr, epochs=total), identity={"graph": "g0"})
    return run_loop(task, lc)


def _stop_and_resume(rank, world, ck, sig, signal_rank):
    """Rank ``signal_rank`` gets ``sig`` during unit 5 of 8; every rank must stop after unit 5,
    say where, and a resume must reach the unbroken run's history."""
    import warnings
    warnings.filterwarnings("ignore")  # DCP's notes
    from graphdist.errors import Interrupted
    out = {}
    try:
        _loop(Counter(signal_at=5 if rank == signal_rank else None, sig=sig), ck, 8)
    except Interrupted as e:
        out["code"], out["message"] = e.exit_code, str(e)
    rest = Counter()
    res = _loop(rest, ck, 8, resume=True)
    out["resumed_from"], out["w"], out["history"] = res.start, float(rest.w), rest.history["w"]
    try:
        _loop(Counter(lr=0.25), ck, 9, resume=True, lr=0.25)
    except Exception as e:  # noqa: BLE001 - the refusal is the point
        out["changed_lr"] = f"{type(e).__name__}: {e}"
    return out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_on_one_rank_stops_every_rank_after_the_same_unit_and_resumes(tmp_path, sig):
    unbroken = [0.5 * t * (t + 1) / 2 for t in range(1, 9)]
    outs = run_ranks(_stop_and_resume, 2, args=(str(tmp_path / "ck"), sig, 1), timeout=120)
    for rank, out in enumerate(outs):
        name = signal.Signals(sig).name
        assert out["code"] == 128 + sig, out
        # SIGINT stops after the unit, from the last cadence checkpoint (unit 4); SIGTERM (a
        # scheduler's preemption) checkpoints the stopping unit first
        saved = 4 if sig == signal.SIGINT else 5
        assert out["message"] == (f"{name} after epoch 5 of 8; latest checkpoint "
                                  f"{tmp_path / 'ck' / f'step_{saved:08d}'}; continue with --resume"), out
        assert out["resumed_from"] == saved
        assert out["history"] == unbroken and out["w"] == unbroken[-1]
        assert out["changed_lr"].startswith("ConfigError") and "lr" in out["changed_lr"], out


def test_cadence_and_a_run_without_checkpoints():
    from graphdist.loop import _segments
    assert [list(s) for s in _segments(0, 7, 3)] == [[1, 2, 3], [4, 5, 6], [7]]
    assert [list(s) for s in _segments(4, 7, 0)] == [[5, 6, 7]]
    assert run_ranks(_no_checkpoints, 1, timeout=60) == [
        "SIGINT after epoch 2 of 5; no checkpoint (no --checkpoint-dir)"]


def _no_checkpoints(rank, world):
    from graphdist.errors import Interrupted
    from graphdist.loop import LoopConfig, run_loop
    try:
        run_loop(Counter(signal_at=2), LoopConfig(total=5, progress=False))
    except Interrupted as e:
        return str(e)
