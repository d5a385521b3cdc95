"""Partitioning a graph into an artifact, and judging partitions: the library behind
``graphdist partition``, ``quality`` and ``compare``.

    tools.py      the partition / quality / compare configs and functions the CLI calls, and the
                  comparison plot
    budget.py     will ``graphdist partition`` fit in memory: the estimate checked before the
                  partitioner starts

It builds on the partitioned graph (:mod:`graphdist.halo`: artifacts, part files, a given
assignment) and on :mod:`partitioners`; the workloads (the recommender's interaction artifacts)
and the CLI build on it.
"""
