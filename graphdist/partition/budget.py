"""Will ``graphdist partition`` fit in memory? An estimate from the graph's size, checked
before the partitioner starts, so a run that cannot fit stops with one line instead of being
killed by the kernel half-way.

The estimate is the loaded graph plus the largest working set of the steps after it (the
partitioner, the quality metrics, the parts), each linear in the stored edges ``E`` and nodes
``N``. The coefficients are the ones measured on products-shaped graphs (BENCHMARKS.md,
"Products size: partitioning"), rounded up::

    need = max(graph - spilled + partitioner, graph + write)    partitioner = a * E + b * N * k

where ``spilled`` is the features, which wait on disk while the partitioner runs when they are
larger than :data:`SPILL_BYTES` (:func:`graphdist.partition.tools.features_on_disk`).
"""
from __future__ import annotations

from graphdist.errors import ConfigError

GiB = 2 ** 30
SPILL_BYTES = 64 * 2**20
"""Features larger than this wait on disk while a partitioner runs."""

PER_EDGE = {  # bytes per stored (directed) edge of the partitioner's working set
    "metis32": 96,   # cmeel-metis: 32-bit ids (57 measured on the SBM, 86 on the power-law R-MAT);
                     # 24 when METIS keeps its levels on disk (partitioners.backends.metis_ondisk)
    "metis64": 192,  # pymetis' METIS: 64-bit ids
    "kaminpar": 24,
    "mtkahypar": 120,
    "auto": 96,      # multi-constraint METIS, then two pin matrices of the refinement (75-83 measured)
    "auto_ondisk": 64,  # the same with METIS' levels on disk: the refinement's pins (36-45 measured)
    "ldg": 16,
    "fennel": 16,
    "random": 0,
    "block": 0,
    "given": 0,
}
WRITE_PER_EDGE = 32
"""Quality metrics, halo cover, one part being built and the plans' validation, per stored edge
(29 measured on the products-sized R-MAT, where the validation of the plans peaks)."""
PER_NODE_PART = 16
"""Per node and part (dense membership bitmaps, pin counts)."""


def graph_bytes(graph) -> int:
    """Bytes held by the graph's tensors."""
    total = 0
    for k in ("indptr", "indices", "x", "y", "train_mask", "val_mask", "test_mask"):
        t = getattr(graph, k, None)
        if t is not None:
            total += t.numel() * t.element_size()
    return total


def estimate(graph, method: str, k: int) -> int:
    """Estimated peak resident bytes of partitioning ``graph`` with ``method`` into ``k`` parts
    and writing the artifact (the graph included)."""
    e, n = int(graph.num_edges), int(graph.num_nodes)
    per_edge = PER_EDGE.get(method, 96)
    if method in ("metis", "auto"):  # the backend's own choice: METIS' coarse levels on disk or not
        from partitioners.backends import METIS_BYTES_PER_EDGE, metis_backend, metis_levels
        ondisk = metis_levels(n, e) == "ondisk"
        if method == "auto":
            per_edge = PER_EDGE["auto_ondisk" if ondisk else "auto"]
        elif ondisk:
            per_edge = METIS_BYTES_PER_EDGE["ondisk"]
        else:
            per_edge = PER_EDGE["metis64" if metis_backend(n, e) == "64-bit" else "metis32"]
    part = per_edge * e + PER_NODE_PART * n * k
    write = WRITE_PER_EDGE * e + PER_NODE_PART * n * k
    x = getattr(graph, "x", None)
    spilled = x.numel() * x.element_size() if x is not None and x.numel() * x.element_size() > SPILL_BYTES else 0
    g = graph_bytes(graph)
    return max(g - spilled + part, g + write)


def check_fits(graph, method: str, k: int, have: int | None = None) -> int:
    """Raise :class:`ConfigError` (one line: needed and available GiB) when the estimate exceeds
    the memory available; returns the estimate."""
    need = estimate(graph, method, k)
    if have is None:
        from graphdist.memory import available_bytes, process_ceiling
        from partitioners.sysmem import smallest
        have = smallest(available_bytes(), process_ceiling())
    have = int(have)
    if need > have:
        raise ConfigError(f"partitioning {graph.num_nodes:,} nodes / {graph.num_edges:,} edges with --method {method} "
                          f"at k={k} needs about {need / GiB:.1f} GiB of memory, and {have / GiB:.1f} GiB is available "
                          "(free memory plus this process, within its limits); free memory or use --method kaminpar "
                          "or fennel")
    return need
