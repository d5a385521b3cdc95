"""A partition for the world that is there: when ``--nnodes MIN:MAX`` re-forms the group on fewer
nodes, the parts the job started with no longer match the ranks.

The job's config names parts for its full size (``--partition DIR`` with k parts, or ``--parts
K``); after a host is lost for good the elastic agent restarts the group on the nodes left, with a
smaller world size. :func:`parts_for_world` returns the config to train on and a line saying which
partition it took::

    --partition runs/cora-k4 (k = 4), world size 2
        -> a sibling artifact of the same graph with k = 2     runs/cora-k2  (method as the old one first)
        -> else, with a SPEC to load: partitioned in-process into 2 parts with the old method
        -> else one line: prepare one (the command) or give the SPEC
    --parts 4, world size 2  -> --parts 2 (in-process, as before)

Only an elastic job (``MIN < MAX``) is regrouped: any other mismatch of parts and world size stays
the error it was. The weights (GCN) and the table rows by global id (recommender) reshard onto the
new partition when the run resumes (:mod:`graphdist.loop`); nothing here reads a part.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from graphdist.errors import ArtifactError

__all__ = ["parts_for_world", "sibling_artifact"]


def sibling_artifact(directory, k: int, meta: dict | None = None) -> Path | None:
    """An artifact next to ``directory`` (same parent) cut from the same graph into ``k`` parts,
    of the same kind (a recommender's holds its interactions too); one with the same method
    first, then by name. None if there is none. ``meta``: ``directory``'s, if already read."""
    from graphdist.partition.artifact import read_meta
    d = Path(directory)
    meta = meta if meta is not None else read_meta(d)
    found = []
    for cand in sorted(p for p in d.parent.iterdir() if p.is_dir() and p.resolve() != d.resolve()):
        try:
            m = read_meta(cand)
        except ArtifactError:  # not an artifact (or an unfinished one): not a candidate
            continue
        if (m["fingerprint"] == meta["fingerprint"] and int(m["k"]) == k
                and ("rec" in m) == ("rec" in meta)):
            found.append((m.get("method") != meta.get("method"), cand.name, cand))
    return min(found)[2] if found else None


def parts_for_world(cfg, world_size: int) -> tuple[object, str | None]:
    """``(config, note)``: ``cfg`` itself when its parts match ``world_size`` (or the job is not
    elastic); else a config whose partition has ``world_size`` parts and a line saying which."""
    nodes = getattr(cfg, "nodes", None)
    if nodes is None or not nodes.elastic:
        return cfg, None
    if cfg.partition:
        from graphdist.partition.artifact import read_meta
        meta = read_meta(cfg.partition)
        k = int(meta["k"])
        if k == world_size:
            return cfg, None
        lead = (f"the group has {world_size} rank{'s' if world_size != 1 else ''}, not the {k} that --partition "
                f"{cfg.partition} was cut for")
        sib = sibling_artifact(cfg.partition, world_size, meta)
        if sib is not None:
            return (dataclasses.replace(cfg, partition=str(sib), parts=None),
                    f"{lead}: training on {sib} (k = {world_size}, the same graph)")
        if cfg.spec:
            from partitioners import METHODS
            method = meta.get("method") if meta.get("method") in METHODS else cfg.method  # the old one if it can
            return (dataclasses.replace(cfg, partition=None, parts=world_size, method=method),
                    f"{lead}: no artifact with k = {world_size} next to it; partitioning {cfg.spec} "
                    f"in-process into {world_size} (method {method if world_size > 1 else 'none'})")
        raise ArtifactError(f"{lead}, and there is no artifact of that graph with k = {world_size} in "
                            f"{Path(cfg.partition).parent} nor a SPEC to partition: prepare one with "
                            f"`graphdist partition SPEC --parts {world_size} --out "
                            f"{Path(cfg.partition).parent}/NAME`, or give the SPEC with --partition")
    k = cfg.parts if cfg.parts is not None else world_size
    if k == world_size:
        return cfg, None
    return (dataclasses.replace(cfg, parts=world_size),
            f"the group has {world_size} rank{'s' if world_size != 1 else ''}, not the {k} of --parts {k}: "
            f"partitioning {cfg.spec} in-process into {world_size}")
