"""Where a rank's share of a recommender job comes from.

Two sources:

* in-process (``SPEC [--parts K]``): every rank loads the interactions and partitions the
  user-item graph as a graph workload's (:func:`graphdist.partition.setup.load_local`: rank 0
  partitions and broadcasts), then keeps what its part needs;
* an artifact (``--partition DIR``, no SPEC needed): a rank reads ``meta.json``, its part file
  and its interaction file (:mod:`graphdist.rec.artifact`), never the whole log.

Either way the rank then derives a :class:`graphdist.rec.rank.RankData` from it.
"""
from __future__ import annotations

__all__ = ["load_local"]


def load_local(cfg, rank: int, world_size: int):
    """``(source, LocalGraph of this rank, partition info for the report)``: ``source`` is the
    :class:`~graphdist.rec.data.Ratings` (in-process) or this rank's interaction part
    (:class:`graphdist.rec.artifact.RecPart`, from ``--partition``)."""
    from graphdist.partition.setup import load_local as load_part_of
    if cfg.partition:
        from graphdist.partition.artifact import read_meta
        if "rec" in read_meta(cfg.partition) or not cfg.spec:  # a graph artifact needs the SPEC
            from graphdist.rec.artifact import load_rec_part
            return load_rec_part(cfg, rank, world_size)
    from graphdist.rec.data import load_ratings
    ratings = load_ratings(cfg.spec)
    lg, info = load_part_of(cfg, rank, world_size, graph=ratings.graph)
    return ratings, lg, info
