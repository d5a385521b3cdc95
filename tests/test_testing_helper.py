"""The multi-process helper: results in rank order, failures surface, hung ranks are killed."""
from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from graphdist.testing import RankFailure, RankTimeout, run_ranks


def _allreduce(rank, world, base):
    t = torch.tensor([float(rank + base)])
    dist.all_reduce(t)
    return rank, float(t)


def _fail_on_1(rank, world):
    if rank == 1:
        raise ValueError("boom on purpose")
    return rank


def _hang_on_1(rank, world):
    if rank == 1:
        time.sleep(600)
    return rank


def _alltoall(rank, world):
    inp = torch.arange(world, dtype=torch.float32) + 10 * rank
    out = torch.empty(world)
    dist.all_to_all_single(out, inp)
    return out.tolist()


def test_results_in_rank_order():
    assert run_ranks(_allreduce, 3, args=(1,), timeout=120) == [(0, 6.0), (1, 6.0), (2, 6.0)]


def test_gloo_all_to_all_single():
    assert run_ranks(_alltoall, 2, timeout=120) == [[0.0, 10.0], [1.0, 11.0]]


def test_failure_carries_rank_and_traceback():
    with pytest.raises(RankFailure, match=r"(?s)rank 1 failed.*boom on purpose"):
        run_ranks(_fail_on_1, 2, timeout=120)


def test_hung_rank_fails_within_timeout():
    t0 = time.monotonic()
    with pytest.raises(RankTimeout, match=r"ranks \[1\] did not finish within 20s"):
        run_ranks(_hang_on_1, 2, timeout=20)
    assert time.monotonic() - t0 < 45


def _tensor_result(rank, world):
    return {"t": torch.full((2,), float(rank)), "rank": rank}


def test_tensor_results_survive_child_exit():
    out = run_ranks(_tensor_result, 2, timeout=120)
    assert [o["t"].tolist() for o in out] == [[0.0, 0.0], [1.0, 1.0]]
