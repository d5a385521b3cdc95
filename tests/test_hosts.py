"""Every trainer across real hosts: network namespaces on this machine (graphdist.testbed), real TCP
between separate addresses and hostnames, against the same job on one host.

Skipped, with the reason, where namespaces cannot be made (not root, no iproute2)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from graphdist.testbed import Testbed, can_make, finish
from tests.conftest import once_per_run

Testbed.__test__ = False  # (a class named Test*, not a test)

WHY = can_make()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no network-namespace test bed here: {WHY}")

REPO = Path(__file__).resolve().parents[1]
CORA = REPO.parent / "shared" / "datasets" / "planetoid" / "Cora"
GD = [sys.executable, "-m", "graphdist"]
ENDPOINT = "h0:29500"  # (each test bed has its own network: the port is free)


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("OMP_NUM_THREADS", None)  # the workers choose their share of the cores
    return env


def across_hosts(argv: list[str], hosts: int, nproc: int, report: Path, tb: Testbed | None = None,
                 launcher: str = "graphdist", endpoint: str = ENDPOINT) -> list[tuple[int, str]]:
    """Run ``argv`` on ``hosts`` hosts x ``nproc`` ranks; host 0 writes ``report`` (graphdist)."""
    def start(tb):
        cmds = []
        for i in range(hosts):
            if launcher == "graphdist":
                cmds.append(GD + argv + ["--nnodes", str(hosts), "--nproc", str(nproc), "--rdzv-endpoint", endpoint,
                                         "--report", str(report) if i == 0 else str(report) + f".{i}"])
            else:  # torchrun: an external launcher, the user's own script
                cmds.append([sys.executable, "-m", "torch.distributed.run", "--nnodes", str(hosts), "--nproc-per-node",
                             str(nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, *argv])
        return tb.run_all(cmds, timeout=240, env=_env())
    if tb is not None:
        return start(tb)
    with Testbed(hosts) as tb:
        return start(tb)


def _cli_rank(rank: int, world_size: int, argv: list[str]) -> int:
    from graphdist.cli import main
    return main(argv)


def one_host(argv: list[str], nproc: int, report: Path) -> tuple[int, str]:
    """The same job on one host, as a reference: ``nproc`` ranks forked in this test's process
    (:func:`graphdist.testing.run_ranks`, as under torchrun), which pay no launcher and no imports."""
    from graphdist.testing import RankFailure, run_ranks
    try:
        codes = run_ranks(_cli_rank, nproc, (argv + ["--report", str(report)],), timeout=240)
    except RankFailure as e:
        return 1, str(e)
    return max(codes), f"exit codes {codes}"


def _ok(results):
    for i, (rc, text) in enumerate(results):
        assert rc == 0, f"host {i} exited {rc}:\n{text[-3000:]}"


def test_testbed_hosts_names_links_and_cleanup():
    with Testbed(2, gbps=0.5) as tb:
        made = list(tb.ns) + [tb.switch]
        r = tb.run(1, ["sh", "-c", "hostname; getent hosts h0 h1"])
        assert r.returncode == 0, r.stderr
        lines = r.stdout.split("\n")
        assert lines[0] == "h1"
        assert "10.77.0.1" in lines[1] and "h0" in lines[1] and "10.77.0.2" in lines[2]
        q = tb.run(0, ["tc", "qdisc", "show", "dev", "eth0"])
        assert "tbf" in q.stdout and "500Mbit" in q.stdout, q.stdout
        # the bucket holds about 1 ms of line rate (62,500 bytes at 0.5 Gbit/s), as a physical link
        # sends nothing faster than its rate (the earlier 256 KiB passed the head of each exchange at once)
        size, unit = re.search(r"burst (\d+)(b|Kb|Mb)\b", q.stdout).groups()
        assert int(size) * {"b": 1, "Kb": 1024, "Mb": 1 << 20}[unit] == 62_500, q.stdout
        probe = [sys.executable, "-c", "import socket,sys; socket.create_connection(('h0', 22), timeout=2)"]
        listener = tb.popen(0, [sys.executable, "-c", "import socket,time; s=socket.create_server(('0.0.0.0', 22)); "
                                "[s.accept() for _ in range(2)]"])
        for _ in range(50):  # wait for the listener
            if tb.run(1, probe).returncode == 0:
                break
        else:
            pytest.fail("host 1 never reached host 0's listener")
        rx0, tx0 = tb.link_bytes(1)
        tb.cut(1)
        assert tb.run(1, probe).returncode != 0  # a cut link carries nothing
        tb.heal(1)
        assert any(tb.run(1, probe, timeout=30).returncode == 0 for _ in range(10))
        assert tb.link_bytes(1)[1] > tx0
        listener.kill()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in names for n in made)
    assert not any(os.path.exists(f"/etc/netns/{n}") for n in made)


def test_testbed_removed_when_the_body_raises():
    with pytest.raises(RuntimeError), Testbed(1) as tb:
        made = tb.ns[0]
        raise RuntimeError("boom")
    assert made not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_testbed_cli_runs_on_every_host_and_says_bad_flags_in_one_line():
    p = subprocess.run([sys.executable, "-m", "graphdist.testbed", "--hosts", "2", "--", "sh", "-c", "echo {host} {i}"],
                       capture_output=True, text=True, env=_env(), timeout=60)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.splitlines()) == ["[h0] h0 0", "[h1] h1 1"]
    p = subprocess.run([sys.executable, "-m", "graphdist.testbed", "--gbps", "-1", "--", "true"],
                       capture_output=True, text=True, env=_env(), timeout=60)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "--gbps" in p.stderr


GCN = [f"planetoid:{CORA}", "--epochs", "6", "--hidden", "16"]
GCN_CASES = {  # (mvc, the default, runs across 2 hosts x 2 ranks below)
    "stale-8bit": ["--halo-staleness", "1", "--halo-bits", "8"],
    "plain-boundary": ["--halo", "plain", "--boundary-rate", "0.5"],
    "auto": ["--halo", "auto"],
}


@pytest.mark.skipif(not CORA.exists(), reason="Cora is not in ../shared/datasets")
@pytest.mark.parametrize("case", list(GCN_CASES))
def test_gcn_across_two_hosts_equals_one_host(case, tmp_path):
    argv = ["train-gcn", *GCN, "--parts", "2", *GCN_CASES[case]]
    res = across_hosts(argv, 2, 1, tmp_path / "hosts.json")
    _ok(res)
    rc, text = one_host(argv, 2, tmp_path / "one.json")
    assert rc == 0, text
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("hosts.json", "one.json"))
    assert a["world_size"] == b["world_size"] == 2
    if case == "auto":  # the choice follows the measured link, which differs; the run must work
        assert a["comm/halo_auto"] and len(a["losses"]) == 6
        return
    assert a["losses"] == pytest.approx(b["losses"], rel=1e-6, abs=1e-7)
    assert a["comm/halo_bytes_per_epoch"] == b["comm/halo_bytes_per_epoch"]
    assert "Traceback" not in res[0][1] + res[1][1]
    assert a["run/threads"] == 1  # 2 ranks on this machine's cores, one per host: 2 cores / 2
    # two hosts (network namespaces) of one machine, as every rank agreed: graphdist/hosts.py
    assert (a["run/hosts"], a["run/host_of_rank"], a["run/machines"]) == (2, [0, 1], 1)
    assert (b["run/hosts"], b["run/host_of_rank"], b["run/machines"]) == (1, [0, 0], 1)


@pytest.mark.skipif(not CORA.exists(), reason="Cora is not in ../shared/datasets")
def test_gcn_two_hosts_by_two_ranks(tmp_path):
    argv = ["train-gcn", *GCN, "--parts", "4"]
    _ok(across_hosts(argv, 2, 2, tmp_path / "hosts.json"))
    rc, text = one_host(argv, 4, tmp_path / "one.json")
    assert rc == 0, text
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("hosts.json", "one.json"))
    assert a["world_size"] == 4
    assert a["losses"] == pytest.approx(b["losses"], rel=1e-6, abs=1e-7)


REC = ["train-rec", "rec-synth:users=300,items=200", "--parts", "2", "--epochs", "3", "--eval-every", "3"]
DLRM = ["train-dlrm", "criteo-synth:rows=4000", "--steps", "6", "--batch-size", "128", "--sharding", "row_wise"]


@pytest.mark.parametrize("name,argv,hosts,nproc,key", [
    ("rec", REC, 2, 1, "losses"),
    ("dlrm-1d", DLRM, 2, 1, "losses"),
    ("dlrm-2d", DLRM + ["--sparse-groups", "2", "--sync-every", "1"], 2, 2, "losses"),
])
def test_recommenders_across_hosts_equal_one_host(name, argv, hosts, nproc, key, tmp_path):
    _ok(across_hosts(argv, hosts, nproc, tmp_path / "hosts.json"))
    rc, text = one_host(argv, hosts * nproc, tmp_path / "one.json")
    assert rc == 0, text
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("hosts.json", "one.json"))
    assert a["world_size"] == hosts * nproc
    assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7)


@pytest.mark.skipif(not CORA.exists(), reason="Cora is not in ../shared/datasets")
def test_users_pyg_script_under_torchrun_across_hosts(tmp_path):
    script = [str(REPO / "examples" / "gat_cora.py"), f"planetoid:{CORA}", "--epochs", "3", "--log-every", "1"]
    res = across_hosts(script, 2, 1, tmp_path / "unused", launcher="torchrun")
    _ok(res)
    from graphdist.testing import run_ranks
    code, printed = run_ranks(_script_rank, 2, (script,), timeout=240)[0]  # the same script on one host
    assert code == 0, printed[-3000:]
    lines = [ln for ln in res[0][1].splitlines() if ln.startswith("epoch")]
    assert len(lines) == 3 and lines == [ln for ln in printed.splitlines() if ln.startswith("epoch")]


def _script_rank(rank: int, world_size: int, argv: list[str]) -> tuple[int, str]:
    """A user's script's ``main`` on a rank forked as torchrun's worker (no launcher, no fresh
    imports), with graphdist's error policy as its ``gd.main`` applies it (which then leaves the
    process at once): the exit code and what it printed."""
    import contextlib
    import io
    import runpy

    from graphdist.launch import guarded
    out = io.StringIO()
    sys.argv = list(argv)
    script = runpy.run_path(argv[0], run_name="user_script")  # (not __main__: defines, does not run)
    with contextlib.redirect_stdout(out):
        code = guarded(script["main"])
    return code, out.getvalue()


def test_testbed_cli_names_the_host_whose_command_was_killed_or_failed():
    """Host 1's command is killed (SIGKILL, as `kill -9` of its launcher): the test bed says so in one
    line tagged with that host (as it ends); a failing command's code is named too; the bed exits
    128 + 9, as a shell would."""
    script = 'if [ {i} = 1 ]; then kill -9 $$; fi; echo {host} done; [ {i} = 0 ] || exit 3'
    p = subprocess.run([sys.executable, "-m", "graphdist.testbed", "--hosts", "3", "--", "sh", "-c", script],
                       capture_output=True, text=True, env=_env(), timeout=60)
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr)
    assert sorted(p.stdout.splitlines()) == ["[h0] h0 done", "[h1] graphdist.testbed: h1's command was killed by SIGKILL",
                                             "[h2] graphdist.testbed: h2's command exited with code 3",
                                             "[h2] h2 done"], p.stdout


def test_rendezvous_failures_end_in_one_line(tmp_path):
    """Hosts whose names resolve to loopback, or not at all, still meet (graphdist decides the store
    host, the address to dial and gloo's interface from the route to the endpoint); an endpoint
    nobody answers at ends each node with one line, no stack trace."""
    argv = ["train-gcn", "sbm:nodes=200", "--parts", "2", "--epochs", "2"]
    with Testbed(2) as tb:
        tb.set_hosts(0, "127.0.0.1 localhost h0\n")  # host 0's own name is loopback
        tb.set_hosts(1, "127.0.0.1 localhost\n")  # host 1's own name does not resolve
        _ok(across_hosts(argv, 2, 1, tmp_path / "a.json", tb=tb, endpoint="10.77.0.1:29500"))
        p = tb.run(1, GD + argv + ["--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", "10.77.0.9:29500",
                                    "--rdzv-timeout", "5"], timeout=200)
    assert p.returncode == 2, p.stdout + p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "cannot reach the rendezvous endpoint 10.77.0.9:29500" in err[0], p.stderr


def _workers_of(pid: int) -> list[int]:
    """The worker processes torch's agent ``pid`` started (its children)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def _wait_for(path: Path, procs, timeout=240.0) -> None:
    import time
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        assert all(p.poll() is None for p in procs), "the job ended before its first checkpoint"
        time.sleep(0.1)


FAULT = ["train-gcn", "sbm:nodes=2000", "--parts", "2", "--epochs", "300", "--checkpoint-every", "20", "--hidden", "16"]


@pytest.fixture(scope="session")
def unbroken(tmp_path_factory) -> dict:
    """The fault tests' reference: the same job on one host, never broken (once per test run)."""
    return once_per_run(tmp_path_factory, "hosts_unbroken", _unbroken)


def _unbroken(folder) -> dict:
    rc, text = one_host(FAULT, 2, folder / "unbroken.json")
    assert rc == 0, text
    return json.loads((folder / "unbroken.json").read_text())


def test_gcn_survives_a_killed_worker_on_another_host(tmp_path, unbroken):
    """--max-restarts 1 --resume auto across 2 hosts: host 1's worker killed after the first checkpoint;
    both agents re-form the group, which continues from the checkpoint to the unbroken run's result."""
    import signal
    ck = tmp_path / "ck"
    argv = FAULT + ["--checkpoint-dir", str(ck), "--resume", "auto", "--max-restarts", "1"]
    with Testbed(2) as tb:
        procs = [tb.popen(i, GD + argv + ["--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", ENDPOINT, "--report",
                                          str(tmp_path / f"r{i}.json")], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=_env()) for i in range(2)]
        _wait_for(ck / "latest", procs)
        workers = _workers_of(procs[1].pid)
        assert len(workers) == 1, workers
        os.kill(workers[0], signal.SIGKILL)
        res = finish(procs, timeout=240)
    _ok(res)
    assert "restart 1 of the worker group" in res[0][1] and "resumed from epoch" in res[0][1]
    a = json.loads((tmp_path / "r0.json").read_text())
    assert a["run/restarts"] == 1
    assert a["losses"] == pytest.approx(unbroken["losses"], rel=1e-6, abs=1e-7)


def test_gcn_survives_a_killed_worker_under_two_external_torchrun_agents(tmp_path, unbroken):
    """The user's own `torchrun --nnodes 2 --max-restarts 1` on each host (torch's default: the
    workers share the agent's store, which keeps every round's keys): host 1's worker killed after
    the first checkpoint. Host 1's agent counts a restart, host 0's does not, so the nodes' counters
    differ; the group still re-forms (its round agreed through the store, graphdist/restarts.py)
    and finishes with the unbroken run's final loss."""
    import signal
    ck = tmp_path / "ck"
    argv = FAULT + ["--checkpoint-dir", str(ck), "--resume", "auto", "--timeout", "60"]
    run = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1", "--max-restarts",
           "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", ENDPOINT, "-m", "graphdist"]
    with Testbed(2) as tb:
        procs = [tb.popen(i, run + argv + ["--report", str(tmp_path / f"r{i}.json")], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=_env()) for i in range(2)]
        _wait_for(ck / "latest", procs)
        workers = _workers_of(procs[1].pid)
        assert len(workers) == 1, workers
        os.kill(workers[0], signal.SIGKILL)
        res = finish(procs, timeout=300)
    _ok(res)
    [report] = [p for p in (tmp_path / "r0.json", tmp_path / "r1.json") if p.exists()]  # (rank 0's host writes it)
    a = json.loads(report.read_text())
    assert a["run/restarts"] == 1 and a["run/hosts"] == 2 and a["run/machines"] == 1
    assert "restart 1 of the worker group" in res[0][1] + res[1][1]
    assert a["losses"][-1] == pytest.approx(unbroken["losses"][-1], rel=1e-6, abs=1e-7)
    assert a["losses"] == pytest.approx(unbroken["losses"], rel=1e-6, abs=1e-7)


