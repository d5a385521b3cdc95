"""The partitioned graph: what each rank holds and how halo rows move.

    plan.py       LocalGraph (owned rows, halo columns, exchange plan) built for all ranks in
                  one process, validated for symmetry
    artifact.py   the partition artifact directory (meta.json, assignment.npy, part files)
    parts.py      per-part files: a rank reads only its own
    setup.py      where a rank's part comes from (an artifact, or partitioning in-process)
    spmm.py       the normalised adjacency and ``A @ [h ; halo(h)]`` overlapped with the exchange

Shared by every workload that trains on a partitioned graph (``graphdist.gnn``, and the graph
recommender). The exchange itself is :class:`graphdist.comm.HaloExchanger`.
"""
from graphdist.halo.plan import LocalGraph, build_plan, build_plans, plan_stats, validate_plans

__all__ = ["LocalGraph", "build_plan", "build_plans", "validate_plans", "plan_stats"]
