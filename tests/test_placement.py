"""One definition of a host (graphdist/hosts.py): a network stack on one machine (boot id and
network namespace), hosts of one boot id a machine; agreed by all ranks and read by the route
across hosts, thread sharing, the memory checks, the DLRM layout and ``plan --hosts``, and in
every report (``run/hosts``, ``run/host_of_rank``, ``run/machines``). Two hosts of one machine
on the network-namespace test bed: ``tests/test_hosts.py``."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from graphdist.hosts import Placement, identity

REPO = Path(__file__).resolve().parents[1]


def test_placement_from_the_ranks_identities():
    a, b = ["boot-a", "net:[1]"], ["boot-b", "net:[1]"]
    p = Placement.from_identities([a, a, ["boot-a", "net:[2]"], b, a])
    assert p.host_of_rank == (0, 0, 1, 2, 0) and p.machine_of_host == (0, 0, 1)
    assert (p.hosts, p.machines) == (3, 2)
    assert p.ranks_on_host(0) == [0, 1, 4]
    assert [p.ranks_on_machine_of(r) for r in range(5)] == [4, 4, 4, 1, 4]  # two hosts of machine a
    assert p.ranks_per_host is None  # unequal, and rank 4 is not beside its host's others
    assert p.report() == {"run/hosts": 3, "run/host_of_rank": [0, 0, 1, 2, 0], "run/machines": 2}
    q = Placement.host_major(8, 2)
    assert q.host_of_rank == (0, 0, 0, 0, 1, 1, 1, 1) and q.ranks_per_host == 4 and q.machines == 2
    assert Placement.from_identities([a, a, b, b]).ranks_per_host == 2


def test_identity_is_the_machine_and_its_network_namespace():
    me = identity()
    assert me == identity() and me[0] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a second network namespace needs root and unshare")
    code = "from graphdist.hosts import identity; import json; print(json.dumps(identity()))"
    other = subprocess.run(["unshare", "--net", sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert other.returncode == 0, other.stderr
    there = json.loads(other.stdout)
    assert there[0] == me[0] and there[1] != me[1]  # the same machine, another host


def test_plan_hosts_gives_a_rank_its_hosts_share_of_the_machine(capsys):
    """plan --hosts H: a rank's memory is its machine's over the K/H ranks of its host (before: over
    all K ranks, as if every host were this machine); without --hosts, one rank per host."""
    from graphdist.cli import main
    from graphdist.memory import host_memory_bytes
    stats = ["--nodes", "4000", "--edges", "20000", "--features", "16", "--classes", "4", "--replication", "1.3",
             "--parts", "4", "--json"]
    for hosts, share in ((["--hosts", "2"], 2), (["--hosts", "1"], 4), (["--hosts", "4"], 1), ([], 1)):
        assert main(["plan", *stats, *hosts]) == 0
        got = json.loads(capsys.readouterr().out)
        assert got["mem/per_rank_bytes"] == int(host_memory_bytes() / share), (hosts, got["mem/per_rank_bytes"])


def test_a_job_under_a_launcher_without_torchruns_placement_sees_one_host(tmp_path):
    """Two ranks started as a launcher that sets only RANK / WORLD_SIZE / MASTER_* starts them
    (no GROUP_RANK or LOCAL_WORLD_SIZE, as srun or mpirun): both are on this one host, so no
    halo byte crosses between hosts (before: each rank its own host, every byte counted across)."""
    from graphdist.netif import free_port
    port = free_port()  # (rank 0 hosts the store there, as torch's env:// does)
    env = {k: v for k, v in os.environ.items() if k not in ("GROUP_RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK",
                                                              "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE")}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    argv = [sys.executable, "-m", "graphdist", "train-gcn", "sbm:nodes=300,classes=3,features=8,seed=1",
            "--parts", "2", "--method", "random", "--epochs", "2", "--no-progress", "--timeout", "60",
            "--report", str(tmp_path / "r.json")]
    procs = [subprocess.Popen(argv, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    rep = json.loads((tmp_path / "r.json").read_text())
    assert (rep["run/hosts"], rep["run/host_of_rank"], rep["run/machines"]) == (1, [0, 0], 1)
    assert rep["comm/halo_bytes_between_hosts_per_epoch"] == 0 and rep["comm/halo_bytes_per_epoch"] > 0
