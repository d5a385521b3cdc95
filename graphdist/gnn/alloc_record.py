"""Torch's own record of what an epoch allocates (``torch.profiler`` with ``profile_memory=True``),
read per named range (:class:`graphdist.gnn.task.GCNTask` names its training pass
``graphdist.train`` and its evaluation ``graphdist.eval``): the buffers each occurrence of a range
allocates, in order, with their frees (:func:`range_events`), and their peak (:func:`peak`), which
``tests/test_memory_record.py`` and ``benchmarks/memory_record.py`` compare with the memory
model's replay (:meth:`graphdist.gnn.plan_replay.Replay.phase_peak`).

The profiler records the allocations and frees of the threads it profiles, not those of gloo's
worker threads: when one of them drops the last reference to a finished exchange's buffer the
free is missing. Such a buffer (the next event at its address is another allocation, or there is
none) is taken as let go when the exchange op that made it (``_HaloSpMM``, its backward) ends,
or when its address is handed out again, whichever is first."""
from __future__ import annotations

__all__ = ["range_events", "peak"]

EXCHANGE_OPS = ("_HaloSpMM",)
"""Name prefixes of the ops whose buffers gloo's threads may let go."""


def _walk(tree, names) -> tuple[list, list]:
    """``(allocations (ns, address, bytes, end of the exchange op that made it or None),
    ranges (name, start ns, end ns))``."""
    from graphdist.torch_internals import is_allocation
    allocs, ranges = [], []
    stack = [(n, None) for n in tree]
    while stack:
        node, ex = stack.pop()
        if is_allocation(node):
            f = node.extra_fields
            allocs.append((node.start_time_ns, f.ptr, int(f.alloc_size), ex))
            continue
        if node.name in names:
            ranges.append((node.name, node.start_time_ns, node.end_time_ns))
        if node.name.startswith(EXCHANGE_OPS):
            ex = node.end_time_ns
        stack.extend((c, ex) for c in node.children)
    allocs.sort(key=lambda a: a[0])
    return allocs, sorted(ranges, key=lambda r: r[1])


def _unrecorded_frees(allocs: list) -> list:
    """The frees the record lacks (see the module docstring), as events."""
    out, live = [], {}
    for t, ptr, b, ex in allocs:
        if b > 0:
            if ptr in live:  # handed out again: the earlier buffer was let go before
                t0, b0, ex0 = live.pop(ptr)
                out.append((min(t - 1, ex0 or t - 1), ptr, -b0, None))
            live[ptr] = (t, b, ex)
        else:
            live.pop(ptr, None)
    out += [(ex, ptr, -b, None) for ptr, (t, b, ex) in live.items() if ex is not None]
    return out


def range_events(prof, names=("graphdist.train", "graphdist.eval")) -> dict[str, list[list[int]]]:
    """``{range name: per occurrence, the bytes of its buffers' allocations (> 0) and frees (< 0)
    in order}``, from a finished ``torch.profiler.profile(profile_memory=True)``: only the
    buffers the occurrence allocates (one an earlier range made and this one frees not counted)."""
    from graphdist.torch_internals import profiler_event_tree
    allocs, ranges = _walk(profiler_event_tree(prof), names)
    allocs = sorted(allocs + _unrecorded_frees(allocs), key=lambda a: a[0])
    out: dict[str, list[list[int]]] = {}
    for name, t0, t1 in ranges:
        mine, seq = set(), []
        for t, ptr, b, _ in allocs:
            if t0 <= t <= t1 and (b > 0 or ptr in mine):
                (mine.add if b > 0 else mine.discard)(ptr)
                seq.append(b)
        out.setdefault(name, []).append(seq)
    return out


def peak(events: list[int]) -> int:
    """The most bytes live at one time."""
    live = top = 0
    for b in events:
        live += b
        top = max(top, live)
    return top
