"""What a process holds and may still take: the one process footprint every memory check adds
(:data:`PROCESS_BYTES`), and this process's resident set, the memory it may grow into on this
machine and under its own limits. Read by the three checks before a run: ``graphdist partition``
(:mod:`graphdist.partition.budget`), ``train-gcn`` and ``graphdist plan``
(:mod:`graphdist.gnn.plan`) and ``train-rec`` (:mod:`graphdist.rec.memory`).
"""
from __future__ import annotations

import contextlib

__all__ = ["PROCESS_BYTES", "resident_bytes", "available_bytes", "process_ceiling", "measured"]

PROCESS_BYTES = 340 * 2 ** 20
"""Resident bytes of a graphdist process before its data counts: Python, torch, graphdist with its
imports and a gloo process group. Measured as the peak resident set per rank
(``mem/peak_bytes_per_rank``, the worker's ``VmHWM``) of ``train-gcn`` on a 400-node graph and
``train-rec`` on 300 users, at k = 1 and 2, each in fresh processes started as a user starts them:
``python benchmarks/memory_constants.py`` (BENCHMARKS.md, "Memory model constants"): 339 MiB for
``train-gcn`` (PyG imported) and 275-292 MiB for ``train-rec`` on the 2-core CPU box with torch
2.x; the largest, rounded up. ``graphdist partition`` adds it too (its coefficients per edge were
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
        from graphdist.runtime import host_memory_bytes
        return host_memory_bytes()
    return avail + rss


def process_ceiling() -> int | None:
    """The resident size this process may reach under its own limits (``ulimit -d`` / ``-v``, for
    example a per-rank cap standing in for one device's memory): its resident set plus
    :func:`partitioners.sysmem.process_headroom`; None when it has no such limit."""
    from partitioners.sysmem import process_headroom
    room, rss = process_headroom(), resident_bytes()
    return None if room is None or rss is None else room + rss


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
