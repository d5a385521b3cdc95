"""Progress in a log: whole lines at each tenth of the run (and at least every EVERY_S seconds while
it advances), never a redrawn bar; tqdm's bar only on a terminal."""
from __future__ import annotations

import io
import re

from graphdist.progress import EVERY_S, LogLines, progress


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_lines_at_each_tenth_with_rate_time_left_and_values():
    out, clock = io.StringIO(), Clock()
    bar = LogLines(20, desc="train-gcn", unit="epoch", stream=out, clock=clock)
    for i in range(1, 21):
        clock.t += 0.5  # 2 epochs per second
        bar.set_postfix({"loss": f"{1 / i:.4f}", "val": 0.5})
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and "\r" not in out.getvalue()
    assert lines[0] == "train-gcn: epoch 2/20 (10%), 2 epoch/s, 9s left, loss=0.5000, val=0.5"
    assert lines[4] == "train-gcn: epoch 10/20 (50%), 2 epoch/s, 5s left, loss=0.1000, val=0.5"
    assert lines[-1] == "train-gcn: epoch 20/20 (100%), 2 epoch/s, loss=0.0500, val=0.5"


def test_a_slow_run_gets_a_line_at_least_every_interval_and_a_stopped_one_where_it_stopped():
    out, clock = io.StringIO(), Clock()
    bar = LogLines(1000, desc="train-dlrm", unit="step", initial=400, stream=out, clock=clock)
    for _ in range(3):  # 3 steps, each slower than the interval: a line each (no tenth crossed)
        clock.t += EVERY_S + 1
        bar.update(1)
    clock.t += 1
    bar.update(1)  # within the interval, no tenth: no line
    bar.close()  # stopped at 404: where it stopped
    epochs = [int(m) for m in re.findall(r"step (\d+)/1000", out.getvalue())]
    assert epochs == [401, 402, 403, 404], out.getvalue()
    assert out.getvalue().splitlines()[0].startswith("train-dlrm: step 401/1000 (40%), 0.0164 step/s, 10h0")


def test_a_bar_on_a_terminal_lines_in_a_file_nothing_when_off(tmp_path):
    class Tty(io.StringIO):
        def isatty(self):
            return True
    from tqdm import tqdm
    assert isinstance(progress(5, desc="x", unit="u", stream=Tty()), tqdm)
    with open(tmp_path / "log", "w") as f:
        assert isinstance(progress(5, desc="x", unit="u", stream=f), LogLines)
    off = progress(5, desc="x", unit="u", enabled=False, stream=Tty())
    off.update(5)
    off.close()


def test_a_training_run_writes_whole_progress_lines_into_a_log(capsys):
    """stderr captured (not a terminal), as `2> run.log`: one line per tenth of the epochs, no bar."""
    from graphdist.cli import main
    assert main(["train-gcn", "sbm:nodes=200,classes=2,avg_degree=4,features=4", "--epochs", "20", "--hidden", "4"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "it/s" not in err and "|" not in err, err[:500]
    shown = [int(m) for m in re.findall(r"^train-gcn: epoch (\d+)/20 \(\d+%\)", err, re.M)]
    assert {2, 4, 6, 8, 10, 12, 14, 16, 18, 20} <= set(shown) and shown == sorted(shown), err
