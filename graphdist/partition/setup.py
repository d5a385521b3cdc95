"""Where a rank's part comes from: a partition artifact (only part r is read) or a dataset spec
partitioned in-process (every rank loads the graph; rank 0 partitions it and broadcasts the
assignment).

Both paths refuse a mismatch between the number of parts and the world size, naming both.
"""
from __future__ import annotations

import torch

from graphdist import comm
from graphdist.errors import ArtifactError, ConfigError
from graphdist.partition.layout import LocalGraph, build_layout

SAY_EDGES = 10_000_000
"""Graphs with at least this many edges say on rank 0 that they are being partitioned in process,
and how long it took: METIS takes minutes at products size (122M edges), in silence before."""


def _quality(graph, assignment, k: int) -> dict:
    from partitioners.quality import quality
    return quality(graph, assignment, k=k)


def partition_in_process(graph, k: int, method: str, seed: int) -> torch.Tensor:
    """Assignment of ``graph`` into ``k`` parts (k=1: all zeros, no partitioner call)."""
    if k == 1:
        return torch.zeros(graph.num_nodes, dtype=torch.int64)
    from partitioners import partition
    return torch.as_tensor(partition(graph, k, method=method, seed=seed)).to(torch.int64)


def load_local(cfg, rank: int, world_size: int, graph=None) -> tuple[LocalGraph, dict]:
    """``(LocalGraph of this rank, partition info for the report)``. ``graph``: the workload's
    graph when it builds its own (the recommender's user-item graph); otherwise ``cfg.spec`` is
    loaded (in-process) or, next to ``--partition``, loaded to check that the artifact was cut from
    it."""
    if cfg.partition:
        return _from_artifact(cfg, rank, world_size, graph)
    k = cfg.parts if cfg.parts is not None else world_size
    if k != world_size:
        from graphdist.launch import start_hint
        raise ConfigError(f"--parts {k} does not match the world size {world_size} "
                          f"(start {k} workers, e.g. {start_hint(k)})")
    if graph is None:
        from graphdist.data import load_graph
        graph = load_graph(cfg.spec)
    comm.check_same(graph.fingerprint, f"graph fingerprint of {cfg.spec}")
    from graphdist.partition.assignment import check_parts
    check_parts(k, graph.num_nodes)  # on every rank, so all say it alike (not rank 0 alone, its peers left waiting)
    # rank 0 partitions and sends the assignment: every rank trains on one layout even where the
    # partitioner is not deterministic (several threads). The others wait for it through the job's
    # store, not in the broadcast: METIS on a large graph takes longer than the collective timeout.
    say = k > 1 and rank == 0 and graph.num_edges >= SAY_EDGES
    if say:
        import time

        from graphdist.log import get_logger
        t0 = time.perf_counter()
        get_logger().info(f"partitioning {graph.num_nodes:,} nodes and {graph.num_edges:,} edges into {k} parts with "
                          f"{cfg.method} (the other ranks wait; `graphdist partition` does it once for every run)")
    a = (partition_in_process(graph, k, cfg.method, cfg.seed) if rank == 0
         else torch.zeros(graph.num_nodes, dtype=torch.int64))
    quality = _quality(graph, a, k) if k > 1 and rank == 0 else {}
    if say:
        get_logger().info(f"partitioned in {time.perf_counter() - t0:.1f} s")
    comm.wait_for_all("partition/in-process")
    comm.broadcast(a, 0)
    lg = build_layout(graph, a, rank, k)
    info = {"method": cfg.method if k > 1 else "none", "parts": k, "source": "in-process", "quality": quality}
    return lg, info


def _from_artifact(cfg, rank: int, world_size: int, graph=None) -> tuple[LocalGraph, dict]:
    from graphdist.partition.artifact import check_artifact, read_meta
    from graphdist.partition.parts import load_part
    meta = read_meta(cfg.partition)  # meta.json only: a rank never reads the whole assignment
    k = int(meta["k"])
    if k != world_size:
        from graphdist.launch import start_hint
        raise ArtifactError(f"partition {cfg.partition} has k={k} parts but the world size is "
                            f"{world_size} (start {k} workers, e.g. {start_hint(k)})")
    if graph is None and cfg.spec:  # a spec next to --partition: the artifact must be cut from it
        from graphdist.data import load_graph
        graph = load_graph(cfg.spec)
    if graph is not None:
        check_artifact(meta, graph, k=world_size)
    lg = load_part(cfg.partition, rank)
    if lg.fingerprint != meta["fingerprint"] or lg.world_size != k:
        raise ArtifactError(f"{cfg.partition}: part {rank} has fingerprint {lg.fingerprint} and k={lg.world_size}"
                            f" but meta.json says {meta['fingerprint']} and k={k}")
    info = {"method": meta.get("method"), "parts": k, "source": str(cfg.partition),
            "quality": meta.get("quality", {})}
    return lg, info


def check_layout(lg: LocalGraph, halo: str = "plain") -> None:
    """Every rank must hold a part of the same graph and layout: the fingerprints agree, and what
    rank s sends to r in ``halo`` mode is what r expects from s (one small all-gather of the counts)."""
    comm.check_same(lg.fingerprint, "graph fingerprint")
    lay = lg.exchange_layout(halo)
    sends = comm.all_gather_json([int(c) for c in lay.send_counts])
    bad = [(s, lg.rank) for s in range(lg.world_size) if sends[s][lg.rank] != lay.recv_counts[s]]
    if bad:
        s, r = bad[0]
        raise ArtifactError(f"halo layouts disagree: rank {s} sends {sends[s][r]} rows to rank {r}, which "
                            f"expects {lay.recv_counts[s]} (parts from different artifacts?)")
