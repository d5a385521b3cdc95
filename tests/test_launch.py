"""Failures a user meets, as they really print: Ctrl-C and SIGTERM during training (one line,
exit 130 / 143, resumable), a node lost from a multi-node job, unwritable outputs. Every job
runs in its own process group, signalled the way a terminal or a scheduler would."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_ranks import run_cli

SPEC = "sbm:nodes=300,classes=3,avg_degree=5,features=8,seed=0"
TRAIN = ["train-gcn", SPEC, "--parts", "2", "--method", "random", "--no-progress", "--timeout", "60"]


def _start(args, env=None):
    return subprocess.Popen([sys.executable, "-m", "graphdist", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def _wait_for(path: Path, procs, timeout: float = 150.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        for p in procs:
            if p.poll() is not None:
                out, err = p.communicate()
                pytest.fail(f"job ended early ({p.returncode}): {err[-2000:]}")
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"{path} did not appear within {timeout:.0f}s")
        time.sleep(0.2)


def _wait_for_port(port: int, proc, timeout: float = 150.0) -> None:
    import socket
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None:
            pytest.fail(f"job ended early ({proc.returncode}): {proc.communicate()[1][-2000:]}")
        time.sleep(0.1)
    pytest.fail(f"nothing listened on port {port} within {timeout:.0f}s")


def _wait_for_checkpoint(ck: Path, world_size: int, procs, timeout: float = 150.0) -> None:
    """Until ``ck``'s latest snapshot was written by ``world_size`` ranks."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            meta = json.loads((ck / (ck / "latest").read_text().strip() / "meta.json").read_text())
            if meta["world_size"] == world_size:
                return
        except (OSError, ValueError, KeyError):
            pass
        _wait_for(ck / "latest", procs, timeout)
        time.sleep(0.1)
    pytest.fail(f"no checkpoint of {world_size} ranks in {ck} within {timeout:.0f}s")


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (torch's launcher starts workers in sessions of their own, so
    signalling the launcher's process group does not reach them)."""
    out, todo = [], [pid]
    while todo:
        q = todo.pop()
        out.append(q)
        r = subprocess.run(["pgrep", "-P", str(q)], capture_output=True, text=True)
        todo += [int(x) for x in r.stdout.split()]
    return out


def _kill_all(p) -> None:
    """Like losing the machine: the launcher and every worker it started, at once."""
    for q in _tree(p.pid):
        try:
            os.kill(q, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _finish(p, timeout: float = 150.0):
    try:
        return p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            _kill_all(p)
            p.communicate()


def _graphdist_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("graphdist:")]


def test_signal_stops_at_an_epoch_with_one_line_and_resumes(tmp_path):
    """End to end through train-gcn's launcher and workers, with a terminal's Ctrl-C (SIGTERM's
    checkpoint of the stopping epoch is the loop's, tested once for every trainer in
    tests/test_loop.py, and end to end by train-rec's signal test)."""
    sig, code = signal.SIGINT, 130
    ck = tmp_path / "ck"
    p = _start(TRAIN + ["--epochs", "1000000", "--checkpoint-dir", str(ck), "--checkpoint-every", "10"])
    _wait_for(ck / "latest", [p])
    os.killpg(p.pid, sig)  # as a terminal's Ctrl-C (SIGINT) or a scheduler's preemption (SIGTERM)
    _, err = _finish(p)
    assert p.returncode == code, err[-3000:]
    assert "Traceback" not in err and "frame #" not in err, err[-3000:]
    lines = _graphdist_lines(err)
    name = signal.Signals(sig).name
    assert len(lines) == 1 and lines[0].startswith(f"graphdist: interrupted: {name} after epoch "), err[-3000:]
    m = re.search(r"after epoch (\d+) of 1000000; latest checkpoint (\S+); continue with --resume", lines[0])
    assert m, lines[0]
    epoch, snap = int(m.group(1)), Path(m.group(2))
    assert snap.is_dir() and (ck / "latest").read_text().strip() == snap.name
    if sig == signal.SIGTERM:  # preemption: the stopping epoch itself is checkpointed
        assert snap.name == f"step_{epoch:08d}"
    done = int(snap.name.split("_")[1])
    # the resume on two ranks forked as torchrun's workers (the launcher's part ended above)
    [(rc, text)] = run_cli([[*TRAIN, "--epochs", str(done + 3), "--checkpoint-dir", str(ck), "--resume",
                             "--report", str(tmp_path / "r.json")]], 2)
    assert rc == 0, text[-3000:]
    assert len(json.loads((tmp_path / "r.json").read_text())["losses"]) == done + 3


def test_signal_during_a_rendezvous_heartbeat_leaves_no_traceback(tmp_path):
    """torch's launcher leaves its rendezvous open on a signal; if the keep-alive thread holds the
    handler when the launcher lets go of it, the thread's own timer finalizer used to fail
    ('cannot join current thread') and print a traceback as the process exited."""
    ROOT = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "tests.keepalive_entry", str(tmp_path / "beat")], cwd=ROOT,
                       capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert (tmp_path / "beat").exists()  # the signal came during a heartbeat
    assert r.returncode == 130, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr[-3000:]


