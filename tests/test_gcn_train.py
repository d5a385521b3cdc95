"""Trainer behaviour: exact resume, launcher, report keys, failure modes (world size, CUDA,
dead worker)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from graphdist.cli import main
from graphdist.errors import ConfigError
from graphdist.partition.layout import build_layout
from graphdist.testing import run_ranks
from tests.conftest import requires_cuda

SPEC = "sbm:nodes=300,classes=3,avg_degree=5,features=8,seed=0"
REPORT_KEYS = {"test_acc", "best_val_acc", "best_epoch", "losses", "time/epoch_s",
               "comm/halo_bytes_per_epoch", "mem/peak_bytes", "world_size", "partition"}


def _graph_and_assignment():
    from graphdist.data import load_graph
    g = load_graph(SPEC)
    return g, torch.arange(g.num_nodes) % 2


def _snapshot_weights(root, model_like):
    """Model weights stored in the latest snapshot under ``root`` (loaded into a copy)."""
    import copy

    from graphdist.checkpoint import Checkpointer
    ck = Checkpointer(root)
    sd = copy.deepcopy(model_like).state_dict()
    ck.load(ck.latest(), {"model": sd})
    return sd


def _resume_job(rank, ws, graph, a, root):
    from graphdist.gnn.models import GNN
    from graphdist.gnn.trainer import GCNConfig, fit
    from graphdist.procgroup import init_distributed
    ctx = init_distributed("cpu")
    lg = build_layout(graph, a, rank, ws)
    base = dict(spec="t", model="sage", layers=3, hidden=8, dropout=0.5, epochs=8, seed=3,
                progress=False, batch_norm=True, checkpoint_every=3)
    full = fit(GCNConfig(**base, checkpoint_dir=f"{root}/full"), lg, {}, ctx)
    cut = fit(GCNConfig(**base, checkpoint_dir=f"{root}/cut"), lg, {}, ctx,
              callbacks=[lambda epoch, hist: epoch == 5])  # the job "dies" after epoch 5
    resumed = fit(GCNConfig(**base, checkpoint_dir=f"{root}/cut", resume=True), lg, {}, ctx)
    files = sorted(os.listdir(f"{root}/cut"))
    done = fit(GCNConfig(**base, checkpoint_dir=f"{root}/cut", resume=True), lg, {}, ctx)  # nothing left
    key = "comm/halo_bytes_per_epoch"
    like = GNN("sage", lg.x.shape[1], 8, 3, 3, 0.5, True)
    w_full, w_cut = _snapshot_weights(f"{root}/full", like), _snapshot_weights(f"{root}/cut", like)
    same = all(torch.equal(v, w_cut[k]) for k, v in w_full.items())
    from graphdist.errors import ConfigError
    try:  # every field that changes the result is compared: one line naming each, old -> new
        fit(GCNConfig(**{**base, "lr": 0.02, "dropout": 0.3, "weight_decay": 0.0, "halo": "plain", "halo_bits": 8},
                      checkpoint_dir=f"{root}/cut", resume=True), lg, {}, ctx)
        refused = ""
    except ConfigError as e:
        refused = str(e)
    # the length, outputs, display and retention may change: the run is extended to 10 epochs
    longer = fit(GCNConfig(**{**base, "epochs": 10, "keep_checkpoints": 3, "report": f"{root}/r{rank}.json",
                              "checkpoint_every": 4}, checkpoint_dir=f"{root}/cut", resume=True), lg, {}, ctx)
    return (full["losses"], cut["losses"], resumed["losses"], files, (full[key], done[key], done["losses"]), same,
            refused, longer["losses"])


def test_resume_reproduces_unbroken_run(tmp_path):
    g, a = _graph_and_assignment()
    out = run_ranks(_resume_job, 2, args=(g, a, str(tmp_path)), timeout=180)
    for full, cut, resumed, files, (halo_full, halo_done, losses_done), same, refused, longer in out:
        assert ("was written with other settings (--dropout 0.5 -> 0.3; --lr 0.01 -> 0.02; --weight-decay 0.0005 "
                "-> 0.0; --halo mvc -> plain; --halo-bits 32 -> 8)") in refused, refused
        assert len(longer) == 10 and longer[:8] == full
        assert len(full) == 8 and len(cut) == 5
        assert halo_full > 0 and halo_done == halo_full and losses_done == full  # finished run resumed
        assert cut == full[:5]
        assert resumed == full  # dropout RNG, Adam moments and batch-norm buffers all restored
        # snapshots at 3, 5 (the stop), 6, 8; the default --keep-checkpoints 2 keeps the newest two
        # (and order/: each part's locality order, which the resume read)
        assert files == ["latest", "order", "step_00000006", "step_00000008"]
        assert same  # the resumed run ends with the unbroken run's weights
    assert (tmp_path / "cut" / "latest").read_text().strip() == "step_00000010"


def test_a_fresh_run_in_a_used_checkpoint_dir_says_it_will_replace_it(tmp_path, capsys):
    """A forgotten --resume after a crash: the run starts afresh, and first says that its first
    checkpoint replaces the earlier run's (naming it), while that checkpoint is still there;
    with --resume (or in an empty folder) nothing is said."""
    ck = str(tmp_path / "ck")
    args = ["train-gcn", SPEC, "--epochs", "3", "--checkpoint-dir", ck, "--checkpoint-every", "2", "--no-progress"]
    assert main(args) == 0
    assert "earlier run" not in capsys.readouterr().err
    assert main(args) == 0
    assert (f"warning: {ck} holds an earlier run's checkpoint (step_00000003); this run starts afresh and its first "
            "checkpoint (after epoch 2) replaces it: to continue that run instead, stop now and add --resume"
            ) in capsys.readouterr().err
    assert main(args[:3] + ["5"] + args[4:] + ["--resume"]) == 0
    assert "earlier run" not in capsys.readouterr().err
    (tmp_path / "ck" / "latest").write_text("step_00000099\n")  # names nothing: a fresh run still starts
    assert main(args) == 0
    assert "earlier run" not in capsys.readouterr().err


def test_world_size_must_equal_parts(capsys):
    assert main(["train-gcn", SPEC, "--parts", "2", "--nproc", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--nproc 3" in err[0] and "2 parts" in err[0]
    from graphdist.partition.setup import load_local
    from graphdist.gnn.config import GCNConfig
    with pytest.raises(ConfigError, match="--parts 4 does not match the world size 2"):
        load_local(GCNConfig(spec=SPEC, parts=4), 0, 2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_gpu_is_one_line_error(capsys):
    assert main(["train-gcn", SPEC, "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA GPU" in err[0]


def test_bad_flags(capsys):
    assert main(["train-gcn", SPEC, "--dropout", "1.5"]) == 2
    assert main(["train-gcn", "--epochs", "3"]) == 2
    assert main(["train-gcn", SPEC, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "--dropout" in err and "SPEC or --partition" in err and "--checkpoint-dir" in err


def agent_store():
    """A TCPStore on a port the OS picks, held by the test as torchrun's agent holds its own;
    workers started with :func:`_env` connect to it as clients (no port can be raced for)."""
    import torch.distributed as dist
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


def _env(rank, store, extra=None):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout's graphdist,
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)  # not an installed one
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), TORCHELASTIC_USE_AGENT_STORE="True",
               OMP_NUM_THREADS="1", PYTHONPATH=path)
    env.update(extra or {})
    return env


FAULT = [sys.executable, os.path.join(os.path.dirname(__file__), "fault_entry.py")]


def test_dead_worker_is_named_by_survivor():
    """Two workers as an external torchrun would start them; rank 1 dies at the start of epoch 3."""
    store = agent_store()
    cmd = FAULT + ["1", "3", "train-gcn", SPEC, "--parts", "2", "--method", "random",
                   "--epochs", "500", "--no-progress", "--timeout", "60"]
    procs = [subprocess.Popen(cmd, env=_env(r, store), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    try:  # (timeouts: a hang guard, not a measure; a loaded box starts the workers slowly)
        out0, err0 = procs[0].communicate(timeout=300)
        procs[1].communicate(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert procs[1].returncode == 3
    assert procs[0].returncode == 2, err0
    lines = [ln for ln in err0.splitlines() if ln.startswith("graphdist: error:")]
    assert len(lines) == 1 and "rank 1 stopped responding" in lines[0], err0
    # rank 0 stopped at the first collective rank 1 missed (after epoch 2, its last), not after
    # its own 500 epochs: at any load, the same epoch
    assert "rank 0: collective failed during epoch 3 of 500: rank 1 stopped responding" in lines[0], lines[0]


def _write_artifact(path, k=2, method="metis"):
    from graphdist.partition.artifact import write_artifact
    from graphdist.partition.setup import partition_in_process
    g, _ = _graph_and_assignment()
    a = partition_in_process(g, k, method, 0)
    from partitioners.quality import quality
    return write_artifact(path, g, a, method=method, params={"k": k}, quality=quality(g, a, k=k), seconds=0.0)


def test_artifact_mismatches_name_both_values(tmp_path, capsys):
    from graphdist.errors import ArtifactError
    from graphdist.partition.setup import load_local
    from graphdist.gnn.config import GCNConfig
    d = _write_artifact(tmp_path / "p")
    with pytest.raises(ArtifactError, match="k=2 parts but the world size is 1"):
        load_local(GCNConfig(partition=str(d)), 0, 1)
    other = SPEC.replace("seed=0", "seed=1")
    with pytest.raises(ArtifactError, match="fingerprint [0-9a-f]{16} but this graph has fingerprint [0-9a-f]{16}"):
        load_local(GCNConfig(spec=other, partition=str(d)), 0, 2)
    lg, info = load_local(GCNConfig(spec=SPEC, partition=str(d)), 1, 2)
    assert lg.rank == 1 and info["method"] == "metis"
    assert main(["train-gcn", "--partition", str(d), "--nproc", "3"]) == 2
    assert "--nproc 3 does not match the 2 parts" in capsys.readouterr().err


def test_launcher_runs_two_workers_and_writes_report(tmp_path):
    rep = tmp_path / "r.json"
    d = _write_artifact(tmp_path / "p")
    r = subprocess.run([sys.executable, "-m", "graphdist", "train-gcn", "--partition", str(d), "--nproc", "2",
                        "--epochs", "4", "--hidden", "8", "--no-progress",
                        "--report", str(rep)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    d = json.loads(rep.read_text())
    assert REPORT_KEYS <= set(d)
    assert d["world_size"] == 2 and len(d["losses"]) == 4
    assert d["comm/halo_bytes_per_epoch"] > 0 and d["mem/peak_bytes"] > 0
    assert d["partition"]["method"] == "metis" and d["partition"]["quality"]["comm_volume"] > 0
    assert "test_acc" in r.stdout and "report:" in r.stdout


@requires_cuda
def test_cuda_smoke():
    from graphdist.procgroup import DistContext
    from graphdist.gnn.trainer import GCNConfig, fit
    g, _ = _graph_and_assignment()
    lg = build_layout(g, torch.zeros(g.num_nodes, dtype=torch.long), 0, 1)
    ctx = DistContext(0, 1, 0, "nccl", torch.device("cuda", 0))
    rep = fit(GCNConfig(spec="t", epochs=5, progress=False, device="cuda"), lg, {}, ctx)
    assert len(rep["losses"]) == 5 and rep["losses"][-1] < rep["losses"][0]


def test_demo_single_worker(tmp_path, capsys):
    from graphdist.gnn.demo import run_gcn_demo
    s = run_gcn_demo(tmp_path, spec=SPEC, nproc=1, progress=False, epochs=20)
    out = capsys.readouterr().out
    rep = json.loads((tmp_path / "gcn_report.json").read_text())
    assert s["test_acc"] == rep["test_acc"] and s["best_epoch"] == rep["best_epoch"]
    assert f"test accuracy {rep['test_acc']:.4f}" in out and "halo exchange 0 rows" in out and "report:" in out
    # 3 balanced classes (chance 1/3); seeded, so this is a fixed figure (0.80), not a flaky one
    assert s["test_acc"] >= 0.6 and rep["losses"][-1] < rep["losses"][0]


def test_best_epoch_and_early_stopping_rule():
    from graphdist.gnn.task import best_epoch, early_stop
    val = [0.1, 0.5, 0.4, 0.5, 0.3]
    assert best_epoch(val) == 1  # first epoch with the highest validation accuracy
    assert not early_stop(val[:3], 2) and early_stop(val[:4], 2) and not early_stop(val, 0)
    nan = float("nan")
    assert best_epoch([nan, 0.2, nan, 0.2]) == 1
    # no validation rows: the last epoch (the model the run ends with), and no early stop
    assert best_epoch([nan] * 5) == 4 and best_epoch([]) == 0 and not early_stop([nan] * 5, 2)


def test_a_split_without_validation_rows_reports_the_last_epochs_model(capsys):
    """val=0: nothing to choose an epoch by, so the test accuracy is the final model's (it was the
    first epoch's, as if epoch 1 were the best), and --patience does not stop the run."""
    spec = "sbm:nodes=200,classes=2,avg_degree=4,features=8,train=0.5,val=0,seed=1"
    assert main(["train-gcn", spec, "--epochs", "6", "--patience", "2", "--no-progress"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "(no validation rows: the model of the last epoch, 6), final loss" in line, line


def _halo_modes_job(rank, ws, graph, a):
    from graphdist.gnn.trainer import GCNConfig, fit
    from graphdist.procgroup import init_distributed
    ctx = init_distributed("cpu")
    lg = build_layout(graph, a, rank, ws)
    reps = {}
    for halo, bits, eval_bits in (("plain", 32, 32), ("mvc", 32, 32), ("mvc", 8, 32), ("mvc", 2, 32),
                                  ("mvc", 8, 8)):
        cfg = GCNConfig(spec="t", layers=2, hidden=8, dropout=0.5, epochs=6, seed=2, progress=False,
                        halo=halo, halo_bits=bits, eval_halo_bits=eval_bits, input_halo="exchange")
        reps[(halo, bits, eval_bits)] = fit(cfg, lg, {}, ctx)
    lay = lg.exchange_layout("mvc")
    return reps, (sum(lay.send_counts), sum(lay.recv_counts)), (sum(lg.send_counts), sum(lg.recv_counts))


def test_halo_modes_report_exact_losses_and_bytes_on_the_wire():
    from graphdist.exchange.quant import row_bytes
    g, _ = _graph_and_assignment()
    from graphdist.partition.setup import partition_in_process
    out = run_ranks(_halo_modes_job, 2, args=(g, partition_in_process(g, 2, "metis", 0)), timeout=240)
    reps = out[0][0]
    plain, mvc = reps[("plain", 32, 32)], reps[("mvc", 32, 32)]
    assert all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(mvc["losses"], plain["losses"]))  # exact
    # per layer (width, backward exchanged): 8 features -> 8 hidden -> 3 classes; the first
    # layer's input needs no gradient, so its backward moves nothing (models.py)
    layers = [(8, 0), (3, 1)]

    def epoch_bytes(counts, rb, rb_eval=None):  # train and eval forward send n_send rows, backward n_recv
        rb_eval = rb_eval or rb
        return sum(sum(s * rb(w) + back * r * rb(w) + s * rb_eval(w) for w, back in layers) for s, r in counts)
    mvc_counts = [o[1] for o in out]
    plain_counts = [o[2] for o in out]
    assert plain["comm/halo_bytes_per_epoch"] == epoch_bytes(plain_counts, lambda w: 4 * w)
    assert mvc["comm/halo_bytes_per_epoch"] == epoch_bytes(mvc_counts, lambda w: 4 * w)
    assert mvc["comm/halo_bytes_per_epoch"] < plain["comm/halo_bytes_per_epoch"]
    for bits, tol in ((8, 0.02), (2, 0.5)):
        rep = reps[("mvc", bits, 32)]  # training rows quantised, evaluation rows exact (32-bit)
        assert rep["comm/halo_bytes_per_epoch"] == epoch_bytes(mvc_counts, lambda w: row_bytes(w, bits),
                                                               lambda w: 4 * w)
        assert (rep["comm/halo"], rep["comm/halo_bits"], rep["comm/eval_halo_bits"]) == ("mvc", bits, 32)
        err = rep["comm/halo_rel_error"]
        assert len(err["forward"]) == len(err["backward"]) == 2 and err["backward"][0] is None
        assert all(0 < e < tol for e in err["forward"] + err["backward"][1:]), err
        assert rep["losses"] != mvc["losses"] and abs(rep["losses"][0] - mvc["losses"][0]) < 0.1
    assert plain["comm/halo_rel_error"] is None
    both = reps[("mvc", 8, 8)]  # --eval-halo-bits 8: the evaluation pass is quantised too
    assert both["comm/halo_bytes_per_epoch"] == epoch_bytes(mvc_counts, lambda w: row_bytes(w, 8))
    assert both["losses"] == reps[("mvc", 8, 32)]["losses"]  # same training: only evaluation differs
    assert both["comm/eval_halo_bits"] == 8
    # the summary says when a run is lossy, and why
    from graphdist.gnn.job import lossy, summary_line
    assert lossy(plain) == lossy(mvc) == [] and "lossy" not in summary_line(mvc)
    err8 = reps[("mvc", 8, 32)]["comm/halo_rel_error"]
    worst = max(e for e in err8["forward"] + err8["backward"] if e is not None)
    assert lossy(reps[("mvc", 8, 32)]) == [f"rows rounded, rel. error up to {worst:.1e}"]
    assert lossy(both)[1] == "evaluation rows at 8 bit"
    assert "(mvc, 8 bit, lossy: rows rounded, rel. error up to" in summary_line(both)
    assert lossy({"comm/halo_staleness": 1, "comm/boundary_rate": 0.1}) == [
        "halos 1 epoch stale", "boundary nodes sampled at 0.1"]


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_keyed_dropout_statistics(p):
    from graphdist.gnn.models import _key32, keyed_dropout
    ids = torch.arange(3, 40003) * 7919  # arbitrary global ids
    m = (keyed_dropout(torch.ones(ids.numel(), 48), p, ids, _key32(1, 2, 3)) > 0).double()
    assert abs(float(m.mean()) - (1 - p)) < 0.005
    c = m - m.mean()
    var = float(c.pow(2).mean())
    for a, b in ((c[:, :-1], c[:, 1:]), (c[:-1], c[1:]), (c[:, :24], c[:, 24:])):
        assert abs(float((a * b).mean()) / var) < 0.01  # neighbouring columns / rows uncorrelated
    # another key, another mask; the same key on a subset of the rows, the same rows' mask
    m2 = (keyed_dropout(torch.ones(ids.numel(), 48), p, ids, _key32(1, 3, 3)) > 0).double()
    assert abs(float(((m - m.mean()) * (m2 - m2.mean())).mean()) / var) < 0.01
    sub = keyed_dropout(torch.ones(100, 48), p, ids[500:600], _key32(1, 2, 3)) > 0
    assert torch.equal(sub, m[500:600] > 0)


def _plan_job(rank, ws):
    """Every rank partitions differently (as a multi-threaded partitioner may): the ranks must
    still train on one plan, so their owned nodes split the graph exactly."""
    from unittest import mock

    from graphdist.gnn.config import GCNConfig
    from graphdist.partition import setup
    from graphdist.procgroup import init_distributed
    init_distributed("cpu")

    def per_rank(graph, k, method, seed):
        return torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(100 + rank)) % k

    with mock.patch.object(setup, "partition_in_process", per_rank):
        lg, _ = setup.load_local(GCNConfig(spec=SPEC, parts=ws), rank, ws)
    return lg.owned.clone()


