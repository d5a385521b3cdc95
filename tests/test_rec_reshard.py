"""Resharding a recommender: the table rows and their Adam moments are saved with their global
node ids, so a checkpoint written at k = 2 continues at k = 1 and at k = 3 (another artifact,
another partitioner) to the losses of the unbroken k = 2 run (the sampling and Adam are
functions of the node, not of its rank; only the order of float sums changes)."""
from __future__ import annotations

import json
import shutil

import pytest

from graphdist.cli import main
from tests.cli_ranks import run_cli

SPEC = "rec-synth:users=300,items=200,avg_items=12,seed=1"
RUN = ["train-rec", "--no-progress", "--batch-size", "256", "--dim", "16", "--lr", "0.01"]


def _report(path):
    return json.loads(path.read_text())


def _ranks(k: int, *argvs) -> list[str]:
    """Each ``argv`` in turn on ``k`` ranks forked as torchrun's workers (no launcher: that is
    ``test_launch.py``'s); rank 0's output of each."""
    runs = run_cli([list(a) + ["--nproc", str(k)] for a in argvs], k)
    for code, text in runs:
        assert code == 0, text[-3000:]
    return [text for _, text in runs]


def test_a_k2_checkpoint_resumes_at_k1_and_on_a_k3_artifact_with_the_unbroken_losses(tmp_path):
    whole, ck = tmp_path / "whole.json", tmp_path / "ck"
    _ranks(2, RUN + [SPEC, "--method", "random", "--parts", "2", "--epochs", "4", "--report", str(whole)],
           RUN + [SPEC, "--method", "random", "--parts", "2", "--epochs", "2", "--checkpoint-dir", str(ck)])
    shutil.copytree(ck, tmp_path / "ck-copy")
    art = tmp_path / "art3"
    assert main(["partition", SPEC, "--parts", "3", "--method", "metis", "--out", str(art)]) == 0
    want = _report(whole)
    for k, src, d in ((1, [SPEC, "--parts", "1"], ck), (3, ["--partition", str(art)], tmp_path / "ck-copy")):
        rep = tmp_path / f"k{k}.json"
        [text] = _ranks(k, RUN + src + ["--epochs", "4", "--checkpoint-dir", str(d), "--resume", "--report", str(rep)])
        got = _report(rep)
        assert got["world_size"] == k and len(got["losses"]) == 4
        assert got["losses"][:2] == want["losses"][:2]  # the history came with the checkpoint
        assert got["losses"][2:] == pytest.approx(want["losses"][2:], rel=1e-6, abs=1e-7)
        assert got["recall@20"] == pytest.approx(want["recall@20"], abs=1e-6)
        was = got["run/resharded_from"]
        assert was["world_size"] == 2 and was["partition_id"] != want.get("partition_id"), was
        if k > 1:  # (rank 0 logs it)
            assert "resharded from world_size 2" in text
        if k == 3:  # the traffic reported is this partition's (2 epochs of it), not the old one's
            assert got["comm/halo_bytes_per_epoch"] > want["comm/halo_bytes_per_epoch"]


def test_a_checkpoint_without_node_ids_is_refused_in_one_line(tmp_path, capfd):
    """A snapshot written before the rows carried their node ids (simulated by removing the ids
    from its DCP metadata) still resumes on its own partition; elsewhere one line says why."""
    import pickle
    ck = tmp_path / "ck"
    run = RUN + [SPEC, "--method", "random", "--checkpoint-dir", str(ck)]
    _ranks(2, run + ["--parts", "2", "--epochs", "2"])
    snap = ck / (ck / "latest").read_text().strip()
    md = pickle.loads((snap / ".metadata").read_bytes())
    for j in range(2):
        del md.state_dict_metadata[f"ids.rank{j}"]
    (snap / ".metadata").write_bytes(pickle.dumps(md))
    capfd.readouterr()
    assert main(run + ["--parts", "1", "--epochs", "3", "--resume"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "saved its table rows without their node ids" in err[0], err
    assert "world_size 2, partition_id " in err[0] and "world_size 1, partition_id " in err[0], err
    _ranks(2, run + ["--parts", "2", "--epochs", "3", "--resume"])