def test_cut_link_ends_both_hosts_in_one_line_and_a_resume_finishes_the_run(tmp_path, unbroken):
    """Host 1's link cut mid-run, no restarts: host 0 (the store's) ends within the collective
    timeout with one line; once the link is healed, host 1 ends with graphdist's lines; the last
    checkpoint is intact, and a resume finishes with the unbroken run's losses."""
    import time
    ck = tmp_path / "ck"
    argv = FAULT + ["--checkpoint-dir", str(ck), "--resume", "auto", "--timeout", "10"]
    node = ["--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", ENDPOINT]
    logs = [tmp_path / f"err{i}.txt" for i in range(2)]
    with Testbed(2) as tb:
        procs = [tb.popen(i, GD + argv + node, stdout=subprocess.DEVNULL, stderr=open(logs[i], "w"), env=_env())
                 for i in range(2)]
        _wait_for(ck / "latest", procs)
        tb.cut(1)
        cut_at = time.monotonic()
        rc0 = procs[0].wait(timeout=300)
        took0 = time.monotonic() - cut_at
        tb.heal(1)  # host 1's launcher, cut off from the store, learns on the healed link that it is gone
        rc1 = procs[1].wait(timeout=300)
        took1 = time.monotonic() - cut_at
        errs = [f.read_text().replace("\r", "\n") for f in logs]
        latest = sorted(p.name for p in ck.iterdir())
        res = tb.run_all([GD + argv + node + ["--report", str(tmp_path / f"r{i}.json")] for i in range(2)],
                         timeout=240, env=_env())
    print(f"after the cut: host 0 ended in {took0:.1f} s, host 1 in {took1:.1f} s; latest {latest}")
    assert rc0 == 2 and rc1 != 0
    lines0 = [ln for ln in errs[0].splitlines() if ln.strip() and "train-gcn:" not in ln and "threads" not in ln]
    assert len(lines0) == 1 and "rank 1 stopped responding" in lines0[0], errs[0]
    lines1 = [ln for ln in errs[1].splitlines() if ln.strip() and "train-gcn:" not in ln]
    assert lines1 and all(ln.startswith("graphdist: error:") for ln in lines1), errs[1]
    _ok(res)
    assert "resumed from epoch" in res[0][1]
    a = json.loads((tmp_path / "r0.json").read_text())
    assert a["losses"] == pytest.approx(unbroken["losses"], rel=1e-6, abs=1e-7)
