"""Process memory, in one place: the one process footprint every memory check adds
(:data:`PROCESS_BYTES`); this process's resident set, its peak, the memory it may grow into on
this machine and under its own limits; the machine's memory; glibc's mmap threshold
(``--malloc-mmap-mb``). Read by the three checks before a run: ``graphdist partition``
(:mod:`graphdist.partition.budget`), ``train-gcn`` and ``graphdist plan``
(:mod:`graphdist.gnn.plan`) and ``train-rec`` (:mod:`graphdist.rec.memory`), by the launcher
before it starts local workers (:func:`check_workers_start`), and by the reports' ``mem/`` keys.
"""
from __future__ import annotations

import contextlib
import os
import sys

__all__ = ["PROCESS_BYTES", "resident_bytes", "available_bytes", "process_ceiling", "measured", "host_memory_bytes",
           "peak_rss_bytes", "peak_memory_bytes", "set_mmap_threshold", "check_workers_start"]

PROCESS_BYTES = 340 * 2 ** 20
"""Resident bytes of a graphdist process before its data counts: Python, torch, graphdist with its
imports and a gloo process group. Measured as the peak resident set per rank
(``mem/peak_bytes_per_rank``, the worker's ``VmHWM``) of ``train-gcn`` on a 400-node graph and
``train-rec`` on 300 users, at k = 1 and 2, each in fresh processes started as a user starts them:
``python benchmarks/memory_constants.py`` (BENCHMARKS.md, "Memory model constants"): 339 MiB for
``train-gcn`` (PyG imported) and 275-292 MiB for ``train-rec`` on the 2-core CPU box with torch
2.x; the largest, rounded up. Since graphdist's own Adam and Planetoid reader (2026-12-06) a
rank of a built-in model imports neither torch_geometric nor ``torch._dynamo``: the same tiny
runs peak at 320-324 MiB (``train-gcn``) and 323-325 MiB (``train-rec``), and an artifact's
ranks, which import no partitioner, at 271-303 MiB (the README's runs); a PyG ``--model`` rank
still imports both. ``graphdist partition`` adds it too (its coefficients per edge were
fitted above the graph, not the process)."""


def resident_bytes() -> int | None:
    """This process's resident set (``VmRSS``); None where it cannot be read."""
    from partitioners.sysmem import proc_status_bytes
    return proc_status_bytes("VmRSS").get("VmRSS")


def available_bytes() -> int:
    """Memory this process may still grow into on this machine: ``MemAvailable`` (or less where its
    memory cgroup leaves less, :mod:`partitioners.sysmem`) plus its own resident set (Linux); else
    the machine's physical memory. The machine's free memory is shared by its processes; a
    process's own limits are :func:`process_ceiling`."""
    from partitioners.sysmem import mem_available
    avail = mem_available()
    rss = resident_bytes()
    if avail is None or rss is None:
        return host_memory_bytes()
    return avail + rss


def check_workers_start(nproc: int) -> None:
    """Before ``nproc`` local workers start: each will hold :data:`PROCESS_BYTES` before any data,
    so the host needs that many times it available; one line with the numbers otherwise
    (``train-gcn SPEC --parts 400`` on a 24 GiB machine started 400 interpreters and was at 11 GiB
    after 20 s, before any of them could check its part)."""
    from graphdist.errors import ConfigError
    from graphdist.fmt import fmt_bytes
    from partitioners.sysmem import mem_available
    avail, need = mem_available(), nproc * PROCESS_BYTES
    if avail is not None and need > avail:
        raise ConfigError(f"{nproc} local workers need {fmt_bytes(need)} before any data ({nproc} x "
                          f"{fmt_bytes(PROCESS_BYTES)}: Python, torch and graphdist in each), but this host has "
                          f"{fmt_bytes(avail)} available: start fewer per node (--nproc, or --parts without it), "
                          "or spread them over nodes (--nnodes)")


def process_ceiling() -> int | None:
    """The resident size this process may reach under its own limits (``ulimit -d`` / ``-v``, for
    example a per-rank cap standing in for one device's memory): its resident set plus
    :func:`partitioners.sysmem.process_headroom`; None when it has no such limit."""
    from partitioners.sysmem import process_headroom
    room, rss = process_headroom(), resident_bytes()
    return None if room is None or rss is None else room + rss


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


def peak_memory_bytes(device=None) -> int:
    """Peak memory of this process on ``device`` (a ``torch.device``): CUDA max-allocated on a
    GPU, peak RSS on the CPU."""
    if device is not None and device.type == "cuda":
        import torch
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


@contextlib.contextmanager
def measured():
    """Measure what a block of code adds to this process's resident set: yields a dict that holds,
    after the block, ``start`` (the resident bytes before it), ``peak`` (the most it added at any
    moment: Linux's high-water mark ``VmHWM``, reset to the current size first by writing 5 to
    ``/proc/self/clear_refs``) and ``kept`` (what it still holds after). ``peak`` is None where the
    high-water mark cannot be reset (not Linux)."""
    from partitioners.sysmem import proc_status_bytes
    out = {"start": resident_bytes() or 0, "peak": None, "kept": None}
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        reset = False
    yield out
    end = proc_status_bytes("VmRSS", "VmHWM")
    out["kept"] = (end.get("VmRSS") or out["start"]) - out["start"]
    if reset and end.get("VmHWM") is not None:
        out["peak"] = max(end["VmHWM"] - out["start"], out["kept"])
