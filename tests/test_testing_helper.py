"""The multi-process helper: results in rank order, failures surface, hung ranks are killed."""
from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from graphdist.testing import RankFailure, RankTimeout, run_ranks


def _collectives(rank, world, base):
    """An all-reduce, an all-to-all and a tensor result, in one job."""
    t = torch.tensor([float(rank + base)])
    dist.all_reduce(t)
    inp = torch.arange(world, dtype=torch.float32) + 10 * rank
    out = torch.empty(world)
    dist.all_to_all_single(out, inp)
    return rank, float(t), out.tolist(), {"t": torch.full((2,), float(rank))}


def _fail_on_1(rank, world):
    if rank == 1:
        raise ValueError("boom on purpose")
    return rank


def _hang_on_1(rank, world, pid_file=None):
    if rank == 1:
        if pid_file:
            with open(pid_file, "w") as f:
                f.write(str(os.getpid()))
        time.sleep(3600)
    return rank


def test_results_in_rank_order_and_collectives():
    out = run_ranks(_collectives, 3, args=(1,), timeout=120)
    assert [o[:2] for o in out] == [(0, 6.0), (1, 6.0), (2, 6.0)]
    assert [o[2] for o in out] == [[0.0, 10.0, 20.0], [1.0, 11.0, 21.0], [2.0, 12.0, 22.0]]
    # tensors come back as bytes, not shared-memory handles that die with the child
    assert [o[3]["t"].tolist() for o in out] == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]


def test_failure_carries_rank_and_traceback():
    with pytest.raises(RankFailure, match=r"(?s)rank 1 failed.*boom on purpose"):
        run_ranks(_fail_on_1, 2, timeout=120)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # (a zombie has ended)
    except FileNotFoundError:
        return True


def test_hung_rank_fails_within_timeout(tmp_path):
    """The hung rank (asleep for an hour) is killed once the timeout is up: the call raises, having
    waited the timeout and not the rank, and the rank's process is gone (at any load: no bound on
    how long the machine took to start the ranks)."""
    pid_file = tmp_path / "pid"
    t0 = time.monotonic()
    with pytest.raises(RankTimeout, match=r"ranks \[1\] did not finish within 15s"):
        run_ranks(_hang_on_1, 2, args=(str(pid_file),), timeout=15)  # (ample for a loaded box to start it)
    assert time.monotonic() - t0 >= 15
    assert _gone(int(pid_file.read_text()))


def test_run_cli_runs_each_command_on_the_ranks_and_keeps_what_rank_0_printed(tmp_path):
    """Two commands in one forked job: a 2-rank training (a fresh group after the first run
    destroyed its own) and a bad flag (exit 2, its one line)."""
    from tests.cli_ranks import run_cli
    rep = tmp_path / "r.json"
    (ok, text), (bad, said) = run_cli([
        ["train-gcn", "sbm:nodes=120,classes=2,avg_degree=4,features=4,seed=0", "--parts", "2", "--method", "random",
         "--epochs", "2", "--nproc", "2", "--no-progress", "--report", str(rep)],
        ["train-gcn", "sbm:nodes=120", "--epochs", "-1"]], 2, timeout=120)
    assert ok == 0 and "world size 2" in text, text[-2000:]
    import json
    assert json.loads(rep.read_text())["world_size"] == 2
    assert bad == 2 and said.strip().startswith("graphdist: error: ") and "--epochs" in said, said


def _say_then_wait(conn):
    import os
    conn.send(("pid", os.getpid(), os.environ.get("FORK_PROBE")))
    time.sleep(600)


def test_fork_runs_a_function_with_the_callers_environment_and_can_be_killed(monkeypatch):
    import signal

    from graphdist.testing import fork, pipe
    monkeypatch.setenv("FORK_PROBE", "here")  # set after the server started: the caller's now
    run_ranks(_collectives, 1, args=(0,), timeout=120)  # (the server exists before this fork)
    mine, theirs = pipe()
    p = fork(_say_then_wait, (theirs,))
    assert mine.poll(60), "the forked function said nothing"
    assert mine.recv() == ("pid", p.pid, "here")
    os.kill(p.pid, signal.SIGKILL)
    p.join(timeout=30)
    assert p.exitcode == -signal.SIGKILL


def _never_runs(rank, world_size):
    raise AssertionError("fn ran without a process group")


def test_a_group_that_does_not_form_is_started_again_once_then_named():
    """A rank that cannot join (here: a backend that does not exist) is not the job's failure:
    the job is started again from a fresh store, and after a second try the error says so,
    with the rank's traceback; ``fn`` never runs."""
    import pytest

    from graphdist.testing import RankFailure, run_ranks
    with pytest.raises(RankFailure, match="(?s)the process group did not form twice.*could not join.*nosuch"):
        run_ranks(_never_runs, 2, backend="nosuch", timeout=60)
