"""train-dlrm on CUDA (skipped without a GPU): smoke and parity on one GPU, and on two GPUs
1D parity (NCCL) and 2D sparse parallelism through torchrec's own DMPCollection against the
same single-process G-replica reference as the CPU path (tests/test_dlrm_2d.py). W = 2, G = 2 has
one rank per sharding group (nothing sharded); on four GPUs W = 4, G = 2 (two ranks per group)
runs exactly the CPU test's cases, job and checks (tests/test_dlrm_2d.py: every sharding type,
the momentum-scaled optimizer, sync every 3 steps, the trainer's report, --sharding auto;
losses and every weight).

GPU kernels sum in other orders than the CPU references, so losses are compared to 1e-4.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from graphdist.testing import run_ranks
from tests.conftest import requires_cuda

GPU_TOL = 1e-4
two_gpus = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                              reason="needs two CUDA GPUs")
four_gpus = pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 4,
                               reason="needs four CUDA GPUs")


def _train(rank, world, kind, sharding):
    from embeddings.job import quiet_torchrec
    quiet_torchrec()
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    from embeddings.trainer import train
    if kind == "2d":
        from tests.test_dlrm_2d import make_cfg
        cfg = make_cfg(sharding, groups=2, device="cuda")
    else:
        from tests.test_dlrm_parity import make_cfg
        cfg = make_cfg(sharding, "rowwise_adagrad")
    rep = train(cfg, dev)
    return {k: rep[k] for k in ("losses", "auc", "world_size", "pipeline", "plan")}


@requires_cuda
def test_one_gpu_smoke_and_parity_with_unsharded_cpu_reference():
    from tests.test_dlrm_parity import STEPS, ref_run
    r = run_ranks(_train, 1, ("1d", "table_wise"), backend="nccl", timeout=600)[0]
    assert r["world_size"] == 1 and r["pipeline"] and len(r["losses"]) == STEPS and np.isfinite(r["auc"])
    np.testing.assert_allclose(r["losses"], ref_run("rowwise_adagrad", 1)[3], atol=GPU_TOL, rtol=0)


@two_gpus
@pytest.mark.parametrize("sharding", ["table_wise", "row_wise", "data_parallel"])
def test_two_gpus_parity_with_unsharded_cpu_reference(sharding):
    from tests.test_dlrm_parity import ref_run
    for r in run_ranks(_train, 2, ("1d", sharding), backend="nccl", timeout=600):
        np.testing.assert_allclose(r["losses"], ref_run("rowwise_adagrad", 1)[3], atol=GPU_TOL, rtol=0)


@two_gpus
@pytest.mark.parametrize("sharding", ["table_wise", "row_wise"])
def test_two_gpus_dmpcollection_matches_replica_reference(sharding):
    """W = 2, G = 2 (sharding groups of one GPU): DMPCollection and its sync()."""
    from tests.test_dlrm_2d import reference
    ref = reference(sharding, "rowwise_adagrad", 1)[0]
    for r in run_ranks(_train, 2, ("2d", sharding), backend="nccl", timeout=600):
        assert r["plan"]["sharding_groups"] == [[0], [1]] and r["plan"]["replica_groups"] == [[0, 1]]
        np.testing.assert_allclose(r["losses"], ref, atol=GPU_TOL, rtol=0)


@pytest.fixture(scope="module")
def four_gpu_ranks():
    """tests/test_dlrm_2d.py's job at W = 4, G = 2, one GPU per rank (NCCL): DMPCollection."""
    from tests.test_dlrm_2d import W, job_reference_runs
    return run_ranks(job_reference_runs, W, ("cuda",), backend="nccl", timeout=600)


def _cases():
    from tests.test_dlrm_2d import ALL_CASES
    return ALL_CASES


@four_gpus
@pytest.mark.parametrize("case", _cases(), ids=["-".join(map(str, c)) for c in _cases()])
def test_four_gpus_dmpcollection_matches_replica_reference(four_gpu_ranks, case):
    """W = 4, G = 2: sharding groups {0,1} {2,3} of two GPUs each, replica groups {0,2} {1,3}
    (``--sparse-layout hosts``, DMPCollection's ``use_inter_host_allreduce=True``), and
    {0,2} {1,3} / {0,1} {2,3} (``torchrec``, DMPCollection's default)."""
    from tests.test_dlrm_2d import check_matches_reference
    check_matches_reference(four_gpu_ranks, case, GPU_TOL, dmp=("DMPCollection", "DMPCollection.sync"))


@four_gpus
def test_four_gpus_sync_matters_and_trainer_report(four_gpu_ranks):
    from tests.test_dlrm_2d import check_trainer_report
    check_trainer_report(four_gpu_ranks, GPU_TOL)


@four_gpus
def test_four_gpus_auto_plans_for_the_sharding_group_and_matches_the_reference(four_gpu_ranks):
    from tests.test_dlrm_2d import check_auto
    check_auto(four_gpu_ranks, GPU_TOL)
