"""`graphdist partition` of interaction data, then `train-rec --partition DIR` without the source:
each rank reads its part and its interaction file only, and trains what in-process partitioning
trains; a changed interaction file or a graph artifact is refused in one line."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from graphdist.cli import main
from tests.cli_ranks import run_cli

TRAIN = ["--epochs", "2", "--dim", "16", "--batch-size", "256", "--no-progress"]


def _run(args, tmp_path, name):
    """``graphdist train-rec`` on two ranks forked as torchrun's workers (no launcher)."""
    rep = tmp_path / f"{name}.json"
    [(code, text)] = run_cli([["train-rec", *args, *TRAIN, "--report", str(rep)]], 2)
    assert code == 0, text[-3000:]
    return json.loads(rep.read_text()), text


def test_artifact_trains_with_the_source_moved_away(tmp_path, capfd):
    from graphdist.rec.synth import rec_synth
    r = rec_synth(users=300, items=200, avg_items=12, seed=1)
    log = tmp_path / "log.txt"
    np.savetxt(log, np.concatenate([r.train.numpy(), r.test.numpy()]), fmt="%d")
    spec = f"ratings:{log}"
    art = tmp_path / "art"
    assert main(["partition", spec, "--parts", "2", "--method", "random", "--out", str(art)]) == 0
    meta = json.loads((art / "meta.json").read_text())
    assert meta["rec"]["files"] == ["rec_00000.pt", "rec_00001.pt"] and "rec_00001.pt" in meta["sha256"]
    inproc, _ = _run([spec, "--parts", "2", "--method", "random"], tmp_path, "inproc")
    log.rename(tmp_path / "moved.txt")  # the source is gone: only the artifact remains
    fromart, out = _run(["--partition", str(art)], tmp_path, "art")
    assert fromart["losses"] == inproc["losses"] and len(fromart["losses"]) == 2
    assert fromart["recall@20"] == inproc["recall@20"] and fromart["ndcg@20"] == inproc["ndcg@20"]
    assert fromart["data"] == inproc["data"] and fromart["partition"]["source"] == str(art)
    assert "world size 2" in out
    # a changed interaction file is refused, naming it
    capfd.readouterr()
    (art / "rec_00001.pt").write_bytes((art / "rec_00001.pt").read_bytes() + b"x")
    assert main(["train-rec", "--partition", str(art), "--no-progress", "--epochs", "1"]) == 2
    err = [e for e in capfd.readouterr().err.splitlines() if e.startswith("graphdist:")]
    assert len(err) == 1 and "rec_00001.pt was changed after partitioning" in err[0], err


def test_graph_artifact_without_interactions_is_refused(tmp_path, capfd):
    art = tmp_path / "g"
    assert main(["partition", "sbm:nodes=200,classes=2,seed=0", "--parts", "2", "--method", "random",
                 "--out", str(art)]) == 0
    capfd.readouterr()
    assert main(["train-rec", "--partition", str(art), "--no-progress"]) == 2
    err = [e for e in capfd.readouterr().err.splitlines() if e.startswith("graphdist:")]
    assert len(err) == 1 and "not a recommender artifact" in err[0], err


@pytest.mark.parametrize("spec", ["rec-synth:users=50,items=40,avg_items=5,seed=3"])
def test_partition_of_a_generated_spec(tmp_path, spec):
    art = tmp_path / "a"
    assert main(["partition", spec, "--parts", "3", "--method", "metis", "--out", str(art)]) == 0
    import torch
    from graphdist.rec.data import load_ratings
    r = load_ratings(spec)
    parts = [torch.load(art / f"rec_{i:05d}.pt", weights_only=True) for i in range(3)]
    a = np.load(art / "assignment.npy")
    train = np.concatenate([p["train"].numpy() for p in parts])
    assert sorted(map(tuple, train.tolist())) == sorted(map(tuple, r.train.numpy().tolist()))
    for i, p in enumerate(parts):  # a part holds the interactions of the users it owns
        assert np.all(a[p["train"][:, 0].numpy()] == i) and np.all(a[p["test"][:, 0].numpy()] == i)
    assert sum(p["test"].shape[0] for p in parts) == r.test.shape[0]


def _mapped_job(rank, ws, art):
    from graphdist.rec.config import RecConfig
    from graphdist.rec.trainer import fit, load_local
    from graphdist.procgroup import init_distributed
    ctx = init_distributed("cpu")
    out = []
    for halo in ("mvc", "plain"):
        cfg = RecConfig(partition=art, epochs=2, dim=16, batch_size=256, halo=halo, progress=False)
        part, lg, info = load_local(cfg, rank, ws)
        before = art in open("/proc/self/maps").read()
        boxes = [part], [lg]  # as train() hands them over
        del part, lg
        during = []
        fit(cfg, *boxes, info, ctx, callbacks=[lambda e, h: during.append(art in open("/proc/self/maps").read())])
        out.append((before, during))
    return out


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc (Linux)")
def test_a_rank_unmaps_its_part_files_once_training_is_set_up(tmp_path):
    """A rank maps its part and interaction files; once the adjacency, the exchange and the
    sampling index are built, nothing refers to the files' pages, so they leave its memory."""
    art = tmp_path / "art"
    assert main(["partition", "rec-synth:users=300,items=200,avg_items=12,seed=1", "--parts", "2", "--method",
                 "metis", "--out", str(art)]) == 0
    from graphdist.testing import run_ranks
    for per_rank in run_ranks(_mapped_job, 2, args=(str(art),), timeout=240):
        for before, during in per_rank:
            assert before and during == [False, False], (before, during)
