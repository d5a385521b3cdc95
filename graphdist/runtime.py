"""Process-group init from torchrun's environment, rank-0 logging, timers.

Every entry point (``graphdist train-gcn``, ``train-dlrm``, tests) starts distributed work through
:func:`init_distributed`; it reads ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``/
``MASTER_PORT`` as set by ``torchrun`` (or ``torch.distributed.run``), picks ``nccl`` when CUDA
is available and ``gloo`` otherwise, and returns a small :class:`DistContext`.
"""
from __future__ import annotations

import contextlib
import datetime
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass

import torch

from graphdist.errors import ConfigError, DistributedError


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


def env_world() -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from the launcher's environment (1 process if unset)."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", 0))))


def init_distributed(device: str = "auto", timeout_s: float = 300.0) -> DistContext:
    """Initialise (or reuse) the default process group from the environment.

    A single process without ``MASTER_ADDR`` gets a private group on an in-memory store, so the
    same code path runs at world size 1. ``timeout_s`` bounds every collective: a dead peer makes the
    others fail with an error instead of hanging forever.
    """
    import torch.distributed as dist

    from graphdist.proc import end_with_parent, started_by_an_agent
    if started_by_an_agent():  # a user's own script under torchrun, too, ends with its agent
        end_with_parent()
    backend, dev_type = pick_backend(device)
    rank, world, local = env_world()
    if dev_type == "cuda":
        if local >= torch.cuda.device_count():
            raise ConfigError(f"LOCAL_RANK {local} but only {torch.cuda.device_count()} GPUs are visible")
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    if not dist.is_initialized():
        global _JOB_STORE
        timeout = datetime.timedelta(seconds=timeout_s)
        if world == 1 and "MASTER_ADDR" not in os.environ:
            # a single process without a launcher meets nobody: an in-memory store, no TCP port to
            # take (two jobs started at once cannot race for one)
            store = {"store": dist.HashStore()}
        elif os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            # the agent's store outlives a worker group that it restarts (--max-restarts), and with
            # it the keys of the failed group: a restarted rank would read a dead peer's address
            # and fail to connect. Each round of the group keys its process group apart.
            try:
                _JOB_STORE = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                                           is_master=False, timeout=timeout)
            except Exception as e:  # noqa: BLE001 - rendezvous failures are user-facing
                raise DistributedError(f"rank {rank}: could not reach the job's store at {os.environ['MASTER_ADDR']}:"
                                       f"{os.environ['MASTER_PORT']}: {e}") from e
            store = {"store": dist.PrefixStore(f"graphdist/round{restart_round()}", _JOB_STORE)}
        else:
            store = {}
        if world > 1:
            _pick_interface(rank)
        try:
            dist.init_process_group(backend=backend, rank=rank, world_size=world, timeout=timeout, **store)
        except Exception as e:  # noqa: BLE001 - rendezvous failures are user-facing
            raise DistributedError(f"rank {rank}: could not join the process group of {world} "
                                   f"({backend}): {e}") from e
        if world > 1:
            _agree_on_start(share_cores=dev_type == "cpu")
    else:
        backend = dist.get_backend()
        rank, world = dist.get_rank(), dist.get_world_size()
    return DistContext(rank, world, local, backend, dev)


_JOB_STORE = None


def _pick_interface(rank: int) -> None:
    """gloo (and NCCL's bootstrap) listen on the address this node's hostname resolves to, which
    on many clusters is 127.0.0.1: the other nodes cannot reach it. Unless the user named one,
    take the interface that routes to the job's store (``MASTER_ADDR``)."""
    import ipaddress

    from graphdist.netif import choose_ifname
    master = os.environ.get("MASTER_ADDR")
    if not master or ("GLOO_SOCKET_IFNAME" in os.environ and "NCCL_SOCKET_IFNAME" in os.environ):
        return
    try:
        ip = socket.getaddrinfo(master, None, socket.AF_INET)[0][4][0]
    except (socket.gaierror, UnicodeError):
        raise DistributedError(f"rank {rank}: the job's store host MASTER_ADDR={master!r} does not resolve on "
                               f"this node ({socket.gethostname()})") from None
    if ipaddress.ip_address(ip).is_loopback:
        return  # the store is on this machine: its ranks meet over loopback (a rehearsal of nodes)
    name = choose_ifname(ip)
    if name:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", name)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", name)