def test_signal_while_workers_import_leaves_no_traceback(tmp_path):
    """A Ctrl-C that reaches the workers while they are still importing (before the job's body
    and its error policy start) ends them with graphdist's one line, not a KeyboardInterrupt
    traceback."""
    ROOT = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "tests.import_signal_entry", str(tmp_path / "importing")], cwd=ROOT,
                       capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert (tmp_path / "importing0").exists() and (tmp_path / "importing1").exists()
    assert r.returncode == 130, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "KeyboardInterrupt" not in r.stderr, r.stderr[-3000:]
    assert _graphdist_lines(r.stderr) == ["graphdist: interrupted (Ctrl-C)"], r.stderr[-3000:]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # ended, not yet reaped
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("launcher", ["--nproc", "torchrun"])
def test_a_worker_ends_with_its_killed_agent(tmp_path, launcher):
    """torch's launcher starts workers in sessions of their own; an agent killed outright (its
    node lost) must take them along within seconds, not leave them training."""
    ck = tmp_path / "ck"
    args = TRAIN + ["--epochs", "1000000", "--checkpoint-dir", str(ck), "--checkpoint-every", "10"]
    if launcher == "--nproc":
        agent = _start(args + ["--nproc", "2"])
    else:
        agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                  "--nproc-per-node", "2", "-m", "graphdist", *args], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"})
    workers = []
    try:
        _wait_for(ck / "latest", [agent])  # training is under way
        workers = _tree(agent.pid)[1:]
        assert len(workers) == 2, workers
        os.kill(agent.pid, signal.SIGKILL)  # the agent alone, as the kernel's OOM killer would
        agent.communicate(timeout=30)
        t0 = time.monotonic()
        while not all(_gone(w) for w in workers) and time.monotonic() - t0 < 10:
            time.sleep(0.1)
        assert all(_gone(w) for w in workers), f"workers {workers} outlived their agent by 10 s"
    finally:  # (before the fix, the workers outlived the test too)
        for w in [*_tree(agent.pid), *workers]:
            try:
                os.kill(w, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_killed_worker_is_restarted_and_the_job_ends_with_the_unbroken_result(tmp_path):
    """--max-restarts 1 --resume auto: a worker killed mid-run (as the out-of-memory killer
    would) makes the agent restart the group, which continues from the last checkpoint; the job
    exits 0 with the losses of a run that was never broken, and counts the restart."""
    run = ["train-gcn", "sbm:nodes=3000,classes=3,avg_degree=8,features=16,seed=0", "--parts", "2", "--method",
           "random", "--no-progress", "--timeout", "60", "--epochs", "120", "--nproc", "2"]
    whole = tmp_path / "whole.json"  # the unbroken run, on two ranks forked as torchrun's workers
    [(rc, text)] = run_cli([run + ["--report", str(whole)]], 2)
    assert rc == 0, text[-3000:]
    ck, rep = tmp_path / "ck", tmp_path / "r.json"
    agent = _start(run + ["--checkpoint-dir", str(ck), "--checkpoint-every", "10", "--resume", "auto",
                          "--max-restarts", "1", "--report", str(rep)])
    try:
        _wait_for(ck / "latest", [agent])
        os.kill(_tree(agent.pid)[-1], signal.SIGKILL)
        _, err = agent.communicate(timeout=300)
    finally:
        _kill_all(agent)
    assert agent.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert re.search(r"restart 1 of the worker group \(no rank said why: killed, out of memory, or its peers "
                     r"lost\); continuing from the latest checkpoint in ", err), err[-3000:]
    got, want = json.loads(rep.read_text()), json.loads(whole.read_text())
    assert got["run/restarts"] == 1 and want["run/restarts"] == 0
    assert got["losses"] == want["losses"] and got["test_acc"] == want["test_acc"]


def _node(port: int, ck: Path):
    return _start(TRAIN + ["--epochs", "1000000", "--nnodes", "2", "--nproc", "1", "--rdzv-endpoint",
                           f"127.0.0.1:{port}", "--rdzv-id", "lost-node", "--checkpoint-dir", str(ck),
                           "--checkpoint-every", "10"])


@pytest.mark.parametrize("lost", ["worker node", "store host"])
def test_lost_node_ends_with_one_line(tmp_path, lost):
    """Two nodes (two launchers on this machine); one is killed outright mid-training."""
    from graphdist.netif import free_port
    ck, port = tmp_path / "ck", free_port()
    host = _node(port, ck)
    _wait_for_port(port, host)  # the first launcher hosts the rendezvous store (a fixed sleep lost that race
    # on a loaded box: the second node hosted it, and killing it lost the store, not a worker)
    other = _node(port, ck)
    _wait_for(ck / "latest", [host, other])
    victim, survivor = (other, host) if lost == "worker node" else (host, other)
    _kill_all(victim)
    _finish(victim)
    _, err = _finish(survivor)
    assert survivor.returncode != 0
    assert "Traceback" not in err and "frame #" not in err, err[-3000:]
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("graphdist: error: "), err[-3000:]
    if lost == "worker node":
        assert "stopped responding" in lines[-1], lines[-1]
    else:  # the store's host is named, as the README says: by a worker, or by the launcher
        assert (re.search(r"the node hosting the job's store \((127\.0\.0\.1|localhost):\d+\) is gone", lines[-1])
                or f"lost the job's rendezvous at 127.0.0.1:{port} " in lines[-1]), lines[-1]


def test_with_nnodes_min_max_a_lost_node_leaves_a_job_that_continues_on_the_node_left(tmp_path):
    """--nnodes 1:2 --max-restarts 1 --resume auto: one of two nodes is lost for good (its launcher
    and worker killed) after a checkpoint. The agent left re-forms the group on one node, which
    takes the k = 1 artifact next to the k = 2 one, reshards the checkpoint onto it and finishes:
    the losses of a run that was never broken (k ranks compute what one process does)."""
    from graphdist.cli import main
    from graphdist.netif import free_port
    parts = {k: tmp_path / "parts" / f"k{k}" for k in (2, 1)}
    for k, d in parts.items():
        assert main(["partition", SPEC, "--parts", str(k), "--method", "random", "--out", str(d)]) == 0
    run = ["train-gcn", "--no-progress", "--timeout", "60", "--epochs", "100"]
    whole = tmp_path / "whole.json"
    assert main(run + ["--partition", str(parts[1]), "--report", str(whole)]) == 0
    ck, rep, port = tmp_path / "ck", tmp_path / "r.json", free_port()
    node = run + ["--partition", str(parts[2]), "--nnodes", "1:2", "--nproc", "1", "--rdzv-endpoint",
                  f"127.0.0.1:{port}", "--rdzv-id", "elastic", "--rdzv-last-call", "5", "--max-restarts", "1", "--resume", "auto",
                  "--checkpoint-dir", str(ck), "--checkpoint-every", "10"]
    host = _start(node + ["--report", str(rep)])
    _wait_for_port(port, host)  # the first launcher hosts the rendezvous store: the second node is the one lost
    other = _start(node)
    try:
        # a checkpoint of both nodes' group (if the second node came after the last call, the first
        # trained alone until the agent let it in: a membership change, not a restart)
        _wait_for_checkpoint(ck, 2, [host, other])
        _kill_all(other)
        _finish(other)
        _, err = _finish(host, timeout=300)
    finally:
        _kill_all(host)
        _kill_all(other)
    assert host.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "frame #" not in err, err[-3000:]
    assert f"the group has 1 rank, not the 2 that --partition {parts[2]} was cut for: training on {parts[1]}" in err, err[-3000:]
    got, want = json.loads(rep.read_text()), json.loads(whole.read_text())
    assert got["world_size"] == 1 and got["run/restarts"] == 1
    assert got["run/resharded_from"]["world_size"] == 2
    assert got["partition"]["source"] == str(parts[1])
    assert got["losses"] == pytest.approx(want["losses"], rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("argv, flag", [
    (TRAIN + ["--epochs", "2", "--report", "/proc/graphdist/r.json"], "--report /proc/graphdist/r.json"),
    (TRAIN + ["--epochs", "2", "--report", "{file}/r.json"], "--report {file}/r.json"),
    (TRAIN + ["--epochs", "2", "--checkpoint-dir", "/proc/graphdist-ck"], "--checkpoint-dir /proc/graphdist-ck"),
    (TRAIN + ["--epochs", "2", "--checkpoint-dir", "{file}/ck"], "--checkpoint-dir {file}/ck"),
    (["demo", "--out", "{file}/demo"], "--out {file}/demo"),
    (["partition", "sbm:nodes=400", "--parts", "2", "--out", "{file}/p"], "--out {file}/p"),
    (["partition", "sbm:nodes=400", "--parts", "2", "--out", "/proc/graphdist-p"], "--out /proc/graphdist-p"),
    (["compare", "sbm:nodes=400", "--parts", "2", "--json", "{file}/c.json"], "--json {file}/c.json"),
    (["compare", "sbm:nodes=400", "--parts", "2", "--plot", "/proc/graphdist/c.png"], "--plot /proc/graphdist/c.png"),
])
def test_unwritable_outputs_stop_before_any_work(tmp_path, argv, flag, capfd, restore_dist_env):
    """In this process (``graphdist``'s exit status is what ``main`` returns): nothing is started,
    the refusal comes first (the output of this process and of any worker it started, by file
    descriptor: the refusal's line, nothing else)."""
    from graphdist.cli import main
    f = tmp_path / "a_file"
    f.write_text("x")
    argv = [a.replace("{file}", str(f)) for a in argv]
    code = main(argv)
    out, err = capfd.readouterr()
    assert code == 2, err[-2000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"graphdist: error: {flag.replace('{file}', str(f))}: "), lines
    assert "cannot write there" in lines[0]
    assert out == ""  # refused up front, not after the work (whose summary comes first: the next test)


def test_report_write_failure_keeps_the_result(tmp_path, capsys, monkeypatch):
    """The disk fills up after training: the summary is printed first, then one line."""
    import errno

    from graphdist import fileio
    from graphdist.errors import ConfigError
    from graphdist.gnn import GCNConfig, run

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fileio, "atomic_write_json", full)
    with pytest.raises(ConfigError, match="could not write the report .No space left on device.; the summary above"):
        run(GCNConfig(spec=SPEC, epochs=2, progress=False, report=str(tmp_path / "r.json")))
    assert "test_acc" in capsys.readouterr().out


def test_run_returns_the_report_in_process_and_from_launched_workers(tmp_path):
    """A notebook user gets the report back, whether the job ran here or on --nproc workers."""
    from graphdist.errors import JobFailed
    from graphdist.gnn import GCNConfig, run
    from graphdist.proc import HANDLED_SIGNALS
    handlers = {s: signal.getsignal(s) for s in HANDLED_SIGNALS}
    here = run(GCNConfig(spec=SPEC, epochs=2, progress=False))
    assert here["world_size"] == 1 and len(here["losses"]) == 2 and 0.0 <= here["test_acc"] <= 1.0
    there = run(GCNConfig(spec=SPEC, parts=2, nproc=2, epochs=2, progress=False, method="random"))
    assert there["world_size"] == 2 and len(there["losses"]) == 2
    assert there["comm/halo_bytes_per_epoch"] > 0
    with pytest.raises(JobFailed) as e:  # the workers printed their one line; the caller gets the code
        run(GCNConfig(spec="sbm:nodes=40,classes=2,avg_degree=3,features=2,train=0.001,val=0.1", parts=2, nproc=2,
                      epochs=2, progress=False, method="random"))  # no training node: a user error in the workers
    assert e.value.exit_code == 2
    # torch's agent took over SIGINT/SIGTERM/SIGHUP/SIGQUIT while it ran; the caller's are back
    assert {s: signal.getsignal(s) for s in HANDLED_SIGNALS} == handlers
