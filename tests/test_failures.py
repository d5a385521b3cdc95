"""How failures are told apart and named: a peer's own error reaches the rank that sees the
collective fail; local errors are not blamed on peers; every rank must hold the same plan."""
from __future__ import annotations

import pytest
import torch

from graphdist.testing import run_ranks


def _peer_error(rank, world):
    import time

    import torch.distributed as dist

    from graphdist import comm
    from graphdist.errors import ConfigError, DistributedError
    if rank == 1:  # fails on its own input, tells the store, leaves the group
        comm.publish_failure(ConfigError("runs/parts/part_00001.pt: part file for rank 1 not found"))
        dist.destroy_process_group()
        return "left"
    time.sleep(1.0)
    try:
        dist.all_reduce(torch.ones(1))
    except Exception as e:  # noqa: BLE001
        assert comm.is_collective_failure(e), repr(e)
        try:
            comm.raise_peer_failure(e, "epoch 3")
        except DistributedError as de:
            return str(de)
    return "no failure seen"


def test_a_peers_own_error_is_named():
    msg, left = run_ranks(_peer_error, 2, timeout=120)
    assert left == "left"
    assert msg.startswith("rank 0: collective failed during epoch 3: rank 1 failed: "
                          "runs/parts/part_00001.pt: part file for rank 1 not found"), msg


def test_local_errors_are_not_collective_failures():
    from graphdist import comm
    assert not comm.is_collective_failure(torch.OutOfMemoryError("CUDA out of memory"))
    assert not comm.is_collective_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not comm.is_collective_failure(ValueError("gloo"))
    assert comm.is_collective_failure(RuntimeError("[../gloo/transport/tcp/pair.cc:537] Connection reset by peer"))


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