def test_every_rank_trains_on_rank_0s_partition():
    owned = run_ranks(_plan_job, 2, timeout=120)
    n = owned[0].numel() + owned[1].numel()
    assert n == 300 and torch.equal(torch.sort(torch.cat(owned)).values, torch.arange(300))


def _slow_partition_job(rank, ws, store_path):
    """A process group whose collectives time out after 5 s, and a rank 0 whose partitioner takes
    8 (METIS on a large graph takes minutes against the default 300 s). The graph is loaded once
    and the ranks meet before the short timeout starts, so only the partitioner's wait is long."""
    import datetime
    import time
    from unittest import mock

    import torch.distributed as dist

    from graphdist.data import load_graph
    from graphdist.gnn.config import GCNConfig
    from graphdist.partition import setup
    load_graph(SPEC)  # (its imports, before the short timeout)
    dist.barrier()
    dist.destroy_process_group()
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=5))
    real = setup.partition_in_process

    def slow(graph, k, method, seed):
        time.sleep(8)
        return real(graph, k, method, seed)

    with mock.patch.object(setup, "partition_in_process", slow):
        lg, _ = setup.load_local(GCNConfig(spec=SPEC, parts=ws), rank, ws)
    return lg.owned.clone()


def test_ranks_wait_for_rank_0s_partition_longer_than_the_collective_timeout(tmp_path):
    owned = run_ranks(_slow_partition_job, 2, args=(str(tmp_path / "store"),), timeout=120)
    assert torch.equal(torch.sort(torch.cat(owned)).values, torch.arange(300))


