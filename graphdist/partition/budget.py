"""Will ``graphdist partition`` fit in memory? An estimate from the graph's size, checked
before the partitioner starts, so a run that cannot fit stops with one line instead of being
killed by the kernel half-way.

The estimate is the process footprint, the loaded graph and the largest working set of the steps
after it (the partitioner, the quality metrics, the parts)::

    need = PROCESS_BYTES + max(graph - spilled + partitioner, graph + write)
    partitioner = PER_EDGE[method] * E + dense N x k arrays of the partitioner
    write       = WRITE_PER_EDGE * E + dense N x k arrays of the quality metrics

where ``spilled`` is the features, which wait on disk while the partitioner runs when they are
larger than :data:`SPILL_BYTES` (:func:`graphdist.partition.tools.features_on_disk`). The
per-edge coefficients are the ones measured on products-shaped graphs (BENCHMARKS.md, "Products
size: partitioning"), rounded up; the footprint is the one every memory check adds
(:data:`graphdist.memory.PROCESS_BYTES`). The N x k arrays are counted as the partitioners
allocate them (:func:`dense_bytes`): each is dense only up to its cap of cells (2^25 or 2^28)
and above it takes a form sized by the edges, so at a large N x k it costs nothing here.
"""
from __future__ import annotations

from graphdist.errors import ConfigError
from graphdist.memory import PROCESS_BYTES

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
PIN_CELL_BYTES = 16
"""Per (net, part) cell of the refinement's dense pin counts (``partitioners.refine.PinCounts``,
nets = nodes, up to :data:`partitioners.refine.DENSE_PIN_CELLS` cells): the int64 ``bincount``
and its int32 copy (12 bytes) while the previous assignment's counts (4) are held."""
RANK_CELL_BYTES = 5
"""Per (node, part) cell of the halo cover's bitmap ranking (``partitioners.cover``, up to
:data:`partitioners.cover.DENSE_RANK_CELLS` cells): a bool mask and its int32 running count."""
PAIR_CELL_BYTES = 1
"""Per (node, part) cell of the quality metrics' membership bitmap (``partitioners.quality``, up
to :data:`partitioners.quality.DENSE_PAIR_CELLS` cells): bool."""
REFINING = ("auto", "ldg", "fennel")
"""Methods whose partitioner step builds the refinement's pin counts (``auto`` refines; ``ldg``
and ``fennel`` rebalance with the same refiner when late nodes overflow a cap)."""


def dense_bytes(n: int, k: int, method: str) -> tuple[int, int]:
    """Bytes of the dense N x k arrays ``(partitioner step, write step)``, as the partitioners
    allocate them: each only while its cells stay under its cap (above it, 0: the sparse form is
    sized by the edges, inside the per-edge coefficients)."""
    from partitioners.cover import DENSE_RANK_CELLS
    from partitioners.quality import DENSE_PAIR_CELLS
    from partitioners.refine import DENSE_PIN_CELLS
    cells = int(n) * int(k)
    pins = PIN_CELL_BYTES * cells if method in REFINING and cells <= DENSE_PIN_CELLS else 0
    rank = RANK_CELL_BYTES * cells if cells <= DENSE_RANK_CELLS else 0
    pairs = PAIR_CELL_BYTES * cells if cells <= DENSE_PAIR_CELLS else 0
    return max(pins, rank if method == "auto" else 0), max(rank, pairs)


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
    and writing the artifact (the process and the graph included)."""
    x = getattr(graph, "x", None)
    x_bytes = x.numel() * x.element_size() if x is not None else 0
    return estimate_sizes(int(graph.num_nodes), int(graph.num_edges), graph_bytes(graph), x_bytes, method, k)


def sized_graph_bytes(num_nodes: int, num_edges: int, features: int) -> tuple[int, int]:
    """``(bytes of the graph as the loaders build it, of which features)`` from its sizes alone
    (what :func:`graph_bytes` would count once it is loaded): the CSR (int32 ids below 2^31
    nodes), float32 features, int64 labels and three masks."""
    n, e = int(num_nodes), int(num_edges)
    x = 4 * n * int(features)
    return 8 * (n + 1) + (4 if n < 2**31 - 1 else 8) * e + x + 8 * n + 3 * n, x


def estimate_sizes(n: int, e: int, g: int, x_bytes: int, method: str, k: int) -> int:
    """:func:`estimate` from the graph's sizes: ``n`` nodes, ``e`` stored edges, ``g`` bytes of
    the loaded graph of which ``x_bytes`` features."""
    per_edge = PER_EDGE.get(method, 96)
    if method in ("metis", "auto"):  # the backend's own choice: METIS' coarse levels on disk or not
        from partitioners.metis import METIS_BYTES_PER_EDGE, metis_backend, metis_levels
        ondisk = metis_levels(n, e) == "ondisk"
        if method == "auto":
            per_edge = PER_EDGE["auto_ondisk" if ondisk else "auto"]
        elif ondisk:
            per_edge = METIS_BYTES_PER_EDGE["ondisk"]
        else:
            per_edge = PER_EDGE["metis64" if metis_backend(n, e) == "64-bit" else "metis32"]
    dense_part, dense_write = dense_bytes(n, k, method)
    part = per_edge * e + dense_part
    write = WRITE_PER_EDGE * e + dense_write
    spilled = x_bytes if x_bytes > SPILL_BYTES else 0
    return PROCESS_BYTES + max(g - spilled + part, g + write)


def check_fits(graph, method: str, k: int) -> int:
    """Raise :class:`ConfigError` (one line: needed and available GiB) when the estimate exceeds
    the memory available (free memory plus this process, within its own limits); returns the
    estimate."""
    from graphdist.memory import available_bytes, process_ceiling
    from partitioners.sysmem import smallest
    need = estimate(graph, method, k)
    have = int(smallest(available_bytes(), process_ceiling()))
    if need > have:
        raise ConfigError(f"partitioning {graph.num_nodes:,} nodes / {graph.num_edges:,} edges with --method {method} "
                          f"at k={k} needs about {need / GiB:.1f} GiB of memory, and {have / GiB:.1f} GiB is available "
                          "(free memory plus this process, within its limits); free memory or use --method kaminpar "
                          "or fennel")
    return need
