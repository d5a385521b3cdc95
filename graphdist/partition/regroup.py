"""A partition for the world that is there: when ``--nnodes MIN:MAX`` re-forms the group on fewer
nodes, the parts the job started with no longer match the ranks.

The job's config names parts for its full size (``--partition DIR`` with k parts, or ``--parts
K``); after a host is lost for good the elastic agent restarts the group on the nodes left, with a
smaller world size. :func:`parts_for_world` returns the config to train on and a line saying which
partition it took::

    --partition runs/cora-k4 (k = 4), world size 2
        -> a sibling artifact of the same graph with k = 2     runs/cora-k2  (method as the old one first)
           found by every rank on its own node's filesystem (a rank that does not find the one
           another rank found says so in one line: the sibling must be on every node)
        -> else, with a SPEC to load: partitioned in-process into 2 parts with the old method, when
           every node has room for it (:func:`check_in_process`: every rank loads the whole graph
           and cuts its part from it, one partitions it), else one line with the numbers and the
           ``graphdist partition`` command that prepares the sibling; training the part is then
           checked as in any run (the trainer's own check)
        -> else one line: prepare one (the command) or give the SPEC
    --parts 4, world size 2  -> --parts 2 (in-process, as before)

Only an elastic job (``MIN < MAX``) is regrouped: any other mismatch of parts and world size stays
the error it was. The weights (GCN) and the table rows by global id (recommender) reshard onto the
new partition when the run resumes (:mod:`graphdist.loop`); nothing here reads a part but part 0's
header (its feature columns, for the memory check).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import os

import torch

from graphdist import comm
from graphdist.errors import ArtifactError, ConfigError

__all__ = ["parts_for_world", "sibling_artifact", "agreed_sibling", "check_in_process"]


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


def agreed_sibling(directory, k: int, meta: dict) -> Path | None:
    """:func:`sibling_artifact` as every rank finds it on its own node's filesystem (collective:
    every rank calls it): the one they all found, None when none did; a rank that does not find
    the one another rank found (or finds another) stops every rank with one line naming both."""
    sib = sibling_artifact(directory, k, meta)
    mine = os.fsencode(str(sib)) if sib is not None else b""
    row = torch.zeros((1, 1 + len(mine)), dtype=torch.int64)
    row[0, 0] = len(mine)
    row[0, 1:] = torch.tensor(list(mine), dtype=torch.int64)
    width = int(comm.all_reduce_max(torch.tensor([row.shape[1]]))[0])
    padded = torch.zeros((1, width), dtype=torch.int64)
    padded[:, :row.shape[1]] = row
    seen = comm.all_gather_rows(padded)  # each rank's find as bytes: no pickled objects from peers
    found = [bytes(seen[r, 1:1 + int(seen[r, 0])].tolist()).decode("utf-8", "surrogateescape") for r in range(seen.shape[0])]
    names = sorted(set(found) - {""})
    if not names:
        return None
    if len(names) == 1 and "" not in found:
        return sib
    rank = comm.world()[0]
    other = next(r for r, f in enumerate(found) if f)
    lacking = next((r for r, f in enumerate(found) if f != found[other]), None)
    what = (f"finds no artifact with k = {k} next to {directory} on its node's filesystem" if not found[lacking]
            else f"finds {found[lacking]} there")
    raise ArtifactError(f"rank {lacking} {what}, where rank {other} found {found[other]}: a sibling artifact must be "
                        f"on every node's filesystem (the same directory on storage every node sees, or a copy on "
                        f"each node){'' if rank == lacking else f' (seen from rank {rank})'}")


def check_in_process(meta: dict, directory, spec: str, world_size: int, method: str) -> int:
    """Before a regrouped job partitions its graph in-process: every rank loads the whole graph
    (its sizes from ``meta``, the feature columns from part 0's header) and cuts its part from it
    (about a ``world_size``-th of the graph more), and the rank that partitions also runs the
    partitioner (:func:`graphdist.partition.budget.estimate_sizes`, what ``graphdist partition``
    checks before it starts). Collective: every node's ranks against that node's free memory (and
    each rank against its own limit); one line with the numbers and the ``graphdist partition``
    command to run when any does not fit. Returns this rank's bytes."""
    from graphdist.fmt import fmt_bytes
    from graphdist.memory import PROCESS_BYTES, available_bytes, process_ceiling, resident_bytes
    from graphdist.partition.budget import estimate_sizes, sized_graph_bytes
    n, e = int(meta["num_nodes"]), int(meta["num_edges"])
    g, x = sized_graph_bytes(n, e, feature_columns(directory))
    loading = PROCESS_BYTES + g + g // max(world_size, 1)
    partitioning = max(estimate_sizes(n, e, g, x, method, world_size), loading) if world_size > 1 else loading
    rank = comm.world()[0]
    mine = partitioning if rank == 0 else loading
    from graphdist.hosts import placement
    where = placement()
    local = where.ranks_on_machine_of(rank)  # the ranks that share this machine's memory
    node = where.machine_of_host[where.host_of_rank[rank]]
    cap = process_ceiling()
    have = available_bytes() + (local - 1) * (resident_bytes() or 0)
    row = torch.tensor([[node, mine, have, -1 if cap is None else cap]], dtype=torch.int64)
    seen = comm.all_gather_rows(row)
    for nd in sorted({int(v) for v in seen[:, 0]}):
        on = seen[seen[:, 0] == nd]
        need, room = int(on[:, 1].sum()), int(on[:, 2].min())
        caps = [(int(c), int(m)) for c, m in zip(on[:, 3], on[:, 1]) if int(c) >= 0 and int(m) > int(c)]
        if need <= room and not caps:
            continue
        parent = Path(directory).parent
        how = (f"about {fmt_bytes(need)} on node {nd} ({len(on)} rank(s), each loading the whole graph of {n:,} nodes "
               f"and {e:,} edges{', one partitioning it' if world_size > 1 and nd == int(seen[0, 0]) else ''}), "
               f"and {fmt_bytes(room)} is available")
        if need <= room:
            c, m = caps[0]
            how = (f"about {fmt_bytes(m)} per rank, and a rank may hold only {fmt_bytes(c)} (its process memory "
                   "limit, ulimit -d / -v)")
        raise ConfigError(f"the group has {world_size} rank{'s' if world_size != 1 else ''}, not the {meta['k']} that "
                          f"--partition {directory} was cut for, and no artifact with k = {world_size} is next to it: "
                          f"partitioning {spec} in-process needs {how}; prepare one with `graphdist partition {spec} "
                          f"--parts {world_size} --out {parent}/NAME` where every node sees it, then restart")
    return mine


def feature_columns(directory) -> int:
    """Feature columns of an artifact's graph, from part 0's header (the file is mapped, not read)."""
    from graphdist.partition.parts import part_path
    try:
        d = torch.load(part_path(directory, 0), map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # noqa: BLE001 - a damaged part says so in one line
        raise ArtifactError(f"{part_path(directory, 0)}: cannot read part file: {e}") from e
    x = d.get("x")
    return int(x.shape[1]) if x is not None and x.dim() == 2 else 0


def parts_for_world(cfg, world_size: int) -> tuple[object, str | None]:
    """``(config, note)``: ``cfg`` itself when its parts match ``world_size`` (or the job is not
    elastic); else a config whose partition has ``world_size`` parts and a line saying which.
    Collective when it regroups an artifact (every rank calls it)."""
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
        sib = agreed_sibling(cfg.partition, world_size, meta)
        if sib is not None:
            return (dataclasses.replace(cfg, partition=str(sib), parts=None),
                    f"{lead}: training on {sib} (k = {world_size}, the same graph)")
        if cfg.spec:
            from partitioners import METHODS
            method = meta.get("method") if meta.get("method") in METHODS else cfg.method  # the old one if it can
            check_in_process(meta, cfg.partition, cfg.spec, world_size, method)
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
