"""Every exit path is clean: a finished worker leaves no process-group thread for interpreter
teardown (where one aborted a finished job: "terminate called without an active exception"),
both entry points finish short jobs with exit 0, and failure lines name the right thing whole."""
from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest
import torch

from graphdist.testing import run_ranks

REPO = Path(__file__).resolve().parents[1]
GLOO = ("gloo", "pt_gloo")  # thread names of a gloo process group (Linux)


def _threads() -> list[str]:
    return [Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in sorted(os.listdir("/proc/self/task"))]


needs_proc = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread names need Linux /proc")


def _bound_default_then_shutdown(rank, world):
    """A torch module imported after the group exists binds it into function defaults (what
    torch.distributed.checkpoint's import does); the group must still go with shutdown()."""
    import importlib

    import torch.distributed as dist
    import torch.distributed.nn.functional as fn

    from graphdist.procgroup import shutdown
    fn = importlib.reload(fn)  # imported now, after the group exists (a forked rank may have had it before)
    bound = fn.all_reduce.__defaults__[-1] is not None
    out = [None] * world
    dist.all_gather_object(out, rank)  # the kind of collective whose tensors a gloo thread releases
    before = [t for t in _threads() if t.startswith(GLOO)]
    left = shutdown()
    return bound, before, left, [t for t in _threads() if t.startswith(GLOO)], fn.all_reduce.__defaults__[-1]


@needs_proc
def test_shutdown_joins_a_group_bound_into_torch_defaults():
    for bound, before, left, after, default in run_ranks(_bound_default_then_shutdown, 2, timeout=120):
        assert bound and before, (bound, before)  # the group was held, its threads ran
        assert left == [] and after == [] and default is None, (left, after, default)


def _worker_then_threads(rank, world, kind, ckpt):
    """A job's real worker (rank_main: train, shutdown, summary, report), then this process's
    threads: none of a process group may be left."""
    if kind == "gcn":
        from graphdist.gnn.config import GCNConfig
        from graphdist.gnn.job import worker
        cfg = GCNConfig(spec="sbm:nodes=600,classes=3,features=8,seed=0", epochs=2, progress=False,
                        summary=False, checkpoint_dir=ckpt, checkpoint_every=1)
    else:
        from embeddings.config import DLRMTrainConfig
        from embeddings.job import quiet_torchrec, worker
        quiet_torchrec()
        cfg = DLRMTrainConfig(spec="criteo-synth:rows=2000", steps=4, batch_size=128, progress=False,
                              print_plan=False, checkpoint_dir=ckpt, checkpoint_every=2)
    worker(cfg)
    import torch.distributed as dist
    return dist.is_initialized(), [t for t in _threads() if t.startswith(GLOO)]


@needs_proc
@pytest.mark.parametrize("kind", ["gcn", "dlrm"])
def test_a_finished_worker_leaves_no_group_thread(tmp_path, kind):
    """With checkpoints (DCP binds the group into torch defaults) and, for DLRM, torchrec's
    sharded modules (reference cycles holding the group and ZeRO's bound default)."""
    for initialised, gloo in run_ranks(_worker_then_threads, 2, args=(kind, str(tmp_path / "ck")), timeout=240):
        assert not initialised and gloo == [], gloo


def _soak():
    if str(REPO / "benchmarks") not in sys.path:  # its harness, as `python benchmarks/exit_soak.py` finds it
        sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location("exit_soak", REPO / "benchmarks" / "exit_soak.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("exit_soak", mod)  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_a_job_under_an_external_torchrun_exits_cleanly(tmp_path):
    """One run of benchmarks/exit_soak.py's GCN job through an external torchrun, the entry point
    no other test trains to the end with (the soak itself, both entry points and resumes, many
    times, is the benchmark's: BENCHMARKS.md)."""
    soak = _soak()
    r = soak.run_one("torchrun", "gcn-resume", tmp_path, False, timeout=240)
    assert r.ok and r.report_ok, f"{r.entry} {r.step}: rc {r.rc}\n{r.log[-3000:]}"
    assert "Traceback" not in r.log, r.log[-3000:]


GLOO_PEER = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
             "[127.0.0.1]:13463. This is typically caused by a remote worker crashing. Check the logs of the "
             "remote worker before reporting an error. GLHF!")


def test_first_sentences_cuts_at_a_boundary():
    from graphdist.failures import first_sentences
    got = first_sentences(GLOO_PEER)
    assert got.endswith("This is typically caused by a remote worker crashing."), got
    assert len(got) <= 200 and GLOO_PEER.startswith(got)
    assert first_sentences("short one.\nsecond line") == "short one."
    assert first_sentences("") == ""
    long_sentence = "word " * 50 + "end. Next."  # 254 chars up to "end.": kept whole (< 2 x 200)
    assert first_sentences(long_sentence) == long_sentence[:-len(" Next.")]
    words = "abcdefghi " * 60  # no sentence end at all: whole words, then "..."
    cut = first_sentences(words)
    assert cut.endswith(" ...") and len(cut) <= 204 and cut[:-4].split() == ["abcdefghi"] * len(cut[:-4].split())


def test_peer_failure_line_keeps_whole_sentences():
    from graphdist import failures
    from graphdist.errors import DistributedError
    with pytest.raises(DistributedError) as ei:
        failures.raise_peer_failure(RuntimeError(GLOO_PEER), "epoch 3")
    msg = str(ei.value)
    assert msg.startswith("rank 0: collective failed during epoch 3: ")
    assert msg.endswith("(" + failures.first_sentences(GLOO_PEER) + ")"), msg
    assert "remote w)" not in msg and "Check the logs" not in msg


