"""How much memory a job may still take here: the machine's, its container's, and its own process's.

Three limits can stop a job, and a check that reads only the first lets the other two kill it
half-way:

- the machine: Linux ``MemAvailable``;
- its memory cgroup (a container, a Kubernetes pod, a Slurm job): the tightest of its limits,
  walking up to the root of the hierarchy, less what the group uses, plus the page cache the
  kernel can reclaim (``inactive_file``); cgroup v2 ``memory.max`` / ``memory.current`` or v1
  ``memory.limit_in_bytes`` / ``memory.usage_in_bytes``. Inside a container ``MemAvailable``
  is the host's, so this is the figure that counts there;
- the process itself: ``ulimit -d`` (``RLIMIT_DATA``, checked against ``VmData``) and
  ``ulimit -v`` (``RLIMIT_AS``, against ``VmSize``), for example a per-rank cap that stands in
  for one device's memory.

:func:`mem_available` is the first two (shared by the processes of a machine),
:func:`process_headroom` the third (per process).
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["mem_available", "cgroup_headroom", "cgroup_limit", "process_headroom", "proc_status_bytes", "smallest"]

_UNLIMITED = 1 << 60
"""cgroup v1 writes "no limit" as the largest page count (9223372036854771712 bytes)."""


def mem_available() -> int | None:
    """Bytes that can still be allocated on this machine and in this process's memory cgroup:
    the smaller of ``MemAvailable`` and :func:`cgroup_headroom`; None where neither can be read."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        pass
    return smallest(avail, cgroup_headroom())


def smallest(*sizes: int | None) -> int | None:
    """The smallest of the sizes that are known (not None); None when none is."""
    known = [s for s in sizes if s is not None]
    return min(known) if known else None


def cgroup_headroom(proc_cgroup: str = "/proc/self/cgroup", mount: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process's memory cgroup, or any group above it, can still take (limit - usage +
    inactive page cache, the tightest over the groups); None when no group has a limit or none
    can be read. ``proc_cgroup`` is the ``/proc/<pid>/cgroup`` listing and ``mount`` where the
    hierarchies are mounted."""
    return smallest(*(_room(d, *names) for d, names in _groups(proc_cgroup, mount)))


def cgroup_limit(proc_cgroup: str = "/proc/self/cgroup", mount: str = "/sys/fs/cgroup") -> int | None:
    """The tightest memory limit of this process's cgroup and the groups above it (the memory a
    container may hold in all); None when none is set or readable."""
    return smallest(*(_limit(d, names[0]) for d, names in _groups(proc_cgroup, mount)))


def _groups(proc_cgroup: str, mount: str):
    """(folder, (limit, usage, stat file names)) of every memory cgroup from this process's up to
    the mount of its hierarchy (inside a container whose cgroup is mounted as the root, the
    listed path may not exist below it: then the mount alone)."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            base = Path(mount)
            if not (base / "cgroup.controllers").exists():  # hybrid layout: v2 under unified/
                base = base / "unified"
            names = ("memory.max", "memory.current", "memory.stat")
        elif "memory" in controllers.split(","):
            base = Path(mount) / "memory"
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat")
        else:
            continue
        leaf = base / path.lstrip("/")
        d = leaf if leaf.is_dir() else base
        while True:
            yield d, names
            if d == base or base not in d.parents:
                break
            d = d.parent


def _limit(d: Path, limit_file: str) -> int | None:
    try:
        raw = (d / limit_file).read_text().strip()
    except OSError:
        return None
    return None if raw == "max" or not raw.isdigit() or int(raw) >= _UNLIMITED else int(raw)


def _room(d: Path, limit_file: str, usage_file: str, stat_file: str) -> int | None:
    limit = _limit(d, limit_file)
    if limit is None:
        return None
    try:
        usage = int((d / usage_file).read_text().strip())
    except (OSError, ValueError):
        return None
    cache = 0
    try:
        for line in (d / stat_file).read_text().splitlines():
            key, _, val = line.partition(" ")
            if key in ("inactive_file", "total_inactive_file"):
                cache = max(cache, int(val))
    except (OSError, ValueError):
        pass
    return max(0, limit - usage + cache)


def proc_status_bytes(*keys: str, status: str = "/proc/self/status") -> dict[str, int]:
    """``VmRSS``, ``VmData``, ... of ``/proc/self/status`` in bytes (the keys found)."""
    out = {}
    try:
        with open(status) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in keys:
                    out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def process_headroom() -> int | None:
    """Bytes this process may still map under its own limits: the smaller of ``RLIMIT_DATA`` -
    ``VmData`` and ``RLIMIT_AS`` - ``VmSize``; None when neither limit is set (or on a system
    without them)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    vm = proc_status_bytes("VmData", "VmSize")
    rooms = []
    for which, key in ((resource.RLIMIT_DATA, "VmData"), (resource.RLIMIT_AS, "VmSize")):
        soft = resource.getrlimit(which)[0]
        if soft != resource.RLIM_INFINITY and key in vm:
            rooms.append(max(0, soft - vm[key]))
    return min(rooms) if rooms else None