def _machine_id() -> str:
    """The same string for every process of one machine (its kernel's boot id: network namespaces
    and containers of one machine share it and its cores), another on another machine."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


_GROUP_RESTARTS: int | None = None


def _agree_on_start(share_cores: bool) -> None:
    """One small collective as the group forms: which ranks share a machine (for their threads)
    and how often the group has been restarted (each node's agent counts only the restarts its
    own workers caused: the most any node counted is the group's)."""
    global _GROUP_RESTARTS
    from graphdist import comm
    seen = comm.all_gather_object((_machine_id(), restart_round()))
    _GROUP_RESTARTS = max(c for _, c in seen)
    if share_cores:
        mine = seen[torch.distributed.get_rank()][0]
        share_threads(sum(m == mine for m, _ in seen))


def group_restarts() -> int:
    """How many times this job's worker group has been restarted (``--max-restarts``): agreed by
    all ranks as the group formed (on one node, that node's agent's count)."""
    return restart_round() if _GROUP_RESTARTS is None else _GROUP_RESTARTS


def share_threads(sharing: int) -> tuple[int, str]:
    """Give this rank its share of the machine's cores: the cores this process may run on over
    ``sharing``, the job's ranks on this machine (torch's launcher only sets one thread per rank
    with several local ranks, and knows nothing of other nodes on the same machine: network
    namespaces or containers of one machine share its cores and its kernel's boot id).
    ``OMP_NUM_THREADS`` set by the user (or torchrun) wins. Logged on rank 0 when ranks of other
    nodes share this machine (otherwise it is one launcher's usual split); always in the report
    (``run/threads``). Returns (threads, why)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if os.environ.get("OMP_NUM_THREADS"):
        n, why = torch.get_num_threads(), f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    else:
        n = max(1, cores // sharing)
        torch.set_num_threads(n)
        why = f"{cores} cores shared by {sharing} rank(s) on this machine"
    if sharing > int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1):  # other nodes' ranks share these cores
        get_logger().info("threads per rank: %d (%s)", n, why)
    return n, why


def restart_round() -> int:
    """How many times torch's agent has restarted this worker group (``--max-restarts``): 0 on
    the first start."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def job_store():
    """The store every rank of the job shares, for what must outlive one round of a worker group
    that torch's agent restarts (a failed rank's last words): the agent's, under an agent; else
    the default process group's."""
    if _JOB_STORE is not None:
        return _JOB_STORE
    from torch.distributed.distributed_c10d import _get_default_store
    return _get_default_store()


def shutdown() -> list[str]:
    """Destroy every process group of this process now, while the interpreter is whole; return
    the names of those still alive afterwards (none, unless something new holds one).

    A gloo group runs two worker threads and a transport thread, joined only when its C++
    object is freed. ``destroy_process_group`` drops torch's registry entries, but the object
    lives on while anything references it, and some torch modules bind the default group into
    function defaults when they are imported after it exists (``torch.distributed.nn.functional``,
    imported by torch.distributed.checkpoint; ``torch.distributed.optim``, by torchrec). Such a
    group was then freed only during interpreter finalisation, and a worker thread still
    releasing a finished collective's tensors there needs the GIL: Python ends that thread with
    ``pthread_exit``, whose unwinding through a ``noexcept`` destructor calls ``std::terminate``
    ("terminate called without an active exception", SIGABRT) and fails a finished job. So the
    destroyed groups are taken out of those defaults (``None``: the default group, as the
    functions mean it), cycles are collected, and the groups' threads are joined here."""
    import gc

    import torch.distributed as dist
    _stop_tqdm_monitor()
    if not (dist.is_available() and dist.is_initialized()):
        return []
    groups = _group_refs()
    dist.destroy_process_group()
    if any(r() is not None for r in groups.values()):
        _drop_bound_groups([r() for r in groups.values()])
        if any(r() is not None for r in groups.values()):
            gc.collect()  # a group held in a reference cycle (torchrec's sharded modules)
    return [n for n, r in groups.items() if r() is not None]


def _group_refs() -> dict:
    """Weak references to every process group of this process and to its backends (which
    torchrec's modules hold), by name."""
    import weakref
    from torch.distributed import distributed_c10d as c10d
    world, refs = c10d._world, {}
    for i, g in enumerate(world.pg_map):
        name = str(world.pg_names.get(g, i))
        refs[name] = weakref.ref(g)
        for t in getattr(g, "_device_types", []):
            refs[f"{name}/{t}"] = weakref.ref(g._get_backend(torch.device(t)))
    return refs


def _stop_tqdm_monitor() -> None:
    """tqdm starts a monitor thread with its first bar (even a disabled one) and stops it only
    when its last enabled bar closes; stop it with the job (a new bar starts another)."""
    tq = sys.modules.get("tqdm.std")
    mon = getattr(getattr(tq, "tqdm", None), "monitor", None)
    if mon is not None:
        mon.exit()
        tq.tqdm.monitor = None


_GROUP_USERS = ("torch.distributed", "torchrec", "fbgemm_gpu")
"""Packages whose functions may hold a process group in their defaults (module level or in a
class), scanned by :func:`_drop_bound_groups`."""


def _drop_bound_groups(groups: list) -> None:
    """Replace ``groups`` by ``None`` in the defaults of the functions of :data:`_GROUP_USERS`
    (module-level and class-level) that hold one."""
    import types
    ids = {id(g) for g in groups if g is not None}

    def fix(f):
        if type(f) in (staticmethod, classmethod):
            f = f.__func__
        if type(f) is not types.FunctionType:
            return
        d = f.__defaults__
        if d and any(id(v) in ids for v in d):
            f.__defaults__ = tuple(None if id(v) in ids else v for v in d)
        kw = f.__kwdefaults__
        if kw and any(id(v) in ids for v in kw.values()):
            f.__kwdefaults__ = {k: (None if id(v) in ids else v) for k, v in kw.items()}

    for name, mod in list(sys.modules.items()):
        if mod is None or not any(name == p or name.startswith(p + ".") for p in _GROUP_USERS):
            continue
        for v in list(getattr(mod, "__dict__", {}).values()):
            fix(v)
            if issubclass(type(v), type) and getattr(v, "__module__", None) == name:
                for w in list(vars(v).values()):
                    fix(w)


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Rank0Filter(logging.Filter):
    def filter(self, record):  # other ranks only say warnings and errors
        return env_world()[0] == 0 or record.levelno >= logging.WARNING


def get_logger(name: str = "graphdist") -> logging.Logger:
    """A logger that prints INFO on rank 0 only and warnings on every rank (prefixed)."""
    log = logging.getLogger(name)
    if not getattr(log, "_graphdist", False):
        h = logging.StreamHandler(sys.stderr)
        rank = env_world()[0]
        h.setFormatter(logging.Formatter(f"[rank {rank}] %(message)s" if env_world()[1] > 1 else "%(message)s"))
        h.addFilter(_Rank0Filter())
        log.addHandler(h)
        log.setLevel(logging.INFO)
        log.propagate = False
        log._graphdist = True
    return log


class GracefulStop:
    """SIGINT / SIGTERM that arrive inside ``with GracefulStop() as stop:`` only set
    ``stop.signum``; the training loop polls it at a step boundary (agreeing across ranks), saves
    what it must and raises :class:`~graphdist.errors.Interrupted`. A second signal more than a
    second after the first (a user pressing Ctrl-C again) interrupts at once; one that follows
    within the second is the launcher forwarding the same Ctrl-C and is absorbed. Outside the
    block the previous handlers apply. Only the main thread can install handlers; elsewhere this
    is a no-op."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signum: int | None = None
        self._t = 0.0
        self._old: dict = {}

    def _handle(self, signum, frame):
        if self.signum is None:
            self.signum, self._t = signum, time.monotonic()
            return
        if time.monotonic() - self._t > 1.0:
            self.__exit__()
            raise KeyboardInterrupt

    def __enter__(self) -> "GracefulStop":
        try:
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
        except ValueError:  # not the main thread
            self._old.clear()
        return self

    def __exit__(self, *exc) -> bool:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old.clear()
        return False

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""


class Timer:
    """Wall-clock timer; syncs CUDA so GPU work is counted. ``with Timer() as t: ...; t.seconds``."""

    def __init__(self, device: torch.device | None = None):
        self.device = device
        self.seconds = 0.0

    def _sync(self):
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __enter__(self):
        self._sync()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self._sync()
        self.seconds = time.perf_counter() - self._t0
        return False


def host_memory_bytes() -> int:
    """Memory this machine gives the job: its physical memory, or its memory cgroup's limit where
    that is smaller (a container; :func:`partitioners.sysmem.cgroup_limit`); 16 GiB if the OS
    does not say."""
    from partitioners.sysmem import cgroup_limit, smallest
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover
        phys = 16 * 2**30
    return smallest(phys, cgroup_limit())


def peak_rss_bytes() -> int:
    """This process's peak resident memory. On Linux the high-water mark of its own address space
    (``VmHWM``): ``getrusage``'s ``ru_maxrss`` also counts the RSS of the process that started it
    (the kernel carries it over fork and exec), so a job started from a large Python process
    would report that process's size. Elsewhere ``ru_maxrss``."""
    from partitioners.sysmem import proc_status_bytes
    hwm = proc_status_bytes("VmHWM").get("VmHWM")
    if hwm is not None:
        return hwm
    import resource
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss * (1 if sys.platform == "darwin" else 1024))


