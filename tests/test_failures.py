"""How failures are told apart and named: a peer's own error reaches the rank that sees the
collective fail; local errors are not blamed on peers; every rank must hold the same plan."""
from __future__ import annotations

import pytest
import torch

from graphdist.testing import run_ranks


def _peer_error(rank, world):
    import time

    import torch.distributed as dist

    from graphdist import failures
    from graphdist.errors import ConfigError, DistributedError
    if rank == 1:  # fails on its own input, tells the store, leaves the group
        failures.publish_failure(ConfigError("runs/parts/part_00001.pt: part file for rank 1 not found"))
        dist.destroy_process_group()
        return "left"
    time.sleep(1.0)
    try:
        dist.all_reduce(torch.ones(1))
    except Exception as e:  # noqa: BLE001
        assert failures.is_collective_failure(e), repr(e)
        try:
            failures.raise_peer_failure(e, "epoch 3")
        except DistributedError as de:
            return str(de)
    return "no failure seen"


def test_a_peers_own_error_is_named():
    msg, left = run_ranks(_peer_error, 2, timeout=120)
    assert left == "left"
    assert msg.startswith("rank 0: collective failed during epoch 3: rank 1 failed: "
                          "runs/parts/part_00001.pt: part file for rank 1 not found"), msg


def test_local_errors_are_not_collective_failures():
    from graphdist import failures
    assert not failures.is_collective_failure(torch.OutOfMemoryError("CUDA out of memory"))
    assert not failures.is_collective_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not failures.is_collective_failure(ValueError("gloo"))
    assert failures.is_collective_failure(RuntimeError("[../gloo/transport/tcp/pair.cc:537] Connection reset by peer"))


def _plans(rank, world, same):
    from graphdist import comm
    from graphdist.errors import DistributedError
    try:
        comm.check_same("abc" if same or rank == 0 else "abd", "sharding plan hash")
        return "same"
    except DistributedError as e:
        return str(e)


def test_ranks_must_agree_on_the_plan():
    assert run_ranks(_plans, 2, args=(True,), timeout=120) == ["same", "same"]
    out = run_ranks(_plans, 3, args=(False,), timeout=120)
    assert all(o.startswith("sharding plan hash differs between ranks (rank 0: abc; rank 1: abd, rank 2: abd)")
               for o in out), out


def test_unexpected_errors_keep_their_traceback_and_name_the_rank(capsys):
    from graphdist.launch import guarded

    def bug():
        raise KeyError("not a user error")

    assert guarded(bug) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1] == (
        "graphdist: error: rank 0 of 1 failed with KeyError (traceback above)")


def test_out_of_memory_is_one_line(capsys):
    from graphdist.launch import guarded

    def oom():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    assert guarded(oom) == 1
    err = capsys.readouterr().err
    assert err == "graphdist: error: rank 0 of 1 ran out of memory: CUDA out of memory. Tried to allocate 2.00 GiB\n"


def test_a_user_error_no_rank_printed_is_printed_by_the_launcher_once(tmp_path, monkeypatch, capsys):
    """Every rank hits the same user error and only rank 0 prints it. When rank 1 exits first and
    the agent stops rank 0 before it said why (seen on a loaded box: the launcher returned 2 with
    nothing printed), rank 1's line, left in its torch error file, is printed by the launcher. When
    rank 0 printed it, and was then stopped before its exit code said so (also seen: two lines),
    the launcher adds nothing."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from graphdist.errors import ConfigError
    from graphdist.launch import _workers_failed, guarded
    line = "--partition p: cut from a graph with fingerprint 1 but this graph has fingerprint 2"

    def bad_input():
        raise ConfigError(line)

    files = {r: tmp_path / f"error{r}.json" for r in (0, 1)}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(files[1]))
    assert guarded(bad_input) == 2
    assert capsys.readouterr().err == ""  # rank 1 does not print a line every rank prints alike

    def failed(rank0_exit):
        fails = {1: ProcessFailure(1, 11, 2, str(files[1]))}
        if rank0_exit is not None:
            fails[0] = ProcessFailure(0, 10, rank0_exit, str(files[0]))
        return ChildFailedError("graphdist.worker", fails)

    for rank0 in (-15, None):  # stopped by the agent before it got there, or not failed yet
        assert _workers_failed(failed(rank0), 2) == 2
        assert capsys.readouterr().err == f"graphdist: error: {line}\n"
    monkeypatch.setenv("RANK", "0")  # rank 0 got there: it printed, the launcher adds nothing
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(files[0]))
    assert guarded(bad_input) == 2
    assert capsys.readouterr().err == f"graphdist: error: {line}\n"
    for rank0 in (2, -15):  # exited 2, or stopped by the agent after printing
        assert _workers_failed(failed(rank0), 2) == 2
        assert capsys.readouterr().err == ""