def _said_partition_job(rank, ws):
    import contextlib
    import io
    from unittest import mock

    from graphdist.gnn.config import GCNConfig
    from graphdist.partition import setup
    err = io.StringIO()
    with mock.patch.object(setup, "SAY_EDGES", 0), contextlib.redirect_stderr(err):
        setup.load_local(GCNConfig(spec=SPEC, parts=ws), rank, ws)
    return err.getvalue().splitlines()


def test_a_large_graph_says_it_is_being_partitioned_on_rank_0():
    """(At SAY_EDGES, 10M edges, METIS takes seconds to minutes; here any graph.)"""
    from graphdist.data import load_graph
    g = load_graph(SPEC)
    said0, said1 = run_ranks(_said_partition_job, 2, timeout=120)
    assert said0[0] == (f"[rank 0] partitioning 300 nodes and {g.num_edges:,} edges into 2 parts with auto (the other "
                        "ranks wait; `graphdist partition` does it once for every run)")
    assert said0[1].startswith("[rank 0] partitioned in ") and said0[1].endswith(" s") and said1 == []


def test_parts_that_contradict_the_artifact_are_refused(tmp_path, capsys):
    d = _write_artifact(tmp_path / "p")
    assert main(["train-gcn", "--partition", str(d), "--parts", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--parts 3 does not match the artifact" in err[0], err


def _more_parts_than_nodes_job(rank, ws):
    from graphdist.errors import ConfigError
    from graphdist.gnn.trainer import GCNConfig
    from graphdist.partition import setup
    from graphdist.procgroup import init_distributed
    init_distributed("cpu")
    try:
        setup.load_local(GCNConfig(spec="sbm:nodes=2,classes=2,avg_degree=1,features=2", parts=ws), rank, ws)
    except ConfigError as e:
        return str(e)
    return None


def test_more_parts_than_nodes_is_refused_by_every_rank_alike():
    """k = 3 ranks partitioning a 2-node graph in process: every rank refuses with the one line a
    process gives (`graphdist partition` too), so rank 0 prints it once; the check was rank 0's
    partitioner alone, whose peers then failed waiting for its assignment ("collective failed")."""
    said = run_ranks(_more_parts_than_nodes_job, 3, timeout=120)
    assert said == ["--parts 3 must be between 1 and the number of nodes N=2"] * 3, said
