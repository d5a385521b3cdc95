"""The partitioned graph: what each rank holds and how halo rows move.

    local.py      LocalGraph: owned rows, halo columns, both exchange layouts (plain, mvc), the
                  model normalisations, locality reordering
    layout.py     builds every part's LocalGraph in one process and validates them together
    artifact.py   the partition artifact directory (meta.json, assignment.npy, part files)
    parts.py      per-part files: a rank reads only its own
    setup.py      where a rank's part comes from (an artifact, or partitioning in-process) and
                  the check that every rank holds the same layout
    job.py        what a graph workload's job shares: workers per parts, checks before launch,
                  the worker's body (train, summary, report)
    spmm.py       the adjacency as sparse operators and ``A @ [h ; halo(h)]`` overlapped with
                  the exchange
    quant.py      quantised halo rows (offset/scale per row, stochastic rounding, packing)
    assignment.py a partition given as a file (one part id per node), read and checked

Shared by every workload that trains on a partitioned graph (``graphdist.gnn``, and the graph
recommender). The exchange itself is :class:`graphdist.halo.exchange.HaloExchanger`. Keyed
random bits (dropout masks, rounding noise) are the core's :mod:`graphdist.keyed`.
"""
from graphdist.halo.layout import LocalGraph, build_layout, build_layouts, layout_stats, validate_layouts

__all__ = ["LocalGraph", "build_layout", "build_layouts", "validate_layouts", "layout_stats"]
