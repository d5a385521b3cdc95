"""Shared test fixtures: where the real data lives, CUDA skip marker; no process a test starts
outlives the test runner."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Set before torch loads OpenMP (it reads this then), and inherited by every process a test
# starts: the suite runs more threads than the box has cores (a test process per core and one
# more, each with its ranks), where a thread that spins at a barrier (OpenMP's default) burns the
# core another process needs. Passive waiting took the suite from 727 to 704 s and its user CPU
# from 907 to 854 s, one run after the other on a quiet 2-core box (2026-12-07). A job of
# graphdist's own shares a host's cores among its ranks (graphdist.hosts) and keeps the default.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _end_with_the_suite(popen_init):
    """Every process a test starts ends with the test runner, also when the runner is killed
    outright (SIGTERM, SIGKILL: nothing of Python runs then): the kernel kills the child when
    pytest exits (:func:`graphdist.proc.parent_death_signal` in the child before it runs its
    program). A job started by a test passes it on: graphdist's workers end with their launcher
    (:func:`graphdist.proc.end_with_parent`)."""
    import functools
    import threading

    from graphdist.proc import can_end_with_parent, parent_death_signal
    if not can_end_with_parent():  # not Linux
        return popen_init

    @functools.wraps(popen_init)
    def init(self, *args, **kwargs):
        # the death signal follows the thread that forks: only the main thread's children get it
        if kwargs.get("preexec_fn") is None and threading.current_thread() is threading.main_thread():
            kwargs["preexec_fn"] = parent_death_signal
        popen_init(self, *args, **kwargs)
    return init


subprocess.Popen.__init__ = _end_with_the_suite(subprocess.Popen.__init__)

SHARED_DATA = Path(os.environ.get("GRAPHDIST_SHARED_DATA", REPO.parent / "shared" / "datasets"))

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def shared_file(*parts) -> Path:
    """A file under ../shared/datasets, or skip the test cleanly when it is absent."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"real data not present: {p}")
    return p


def once_per_run(tmp_path_factory, name: str, make):
    """``make(folder)`` once per test run, shared by every xdist worker: the first worker to ask
    runs it under a file lock while the others wait, and its pickled result (and whatever it wrote
    into ``folder``) serves them all. A module-scoped fixture is set up again by each worker that
    runs one of the module's tests, and again after a stolen test from elsewhere ran between two
    of them (three set-ups of a 15-22 s DLRM job per suite)."""
    import pickle

    from filelock import FileLock
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each worker's own
    folder, result = root / f"once-{name}", root / f"once-{name}.pkl"
    with FileLock(str(root / f"once-{name}.lock")):
        if not result.is_file():
            folder.mkdir(exist_ok=True)
            result.write_bytes(pickle.dumps(make(folder)))
        return pickle.loads(result.read_bytes())


@pytest.fixture(autouse=True, scope="session")
def _cache_home(tmp_path_factory):
    """graphdist's cache home (``$XDG_CACHE_HOME/graphdist``) in the session's temporary folder,
    not the user's ``~/.cache``; the processes the tests start inherit it."""
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before


@pytest.fixture
def cora_dir() -> Path:
    return shared_file("planetoid", "Cora")


def planetoid(name: str) -> Path:
    """A Planetoid dataset folder: ../shared/datasets first, then the data home (where
    ``scripts/fetch_planetoid.py`` writes CiteSeer and PubMed); skip the test when neither has it."""
    for root in (SHARED_DATA, REPO / "datasets"):
        if (root / "planetoid" / name / "raw").is_dir():
            return root / "planetoid" / name
    pytest.skip(f"real data not present: planetoid/{name} in {SHARED_DATA} or {REPO / 'datasets'}")


@pytest.fixture
def gnutella() -> Path:
    return shared_file("snap", "p2p-Gnutella24.txt")


@pytest.fixture
def facebook() -> Path:
    return shared_file("snap", "facebook_combined.txt")


@pytest.fixture
def restore_dist_env():
    """The in-process (world size 1) path sets MASTER_ADDR/PORT; do not leak them to other tests."""
    keys = ("MASTER_ADDR", "MASTER_PORT")
    before = {k: os.environ.get(k) for k in keys}
    yield
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


SLOW_FIRST = ("test_hosts.py", "test_launch.py", "test_readme_outputs.py", "test_dlrm_reshard.py",
              "test_dlrm_faults.py", "test_halo_auto.py", "test_dlrm_2d.py", "test_reshard.py", "test_stale.py",
              "test_sbm_learnable.py", "test_demo.py", "test_rec_reshard.py", "test_docs.py", "test_dlrm_parity.py")
"""Files whose tests take the longest (--durations), handed out first: with xdist, a 40 s test
started last would be the suite's tail while the other workers sit idle."""


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (``pyproject.toml``): one test process more than the cores this process may use.
    A worker spends much of its time waiting on what it started (ranks, launchers, test-bed hosts,
    a collective's timeout): on a quiet 2-core box two workers kept the cores 58% busy (CPU time
    727 s in 623 s of wall), so a third fills those waits."""
    return len(os.sched_getaffinity(0)) + 1


def pytest_collection_modifyitems(config, items):
    """The files of :data:`SLOW_FIRST` first, in that order; each file's tests stay together and
    in their order (module-scoped fixtures are set up once), the rest as collected."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda it: rank.get(it.path.name, len(SLOW_FIRST)))
