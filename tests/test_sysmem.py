"""The memory a job may take: the machine's, its memory cgroup's, its own process limits
(partitioners.sysmem), and the checks that stop a job that would not fit within them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from partitioners.sysmem import cgroup_headroom, cgroup_limit, process_headroom, smallest

ROOT = Path(__file__).resolve().parents[1]
MiB = 2 ** 20


def _group(d: Path, files: dict[str, str]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)


def test_cgroup_v1_takes_the_tightest_group_on_the_way_up(tmp_path):
    mount = tmp_path / "sys"
    leaf = mount / "memory" / "job" / "step"
    unlimited = str(9223372036854771712)
    _group(mount / "memory", {"memory.limit_in_bytes": unlimited, "memory.usage_in_bytes": str(5000 * MiB)})
    _group(mount / "memory" / "job", {"memory.limit_in_bytes": str(3000 * MiB),
                                      "memory.usage_in_bytes": str(1000 * MiB),
                                      "memory.stat": f"cache 9\ntotal_inactive_file {200 * MiB}\n"})
    _group(leaf, {"memory.limit_in_bytes": unlimited, "memory.usage_in_bytes": str(700 * MiB)})
    cg = tmp_path / "cgroup"
    cg.write_text("4:memory:/job/step\n3:cpu:/\n")
    # the job's group: 3000 - 1000 + 200 reclaimable cache
    assert cgroup_headroom(str(cg), str(mount)) == 2200 * MiB
    assert cgroup_limit(str(cg), str(mount)) == 3000 * MiB
    _group(leaf, {"memory.limit_in_bytes": str(1500 * MiB)})  # now the step's own limit is tighter
    assert cgroup_headroom(str(cg), str(mount)) == 800 * MiB
    assert cgroup_limit(str(cg), str(mount)) == 1500 * MiB


def test_cgroup_v2_reads_memory_max_and_a_container_root(tmp_path):
    mount = tmp_path / "sys"
    _group(mount, {"cgroup.controllers": "cpu memory\n", "memory.max": "max\n", "memory.current": "1\n"})
    _group(mount / "pod", {"memory.max": str(4096 * MiB), "memory.current": str(1024 * MiB),
                           "memory.stat": f"anon 1\ninactive_file {24 * MiB}\n"})
    cg = tmp_path / "cgroup"
    cg.write_text("0::/pod\n")
    assert cgroup_headroom(str(cg), str(mount)) == (4096 - 1024 + 24) * MiB
    # inside a container its own group is the mount's root and the listed path is not below it
    cg.write_text("0::/kubepods/pod-7/c1\n")
    _group(mount, {"memory.max": str(2048 * MiB), "memory.current": str(512 * MiB)})
    assert cgroup_headroom(str(cg), str(mount)) == 1536 * MiB
    # no limit anywhere, or nothing readable: not known
    assert cgroup_limit(str(cg), str(mount)) == 2048 * MiB
    _group(mount, {"memory.max": "max\n"})
    assert cgroup_headroom(str(cg), str(mount)) is None and cgroup_limit(str(cg), str(mount)) is None
    assert cgroup_headroom(str(tmp_path / "absent"), str(mount)) is None
    assert smallest(None, 5, 3) == 3 and smallest(None, None) is None


_LIMITED = """
import json, resource, sys
from partitioners.sysmem import process_headroom, proc_status_bytes
from graphdist.memory import process_ceiling
unlimited = process_headroom()
vm = proc_status_bytes("VmData", "VmRSS")
limit = vm["VmData"] + int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.RLIM_INFINITY))
room, ceiling = process_headroom(), process_ceiling()
vm2 = proc_status_bytes("VmData", "VmRSS")
print(json.dumps({"unlimited": unlimited, "room": room, "ceiling": ceiling, "limit": limit, **vm2}))
"""


def test_the_process_limit_is_read_as_room_to_grow():
    """``ulimit -d``: the room is the limit less the data already mapped, and the resident size the
    process may reach is its resident set plus that room."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _LIMITED, str(300 * MiB)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    import resource
    if resource.getrlimit(resource.RLIMIT_DATA)[0] == resource.RLIM_INFINITY and \
            resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
        assert d["unlimited"] is None
    assert d["room"] == d["limit"] - d["VmData"]
    assert abs(d["room"] - 300 * MiB) < 16 * MiB  # a few pages moved between the two readings
    assert abs(d["ceiling"] - (d["VmRSS"] + d["room"])) < 16 * MiB


def test_train_rec_stops_with_one_line_when_a_rank_exceeds_its_process_limit(tmp_path):
    """A per-process limit (``ulimit -d``, as a cap standing in for one device's memory) that the
    machine's free memory would not reveal: train-rec stops before the first step, naming it."""
    import resource

    cap = 1536 * MiB

    def limit():
        resource.setrlimit(resource.RLIMIT_DATA, (cap, resource.RLIM_INFINITY))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "graphdist", "train-rec", "rec-synth:users=200,items=100,avg_items=10,seed=0",
            "--epochs", "1", "--no-progress"]
    # batch 250,000 x 64 dims: the step's rows alone are estimated at about 1.8 GiB per rank
    out = subprocess.run(args + ["--batch-size", "250000"], capture_output=True, text=True, env=env, timeout=300,
                         preexec_fn=limit, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "GiB per rank but a rank may hold only" in err[0] and "ulimit -d" in err[0], err[0]
    # the same limit holds the default batch
    ok = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300, preexec_fn=limit, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]


def test_more_local_workers_than_the_host_can_start_are_refused_before_any_starts(monkeypatch, capsys, tmp_path):
    """--parts 400 without --nproc asks for 400 local workers; each holds PROCESS_BYTES before any
    data, so a host without 400 times that available refuses in one line with the numbers, before
    the launcher starts anything (it used to start them all and run out of memory)."""
    import partitioners.sysmem
    from graphdist.cli import main
    from graphdist.memory import PROCESS_BYTES
    monkeypatch.setattr(partitioners.sysmem, "mem_available", lambda: 3 * PROCESS_BYTES)
    report = tmp_path / "r.json"
    assert main(["train-gcn", "sbm:nodes=300", "--parts", "4", "--epochs", "1", "--report", str(report)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["graphdist: error: 4 local workers need 1.3 GiB before any data (4 x 340.0 MiB: Python, torch and "
                   "graphdist in each), but this host has 1020.0 MiB available: start fewer per node (--nproc, or "
                   "--parts without it), or spread them over nodes (--nnodes)"], err
    assert not report.exists()