def test_failure_publishing_keeps_whole_sentences(monkeypatch):
    from graphdist import failures
    seen = []
    monkeypatch.setattr(failures, "publish_error", seen.append)
    failures.publish_failure(RuntimeError(GLOO_PEER))
    assert seen == ["RuntimeError: " + failures.first_sentences(GLOO_PEER)]


@pytest.fixture
def launcher_env(monkeypatch):
    """This process as a rank of a launcher (RANK, WORLD_SIZE, GROUP_WORLD_SIZE = nodes)."""
    def set_env(nodes: int = 1, world: int = 2):
        monkeypatch.setenv("RANK", "0")
        monkeypatch.setenv("WORLD_SIZE", str(world))
        monkeypatch.setenv("GROUP_WORLD_SIZE", str(nodes))
    for k in ("RANK", "WORLD_SIZE", "GROUP_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    return set_env


def test_start_hint_names_the_flags_of_the_launcher(launcher_env, monkeypatch):
    from graphdist.launch import start_hint
    assert start_hint(4) == "--nproc 4"  # one process: graphdist starts the workers
    launcher_env()
    assert start_hint(4) == "torchrun --nproc-per-node 4"
    launcher_env(nodes=2, world=4)
    assert start_hint(4) == "torchrun --nnodes 2 --nproc-per-node 2"
    assert start_hint(5) == "torchrun --nnodes N --nproc-per-node M with N x M = 5"
    # a worker graphdist's own --nproc started (python -m graphdist.worker)
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", types.SimpleNamespace(name="graphdist.worker"))
    assert start_hint(4) == "--nnodes 2 --nproc 2"
    launcher_env(nodes=1)
    assert start_hint(3) == "--nproc 3"


def test_world_size_mismatch_under_torchrun_names_torchrun_flags(launcher_env, tmp_path):
    from graphdist.errors import ArtifactError, ConfigError
    from graphdist.gnn.config import GCNConfig
    from graphdist.partition.setup import load_local
    launcher_env()
    with pytest.raises(ConfigError, match=r"--parts 3 does not match the world size 2 \(start 3 workers, "
                                          r"e\.g\. torchrun --nproc-per-node 3\)"):
        load_local(GCNConfig(spec="sbm:nodes=300", parts=3), 0, 2)
    from graphdist.partition.tools import PartitionConfig, partition_to_artifact
    art = tmp_path / "p3"
    partition_to_artifact(PartitionConfig(spec="sbm:nodes=300", parts=3, out=str(art), method="random"))
    with pytest.raises(ArtifactError, match=r"has k=3 parts but the world size is 2 \(start 3 workers, "
                                            r"e\.g\. torchrun --nproc-per-node 3\)"):
        load_local(GCNConfig(partition=str(art)), 0, 2)


def test_torchrun_job_with_the_wrong_world_size_says_torchrun(tmp_path):
    """As a user meets it: torchrun with 2 workers for 3 parts; one line naming torchrun's flag."""
    import subprocess
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "-m", "graphdist", "train-gcn", "sbm:nodes=300", "--parts", "3", "--no-progress"],
                       capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("graphdist:")]
    assert lines == ["graphdist: error: --parts 3 does not match the world size 2 (start 3 workers, "
                     "e.g. torchrun --nproc-per-node 3)"], r.stderr[-3000:]
    frames = [ln for ln in r.stderr.splitlines() if ln.strip().startswith("File ")]
    assert not [f for f in frames if "graphdist" in f], r.stderr[-3000:]  # only torchrun's own report


_EXIT_PROBE = '''import atexit, gc, os, sys
def _said():
    with open(os.path.join(os.environ["GRAPHDIST_EXIT_PROBE"], f"{os.getpid()}.txt"), "w") as f:
        f.write(f"{gc.get_freeze_count()} {' '.join(sys.argv[:2])}")
atexit.register(_said)
'''


def test_every_process_of_a_job_exits_without_walking_torchs_objects(tmp_path):
    """The `graphdist` command (its console script), ``python -m graphdist`` and each launched
    worker end through launch.leave, which freezes what is alive (graphdist.proc.
    skip_final_collection): a probe that every Python process of the job loads (a
    sitecustomize on PYTHONPATH) reads, at exit, how many objects the collector was kept from."""
    import shutil
    import subprocess
    import tomllib
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"] == {"graphdist": "graphdist.cli:run"}
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "sitecustomize.py").write_text(_EXIT_PROBE)
    said = tmp_path / "said"
    said.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GRAPHDIST_EXIT_PROBE": str(said),
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "probe"), str(REPO)])}
    command = shutil.which("graphdist")
    if command is None:
        pytest.skip("the graphdist command is not installed (bash scripts/install.sh)")
    for argv in ([command, "train-gcn", "sbm:nodes=300,classes=3,features=4,seed=0", "--parts", "2", "--epochs", "1",
                  "--no-progress"], [sys.executable, "-m", "graphdist", "data", "info", "sbm:nodes=300"]):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
    ends = sorted(p.read_text() for p in said.iterdir())
    assert len(ends) == 4, ends  # the command, its two workers, python -m graphdist
    assert all(int(e.split()[0]) > 10_000 for e in ends), ends  # torch alone leaves ~10^5 objects
    assert sorted(e.split(" ", 1)[1].split()[-1] for e in ends) == ["data", "graphdist.gnn.job:worker",
                                                                   "graphdist.gnn.job:worker", "train-gcn"], ends
