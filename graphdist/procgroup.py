"""The job's process group: made from the launcher's environment, agreed on, and taken down.

Every entry point (``graphdist train-gcn``, ``train-rec``, ``train-dlrm``, a user's PyG script,
tests) starts distributed work through :func:`init_distributed` (a trainer through
:func:`start_rank`). It reads ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_ADDR`` /
``MASTER_PORT`` as ``torchrun`` (or graphdist's ``--nproc``) sets them, picks ``nccl`` when CUDA
is available and ``gloo`` otherwise, opens the job's store, agrees with the other ranks on the
round of the worker group (:mod:`graphdist.restarts`), forms the group under that round's keys,
and agrees on the ranks' hosts (:mod:`graphdist.hosts`: which share a machine's cores). A worker
that is done calls :func:`shutdown`.
"""
from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass

import torch

from graphdist import comm, hosts, restarts
from graphdist.errors import ConfigError, DistributedError
from graphdist.proc import env_world

__all__ = ["DistContext", "pick_backend", "env_world", "init_distributed", "start_rank", "shutdown"]


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the job."""

    rank: int
    """Global rank, 0..world_size-1."""
    world_size: int
    """Number of processes in the job."""
    local_rank: int
    """Rank on this node (selects the GPU)."""
    backend: str
    """``nccl`` or ``gloo``."""
    device: torch.device
    """The device this rank computes on."""

    @property
    def is_rank0(self) -> bool:
        return self.rank == 0


def pick_backend(device: str = "auto") -> tuple[str, str]:
    """Map a ``--device`` choice to ``(backend, device type)``; CUDA without GPUs is an error."""
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was requested but no CUDA GPU is available (torch.cuda.is_available() is False)")
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        return "nccl", "cuda"
    return "gloo", "cpu"


def _device(dev_type: str, local: int) -> torch.device:
    if dev_type != "cuda":
        return torch.device("cpu")
    if local >= torch.cuda.device_count():
        raise ConfigError(f"LOCAL_RANK {local} but only {torch.cuda.device_count()} GPUs are visible")
    torch.cuda.set_device(local)
    return torch.device("cuda", local)


def init_distributed(device: str = "auto", timeout_s: float = 300.0) -> DistContext:
    """Initialise (or reuse) the default process group from the environment.

    A single process without ``MASTER_ADDR`` gets a private group on an in-memory store, so the
    same code path runs at world size 1. ``timeout_s`` bounds every collective and the start: a
    dead peer makes the others fail with an error instead of hanging forever. A group the caller
    made already is reused; the ranks' hosts are agreed in it once.
    """
    import torch.distributed as dist

    from graphdist.proc import end_with_parent, started_by_an_agent
    if started_by_an_agent():  # a user's own script under torchrun, too, ends with its agent
        end_with_parent()
    backend, dev_type = pick_backend(device)
    rank, world, local = env_world()
    dev = _device(dev_type, local)
    if not dist.is_initialized():
        timeout = datetime.timedelta(seconds=timeout_s)
        store = _job_store(rank, world, timeout)
        n = restarts.agree_round(store, rank, world, timeout_s)
        if world > 1:
            from graphdist.netif import pick_worker_interface
            pick_worker_interface(rank)
        try:
            dist.init_process_group(backend=backend, rank=rank, world_size=world, timeout=timeout,
                                    store=dist.PrefixStore(f"graphdist/round{n}", store))
        except Exception as e:  # noqa: BLE001 - rendezvous failures are user-facing
            raise DistributedError(f"rank {rank}: could not join the process group of {world} "
                                   f"({backend}): {e}") from e
        _agree_on_start(store, n, share_cores=dev_type == "cpu")
    else:
        backend = dist.get_backend()
        rank, world = dist.get_rank(), dist.get_world_size()
        if not hosts.agreed_for(dist.group.WORLD):
            _agree_on_start(None, 0, share_cores=False)
    return DistContext(rank, world, local, backend, dev)


def _job_store(rank: int, world: int, timeout: datetime.timedelta):
    """The store this round of the job meets at. One process without ``MASTER_ADDR``: an
    in-memory store (no TCP port to take: two jobs started at once cannot race for one). Under
    torch's agent with its shared store (``TORCHELASTIC_USE_AGENT_STORE=True``): a client of the
    agent's store, which outlives a restarted round (:mod:`graphdist.restarts`). Otherwise rank 0
    hosts it at ``MASTER_ADDR:MASTER_PORT``, as torch's ``env://`` does."""
    import torch.distributed as dist
    if world == 1 and "MASTER_ADDR" not in os.environ:
        return dist.HashStore()
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        raise DistributedError(f"rank {rank}: a job of {world} ranks needs MASTER_ADDR and MASTER_PORT (set by "
                               "torchrun or graphdist's --nproc)")
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    try:
        return dist.TCPStore(addr, int(port), world, is_master=rank == 0 and not agent, timeout=timeout,
                             multi_tenant=True)
    except Exception as e:  # noqa: BLE001 - rendezvous failures are user-facing
        raise DistributedError(f"rank {rank}: could not reach the job's store at {addr}:{port}: {e}") from e


def _agree_on_start(store, round_: int, share_cores: bool) -> None:
    """One small collective as the group forms: every rank's host (:mod:`graphdist.hosts`: also
    which ranks share a machine's cores) and its node's count of restarts (each node's agent
    counts only the restarts its own workers caused: the most any node counted is the group's)."""
    import torch.distributed as dist
    seen = comm.all_gather_json([hosts.identity(), restarts.restart_count()])
    place = hosts.Placement.from_identities([s[0] for s in seen])
    hosts.set_placement(place, dist.group.WORLD)
    restarts.set_current(store, round_, max(int(s[1]) for s in seen))
    if share_cores and place.world > 1:
        r = dist.get_rank()
        hosts.share_threads(place.ranks_on_machine_of(r), len(place.ranks_on_host(place.host_of_rank[r])))


def shutdown() -> list[str]:
    """Destroy every process group of this process now, while the interpreter is whole, and join
    their threads (:func:`graphdist.torch_internals.release_process_groups` says why that takes
    more than ``destroy_process_group``); return the names of those still alive afterwards
    (none, unless something new holds one). tqdm's monitor thread goes too."""
    from graphdist.torch_internals import release_process_groups
    _stop_tqdm_monitor()
    return release_process_groups()


def _stop_tqdm_monitor() -> None:
    """tqdm starts a monitor thread with its first bar (even a disabled one) and stops it only
    when its last enabled bar closes; stop it with the job (a new bar starts another)."""
    tq = sys.modules.get("tqdm.std")
    mon = getattr(getattr(tq, "tqdm", None), "monitor", None)
    if mon is not None:
        mon.exit()
        tq.tqdm.monitor = None


def start_rank(cfg) -> DistContext:
    """What a trainer does first on its rank (``train-gcn``, ``train-rec``): check ``cfg``, and its
    outputs on global rank 0 when a launcher other than graphdist's started the workers (under
    torchrun nobody checked before); under ``cfg.malloc_mmap_mb`` (CPU) give every larger tensor
    its own mapping; create the process group on ``cfg.device`` with ``cfg.timeout_s``."""
    from graphdist.memory import set_mmap_threshold
    cfg.validate()
    if env_world()[0] == 0:
        cfg.check_outputs()
    if cfg.malloc_mmap_mb > 0 and cfg.device != "cuda":
        set_mmap_threshold(cfg.malloc_mmap_mb)
    return init_distributed(cfg.device, cfg.timeout_s)
