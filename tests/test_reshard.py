"""Resume on another number of ranks or another partition (resharding): a GCN's weights and
Adam state are the same on every rank, so a checkpoint written at k = 4 continues at k = 2 or
k = 1 on other partitions of the same graph, to the losses of the unbroken k = 4 run (k ranks
compute what one process computes, up to the order of float sums). The runs are ``graphdist
train-gcn`` on ranks forked as torchrun's workers (:func:`tests.cli_ranks.run_cli`): the launcher
itself is tested in ``test_launch.py``."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.cli_ranks import run_cli

SPEC = "sbm:nodes=600,classes=3,avg_degree=6,features=8,seed=2"
RUN = ["train-gcn", SPEC, "--no-progress", "--hidden", "16"]
METIS = ["--method", "metis"]


def _report(path):
    return json.loads(path.read_text())


def _train(k: int, *argvs) -> list[str]:
    """Each ``argv`` (after ``train-gcn SPEC``) in turn on ``k`` forked ranks; rank 0's output."""
    runs = run_cli([RUN + list(a) + ["--nproc", str(k)] for a in argvs], k)
    for code, text in runs:
        assert code == 0, text[-3000:]
    return [text for _, text in runs]


def test_a_k4_checkpoint_resumes_at_k2_and_k1_with_the_unbroken_losses(tmp_path):
    whole = tmp_path / "whole.json"
    ck = tmp_path / "ck4"
    _train(4, METIS + ["--parts", "4", "--epochs", "8", "--report", str(whole)],
           METIS + ["--parts", "4", "--epochs", "4", "--checkpoint-dir", str(ck)])
    shutil.copytree(ck, tmp_path / "ck4-copy")
    want = _report(whole)
    # k = 2 on another partitioner's parts: the partitioner is free when the state reshards
    for k, d, method in ((2, ck, ["--method", "random"]), (1, tmp_path / "ck4-copy", METIS)):
        rep = tmp_path / f"k{k}.json"
        [text] = _train(k, method + ["--parts", str(k), "--epochs", "8", "--checkpoint-dir", str(d), "--resume",
                                     "--report", str(rep)])
        got = _report(rep)
        assert got["world_size"] == k and len(got["losses"]) == 8
        assert got["losses"][:4] == want["losses"][:4]  # the history came with the checkpoint
        assert got["losses"][4:] == pytest.approx(want["losses"][4:], rel=1e-5, abs=1e-6)
        was = got["run/resharded_from"]
        assert was["world_size"] == 4 and isinstance(was["partition_id"], str)
        if k > 1:  # (rank 0 logs it)
            assert "resharded from world_size 4" in text
        if k > 1:  # the traffic reported is this partition's, not the old one's
            assert got["comm/halo_bytes_per_epoch"] != want["comm/halo_bytes_per_epoch"]


def test_a_stale_checkpoint_resumes_on_another_world_with_fresh_halo_rows(tmp_path):
    """Stale halo rows belong to the cut that wrote them: a resume at another world size carries
    the weights and Adam state over, says in one line that the held rows do not, and its first
    epoch exchanges fresh rows. That epoch's loss is then the exact loss of the saved weights,
    which a one-rank resume (no halo at all) computes too."""
    ck = tmp_path / "ck"
    run = METIS + ["--halo-staleness", "1"]
    _train(4, run + ["--parts", "4", "--epochs", "3", "--checkpoint-dir", str(ck)])
    shutil.copytree(ck, tmp_path / "ck-copy")
    got = {}
    for k, d in ((2, ck), (1, tmp_path / "ck-copy")):
        rep = tmp_path / f"k{k}.json"
        [text] = _train(k, run + ["--parts", str(k), "--epochs", "5", "--checkpoint-dir", str(d), "--resume",
                                  "--report", str(rep)])
        got[k] = _report(rep)
        assert got[k]["run/resharded_from"]["world_size"] == 4
        if k > 1:  # (rank 0 logs it once)
            assert text.count("the held halo rows belong to the old partition's cut") == 1, text
    assert got[2]["losses"][:3] == got[1]["losses"][:3]  # the history came with the checkpoint
    assert got[2]["losses"][3] == pytest.approx(got[1]["losses"][3], rel=1e-5)  # fresh rows: exact
    assert got[2]["losses"][4] != pytest.approx(got[1]["losses"][4], rel=1e-6)  # then stale at k = 2 only


def test_layout_diff_names_missing_tensors_and_other_shapes():
    """What keeps a snapshot from filling a state (the default resharding check), on paper."""
    import torch

    from graphdist.checkpoint import layout_diff, state_layout
    want = state_layout({"model": {"w": torch.zeros(2, 4), "b": torch.zeros(4)}, "optim": {"m": torch.zeros(3)}})
    assert want == {"model.w": (2, 4), "model.b": (4,), "optim.m": (3,)}
    assert layout_diff({**want, "extra": (9,)}, want) == ""  # keys beyond the state are not read
    got = layout_diff({"model.w": (4, 4), "model.b": (4,)}, want)
    assert got == "1 tensors it does not hold (optim.m) and 1 of other shapes (model.w [4, 4] -> [2, 4])", got
