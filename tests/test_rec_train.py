"""train-rec behaviour: the sampler is rank-invariant, k ranks train what one rank trains, a learned
model beats popularity on rec-synth, exact resume, the launcher and report, artifacts, Ctrl-C /
SIGTERM, and one-line errors."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from graphdist.cli import main
from graphdist.testing import run_ranks

SPEC = "rec-synth:users=300,items=200,avg_items=12,seed=1"
REPORT_KEYS = {"recall@20", "ndcg@20", "losses", "time/epoch_s", "comm/halo_bytes_per_epoch",
               "mem/peak_bytes", "world_size", "partition"}


def test_sampler_draws_the_same_triples_on_any_split_of_users():
    from graphdist.rec.data import load_ratings
    from graphdist.rec.sampling import build_index, sample_epoch
    r = load_ratings(SPEC)
    tr = r.train.numpy()
    idx = build_index(tr, r.num_users, r.num_items, np.ones(r.num_users, bool))
    whole = sample_epoch(idx, 7, 3, 64)
    assert whole.counts.sum() == whole.user.size and whole.num_batches == idx.num_batches(64)
    assert abs(whole.user.size - tr.shape[0]) < 0.01 * tr.shape[0]  # an epoch draws about S triples
    assert abs(whole.counts.mean() - 64) < 0.05 * 64
    per_user = np.bincount(whole.user, minlength=r.num_users)  # every user floor(S/U) or one more
    assert set(per_user.tolist()) <= {tr.shape[0] // r.num_users, tr.shape[0] // r.num_users + 1}
    assert np.all(np.diff(whole.batch) >= 0) and np.unique(whole.index).size == whole.index.size
    keys = set((tr[:, 0] * r.num_items + tr[:, 1]).tolist())
    assert all(u * r.num_items + p in keys for u, p in zip(whole.user, whole.pos))
    assert not any(u * r.num_items + n in keys for u, n in zip(whole.user, whole.neg))
    owner = np.random.default_rng(0).integers(0, 3, r.num_users)
    parts = [sample_epoch(build_index(tr, r.num_users, r.num_items, owner == k), 7, 3, 64) for k in range(3)]
    for k, s in enumerate(parts):
        mine = owner[whole.user] == k
        for f in ("user", "pos", "neg", "batch", "index"):
            assert np.array_equal(getattr(s, f), getattr(whole, f)[mine])
        # a rank draws only its own users' triples
        assert s.user.size == mine.sum()
    assert np.array_equal(sum(s.counts for s in parts), whole.counts)
    capped = sample_epoch(idx, 7, 3, 64, max_batches=2)
    assert capped.num_batches == 2 and np.array_equal(capped.user, whole.user[whole.batch < 2])
    other = sample_epoch(idx, 7, 4, 64)
    assert not np.array_equal(other.user, whole.user)  # a new epoch draws anew


def _fit_job(rank, ws, spec, kw):
    from graphdist.rec.config import RecConfig
    from graphdist.rec.trainer import train
    return train(RecConfig(spec=spec, method="random", progress=False, **kw))


def test_k_ranks_train_what_one_rank_trains():
    kw = dict(epochs=3, eval_every=1, lr=0.01, batch_size=512, dim=16)
    one = run_ranks(_fit_job, 1, args=(SPEC, kw), timeout=240)[0]
    three = run_ranks(_fit_job, 3, args=(SPEC, kw), timeout=240)
    assert all(r["losses"] == three[0]["losses"] for r in three)
    np.testing.assert_allclose(three[0]["losses"], one["losses"], rtol=1e-6)
    for a, b in zip(one["eval"], three[0]["eval"]):
        assert a["recall@20"] == pytest.approx(b["recall@20"], abs=1e-6)
    assert one["comm/halo_bytes_per_epoch"] == 0 and three[0]["comm/halo_bytes_per_epoch"] > 0
    assert three[0]["comm/item_bytes_per_epoch"] > 0 and three[0]["world_size"] == 3


def test_learned_model_beats_popularity():
    kw = dict(epochs=15, lr=0.01, batch_size=512)
    rep = run_ranks(_fit_job, 2, args=("rec-synth:users=600,items=300,avg_items=15,seed=2", kw), timeout=300)[0]
    pop, got = rep["popularity/recall@20"], rep["recall@20"]
    assert pop > 0.05  # popularity is a real baseline on rec-synth ...
    assert got > 1.5 * pop and got > pop + 0.1, (got, pop)  # ... and the model must learn more
    assert rep["ndcg@20"] > rep["popularity/ndcg@20"]
    assert rep["losses"][-1] < rep["losses"][0]


def _modes_job(rank, ws):
    from graphdist.rec.config import RecConfig
    from graphdist.rec.trainer import fit, load_local
    from graphdist.procgroup import init_distributed
    ctx = init_distributed("cpu")
    base = dict(spec=SPEC, method="metis", epochs=2, progress=False, lr=0.01, batch_size=512, dim=16)
    ratings, lg, info = load_local(RecConfig(**base), rank, ws)
    out = [fit(RecConfig(**base, halo=h, halo_bits=b), ratings, lg, info, ctx)
           for h, b in (("plain", 32), ("mvc", 32), ("mvc", 8))]
    boxes = [ratings], [lg]  # as train() hands them over: fit takes them out and frees them
    del ratings, lg
    out.append(fit(RecConfig(**base, halo_rounds=3), *boxes, info, ctx))
    return out + [boxes]


def test_halo_modes_mvc_is_exact_and_bits_cut_bytes():
    plain, mvc, q8, rounds, boxes = run_ranks(_modes_job, 2, timeout=300)[0]
    # --halo-rounds 3: the same exchange in three all-to-alls, the same training up to float rounding
    assert boxes == ([], []) and rounds["comm/halo_rounds"] == 3 and mvc["comm/halo_rounds"] == 1
    np.testing.assert_allclose(rounds["losses"], mvc["losses"], rtol=1e-6)
    assert rounds["recall@20"] == pytest.approx(mvc["recall@20"], abs=1e-6)
    assert rounds["comm/halo_bytes_per_epoch"] == mvc["comm/halo_bytes_per_epoch"]
    assert (plain["comm/halo"], mvc["comm/halo"], q8["comm/halo"], q8["comm/halo_bits"]) == ("plain", "mvc", "mvc", 8)
    np.testing.assert_allclose(mvc["losses"], plain["losses"], rtol=1e-6)  # pre/post-aggregation is exact
    assert mvc["recall@20"] == pytest.approx(plain["recall@20"], abs=1e-6)
    assert 0 < mvc["comm/halo_bytes_per_epoch"] < plain["comm/halo_bytes_per_epoch"]
    assert q8["comm/halo_bytes_per_epoch"] < 0.5 * mvc["comm/halo_bytes_per_epoch"]  # 1 byte a value + scale
    np.testing.assert_allclose(q8["losses"], mvc["losses"], rtol=1e-2)  # close, not exact
    assert q8["losses"] != mvc["losses"]


def _resume_job(rank, ws, root):
    from graphdist.rec.config import RecConfig
    from graphdist.rec.trainer import fit, load_local
    from graphdist.procgroup import init_distributed
    ctx = init_distributed("cpu")
    base = dict(spec=SPEC, method="random", epochs=6, checkpoint_every=2, progress=False, lr=0.01,
                batch_size=256, dim=16)
    cfg = RecConfig(**base)
    ratings, lg, info = load_local(cfg, rank, ws)
    full = fit(RecConfig(**base, checkpoint_dir=f"{root}/full"), ratings, lg, info, ctx)
    cut = fit(RecConfig(**base, checkpoint_dir=f"{root}/cut"), ratings, lg, info, ctx,
              callbacks=[lambda epoch, hist: epoch == 3])  # the job "dies" after epoch 3
    resumed = fit(RecConfig(**base, checkpoint_dir=f"{root}/cut", resume=True), ratings, lg, info, ctx)
    files = sorted(os.listdir(f"{root}/cut"))
    done = fit(RecConfig(**base, checkpoint_dir=f"{root}/cut", resume=True), ratings, lg, info, ctx)
    from graphdist.errors import ConfigError
    try:  # a snapshot of other settings is refused, naming each field with both values
        fit(RecConfig(**{**base, "dim": 8, "lr": 0.02, "halo": "plain", "halo_bits": 8}, checkpoint_dir=f"{root}/cut",
                      resume=True), ratings, lg, info, ctx)
        refused = ""
    except ConfigError as e:
        refused = str(e)
    return full, cut, resumed, done, files, refused


def test_resume_reproduces_unbroken_run(tmp_path):
    for full, cut, resumed, done, files, refused in run_ranks(_resume_job, 2, args=(str(tmp_path),), timeout=300):
        assert "other settings (--dim 16 -> 8; --lr 0.01 -> 0.02; --halo mvc -> plain; --halo-bits 32 -> 8)" \
            in refused, refused
        assert len(full["losses"]) == 6 and cut["losses"] == full["losses"][:3]
        assert resumed["losses"] == full["losses"]  # Adam moments and rows restored, sampling keyed by epoch
        assert resumed["recall@20"] == full["recall@20"] and done["recall@20"] == full["recall@20"]
        assert done["losses"] == full["losses"]  # a finished run resumed: nothing left to do
        assert done["comm/halo_bytes_per_epoch"] == full["comm/halo_bytes_per_epoch"]
        assert files == ["latest", "step_00000004", "step_00000006"]


def _artifact(path, spec=SPEC, k=2):
    """As the README builds an artifact for a ratings spec."""
    assert main(["partition", spec, "--parts", str(k), "--method", "metis", "--out", str(path)]) == 0
    return path


def test_launcher_two_workers_from_artifact(tmp_path, capfd):
    d = _artifact(tmp_path / "p")
    assert main(["quality", str(d)]) == 0 and "halo volume" in capfd.readouterr().out
    rep = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "graphdist", "train-rec", SPEC, "--partition", str(d), "--nproc", "2",
                        "--epochs", "2", "--dim", "16", "--no-progress", "--report", str(rep)],
                       capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    d_rep = json.loads(rep.read_text())
    assert REPORT_KEYS <= set(d_rep) and d_rep["world_size"] == 2 and len(d_rep["losses"]) == 2
    assert d_rep["partition"]["method"] == "metis" and d_rep["partition"]["quality"]["comm_volume"] > 0
    assert d_rep["comm/halo_bytes_per_epoch"] > 0 and d_rep["mem/peak_bytes"] > 0
    assert re.search(r"^recall@20 0\.\d{4}, ndcg@20 .* world size 2$", r.stdout, re.M) and "report:" in r.stdout
    # the artifact must be cut from this data, with as many parts as workers
    other = SPEC.replace("seed=1", "seed=2")
    assert main(["train-rec", other, "--partition", str(d), "--nproc", "2", "--no-progress"]) == 2
    assert main(["train-rec", SPEC, "--partition", str(d), "--nproc", "3"]) == 2
    err = [e for e in capfd.readouterr().err.strip().splitlines() if e.startswith("graphdist:")]
    assert len(err) == 2, err
    assert re.search(r"fingerprint [0-9a-f]{16} but this graph has fingerprint [0-9a-f]{16}", err[0])
    assert "--nproc 3 does not match the 2 parts" in err[1]


def test_bad_flags_and_outputs_are_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    cases = [["train-rec", SPEC, "--layers", "-1"], ["train-rec", "--epochs", "3"],
             ["train-rec", SPEC, "--resume"], ["train-rec", SPEC, "--parts", "2", "--nproc", "3"],
             ["train-rec", SPEC, "--report", str(tmp_path / "f" / "r.json")], ["train-rec", "ratings:missing.txt"],
             ["train-rec", SPEC, "--checkpoint-dir", str(tmp_path / "f" / "ck")],
             ["train-rec", SPEC, "--halo-bits", "8"],
             ["train-rec", SPEC, "--halo", "cover"], ["train-rec", SPEC, "--halo-rounds", "-1"]]
    for argv in cases:
        assert main(argv) == 2, argv
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == len(cases) and all(e.startswith("graphdist: error:") for e in err)
    wants = ["--layers must be >= 0", "give the interaction data SPEC", "--resume needs --checkpoint-dir",
             "--nproc 3 does not match the 2 parts", "--report", "ratings file 'missing.txt' not found",
             "--checkpoint-dir", "--halo-bits 8 quantises the halo exchange, but a 1-part job has none",
             "--halo", "--halo-rounds must be in 0..64, got -1"]
    for e, want in zip(err, wants):
        assert want in e, e


def test_signal_stops_with_one_line_and_resumes(tmp_path):
    """End to end through train-rec's launcher and workers, with a scheduler's SIGTERM (the loop's
    behaviour under SIGINT and SIGTERM is tested once for every trainer, tests/test_loop.py)."""
    sig, code = signal.SIGTERM, 143
    ck = tmp_path / "ck"
    train = ["train-rec", SPEC, "--parts", "2", "--method", "random", "--no-progress", "--dim", "16",
             "--batch-size", "256", "--timeout", "60"]
    p = subprocess.Popen([sys.executable, "-m", "graphdist", *train, "--epochs", "1000000", "--checkpoint-dir",
                          str(ck), "--checkpoint-every", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    t0 = time.monotonic()
    try:
        while not (ck / "latest").exists():
            assert p.poll() is None, p.communicate()[1][-3000:]
            assert time.monotonic() - t0 < 200, "no checkpoint appeared"
            time.sleep(0.2)
        os.killpg(p.pid, sig)
        _, err = p.communicate(timeout=150)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert p.returncode == code, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("graphdist:")]
    assert "Traceback" not in err and len(lines) == 1, err[-3000:]
    m = re.search(rf"interrupted: {signal.Signals(sig).name} after epoch (\d+) of 1000000; latest checkpoint "
                  r"(\S+); continue with --resume", lines[0])
    assert m, lines[0]
    snap = Path(m.group(2))
    if sig == signal.SIGTERM:
        assert snap.name == f"step_{int(m.group(1)):08d}"
    done = int(snap.name.split("_")[1])
    rep = tmp_path / "r.json"
    # the resume on two ranks forked as torchrun's workers (the launcher's part ended above)
    from tests.cli_ranks import run_cli
    [(rc, text)] = run_cli([[*train, "--epochs", str(done + 2), "--checkpoint-dir", str(ck), "--resume",
                             "--report", str(rep)]], 2)
    assert rc == 0, text[-3000:]
    assert len(json.loads(rep.read_text())["losses"]) == done + 2


def test_evaluation_runs_without_autograd_and_leaves_the_traffic_count_alone():
    """The ranking pass builds no autograd graph (its activations would be kept for a backward
    that never comes) and its halo traffic is not counted as training traffic."""
    from types import SimpleNamespace

    import torch

    from graphdist.rec.trainer import _evaluate
    seen = []

    def model(adj, halo):
        seen.append(torch.is_grad_enabled())
        halo.stats.bytes += 100
        return "final rows"

    halo = SimpleNamespace(stats=SimpleNamespace(bytes=7, rows=3))
    assert _evaluate(model, None, halo, lambda out: {"got": out}) == {"got": "final rows"}
    assert seen == [False] and (halo.stats.bytes, halo.stats.rows) == (7, 3)