def peak_memory_bytes(device: torch.device | None = None) -> int:
    """Peak memory of this process: CUDA max-allocated on GPU, peak RSS on CPU."""
    if device is not None and device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return peak_rss_bytes()


def set_mmap_threshold(mb: int) -> None:
    """A fixed glibc mmap threshold of ``mb`` MiB (``--malloc-mmap-mb``). glibc raises its
    threshold after each free of a large block (up to 32 MiB), so a rank's 1-32 MiB tensors land
    on the heap and, interleaved with longer-lived small ones, fragment it. No-op off glibc."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, int(mb) << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def start_rank(cfg) -> DistContext:
    """What a trainer does first on its rank (``train-gcn``, ``train-rec``): check ``cfg``, and its
    outputs on global rank 0 when a launcher other than graphdist's started the workers (under
    torchrun nobody checked before); under ``cfg.malloc_mmap_mb`` (CPU) give every larger tensor
    its own mapping; create the process group on ``cfg.device`` with ``cfg.timeout_s``."""
    cfg.validate()
    if env_world()[0] == 0:
        cfg.check_outputs()
    if cfg.malloc_mmap_mb > 0 and cfg.device != "cuda":
        set_mmap_threshold(cfg.malloc_mmap_mb)
    return init_distributed(cfg.device, cfg.timeout_s)
