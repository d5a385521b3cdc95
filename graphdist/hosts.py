"""What a host is: one definition for the whole job.

A **host** is one network stack on one machine: the ranks whose processes share a kernel (its
boot id, ``/proc/sys/kernel/random/boot_id``) and a network namespace (``/proc/self/ns/net``).
Ranks of one host reach each other without a link (loopback, shared memory); between two hosts
every byte crosses one. Hosts with the same boot id are one **machine**: network namespaces or
containers of one machine (the test bed's hosts, :mod:`graphdist.testbed`) share its cores and its
memory.

It is read from the processes themselves, not from a launcher's environment (torchrun's
``GROUP_RANK`` / ``LOCAL_WORLD_SIZE``, which other launchers set differently or not at all), and
agreed by all ranks once, as the process group forms (:mod:`graphdist.procgroup`):
:func:`placement`. Every part of graphdist that asks "which ranks share a host" reads it: the
route across hosts (``--halo-route hosts``), each rank's share of its machine's cores
(:func:`share_threads`), the memory checks before a run (a machine's memory is shared by its
ranks), the DLRM layout (ranks per host), and ``graphdist plan --hosts H``, which models a job
of H hosts with the same :class:`Placement` (:meth:`Placement.host_major`). The report has it as
``run/hosts`` and ``run/host_of_rank``.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

__all__ = ["Placement", "identity", "placement", "set_placement", "share_threads"]


@dataclass(frozen=True)
class Placement:
    """Where the job's ranks run: hosts numbered in the order of their lowest rank."""

    host_of_rank: tuple[int, ...]
    """the host of each rank"""
    machine_of_host: tuple[int, ...]
    """the machine of each host (hosts of one machine share its cores and memory)"""

    @classmethod
    def from_identities(cls, ids: list) -> "Placement":
        """From every rank's :func:`identity`, in rank order."""
        hosts: dict[tuple, int] = {}
        machines: dict[str, int] = {}
        of_rank, of_host = [], []
        for boot, net in (tuple(i) for i in ids):
            if (boot, net) not in hosts:
                hosts[(boot, net)] = len(hosts)
                of_host.append(machines.setdefault(boot, len(machines)))
            of_rank.append(hosts[(boot, net)])
        return cls(tuple(of_rank), tuple(of_host))

    @classmethod
    def host_major(cls, ranks: int, hosts: int) -> "Placement":
        """``ranks`` on ``hosts`` hosts (which must divide it), host-major as torchrun numbers them
        (rank r on host r // (ranks / hosts)), each host a machine of its own: the job ``graphdist
        plan --hosts H`` models."""
        per = ranks // hosts
        return cls(tuple(r // per for r in range(ranks)), tuple(range(hosts)))

    @property
    def world(self) -> int:
        return len(self.host_of_rank)

    @property
    def hosts(self) -> int:
        return len(self.machine_of_host)

    @property
    def machines(self) -> int:
        return len(set(self.machine_of_host))

    def ranks_on_host(self, host: int) -> list[int]:
        return [r for r, h in enumerate(self.host_of_rank) if h == host]

    def ranks_on_machine_of(self, rank: int) -> int:
        """How many of the job's ranks share ``rank``'s machine (its cores, its memory)."""
        m = self.machine_of_host[self.host_of_rank[rank]]
        return sum(self.machine_of_host[h] == m for h in self.host_of_rank)

    @property
    def ranks_per_host(self) -> int | None:
        """L when every host runs L ranks numbered consecutively (host-major, as torchrun and
        ``--nproc`` number them); None otherwise."""
        per = self.world // self.hosts
        if per * self.hosts != self.world:
            return None
        return per if all(h == r // per for r, h in enumerate(self.host_of_rank)) else None

    def report(self) -> dict:
        """The report's keys: ``run/hosts`` (how many), ``run/host_of_rank`` (each rank's host) and
        ``run/machines`` (the machines those hosts are on)."""
        return {"run/hosts": self.hosts, "run/host_of_rank": list(self.host_of_rank), "run/machines": self.machines}


_ALONE = Placement((0,), (0,))
_AGREED: list = [None, None]  # [Placement, a weak reference to the process group it was agreed in]


def identity() -> list[str]:
    """This process's host: ``[kernel boot id, network namespace]`` (Linux); elsewhere
    ``[hostname, ""]``. Equal for two processes exactly when they are on one host."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return [socket.gethostname(), ""]
    try:
        net = os.readlink("/proc/self/ns/net")
    except OSError:
        net = ""
    return [boot, net]


def set_placement(p: Placement, group=None) -> None:
    """Record the placement every rank agreed on (:mod:`graphdist.procgroup` does, as the group
    forms); ``group`` is the process group it belongs to (held weakly: a group must be free to go
    with :func:`graphdist.procgroup.shutdown`)."""
    import weakref
    _AGREED[0], _AGREED[1] = p, (weakref.ref(group) if group is not None else None)


def agreed_for(group) -> bool:
    """Whether a placement was agreed in ``group`` already."""
    return _AGREED[0] is not None and _AGREED[1] is not None and _AGREED[1]() is group


def placement() -> Placement:
    """The job's placement, as agreed when its process group formed (:mod:`graphdist.procgroup`);
    in a group the caller made, agreed the first time it is asked (then a collective: every rank
    asks at the same point). One rank on one host without a process group."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return _AGREED[0] if _AGREED[0] is not None and _AGREED[0].world == 1 else _ALONE
    if not agreed_for(dist.group.WORLD):
        from graphdist import comm
        set_placement(Placement.from_identities(comm.all_gather_json(identity())), dist.group.WORLD)
    return _AGREED[0]


def share_threads(sharing: int, on_host: int = 1) -> tuple[int, str]:
    """Give this rank its share of the machine's cores: the cores this process may run on over
    ``sharing``, the job's ranks on this machine (torch's launcher only sets one thread per rank
    with several local ranks, and knows nothing of other hosts on the same machine).
    ``OMP_NUM_THREADS`` set by the user (or torchrun) wins. Logged on rank 0 when ranks of other
    hosts share this machine (``on_host``: the ranks of this rank's host); always in the report
    (``run/threads``). Returns (threads, why)."""
    import torch

    from graphdist.log import get_logger
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if os.environ.get("OMP_NUM_THREADS"):
        n, why = torch.get_num_threads(), f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    else:
        n = max(1, cores // sharing)
        torch.set_num_threads(n)
        why = f"{cores} cores shared by {sharing} rank(s) on this machine"
    if sharing > on_host:
        get_logger().info("threads per rank: %d (%s)", n, why)
    return n, why
