"""Sharding plans for the embedding tables, and the plan report.

``--sharding auto`` asks torchrec's planner (real topology: world size, CPU or GPU, the memory
of the device); a forced type applies to every table and is built directly with torchrec's
``construct_module_sharding_plan`` (the planner refuses row-wise on CPU, the kernels do not):

    table_wise      table i whole on rank i % W
    row_wise        rows split in W contiguous blocks, block r on rank r
    column_wise     columns split in W blocks (D/W wide), block r on rank r
    table_row_wise  table i row-wise over the ranks of host i % H (H = W / local ranks;
                    = row_wise on one host); the same plan on every rank
    data_parallel   every rank holds the whole table; gradients are all-reduced

The report (:func:`describe_plan`) gives per table its type, ranks and kernel, and per rank the
embedding bytes (weights + optimizer state), the expected lookups per global batch and the
forward all-to-all bytes per batch (sent + received; backward moves the same amount back),
estimated from the data's id statistics (:class:`IdStats`).

With 2D sparse parallelism (``--sparse-groups G``, :mod:`embeddings.twod`) the plan is made for
one sharding group of S = W/G ranks (group-local ranks 0..S-1, the same plan on every rank) and
:func:`expand_2d` lists every global rank: its sharding group, its all-to-all group size and
bytes, and the bytes it all-reduces with its replica group at each sync.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np
import torch

from graphdist.errors import ConfigError
from graphdist.fmt import fmt_bytes
from graphdist.memory import host_memory_bytes

SHARDING_TYPES = ("table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel")
EBC_PATH = "model.sparse_arch.embedding_bag_collection"
ID_BYTES = 8  # int64 ids and lengths on the wire


def optimizer_state_floats(optimizer: str, rows: int, cols: int) -> int:
    """Optimizer state of one shard, in floats."""
    return {"rowwise_adagrad": rows, "adagrad": rows * cols, "adam": 2 * rows * cols,
            "sgd": 0}[optimizer]


def build_plan(module: torch.nn.Module, sharding: str, num_embeddings: list[int], dim: int,
               world_size: int, local_size: int, device_type: str, local_batch: int,
               pooling: list[float], pg=None):
    """A torchrec ``ShardingPlan`` for the EBC at :data:`EBC_PATH` inside ``module``."""
    from torchrec.distributed.sharding_plan import (column_wise, construct_module_sharding_plan,
                                                    data_parallel, row_wise, table_row_wise,
                                                    table_wise)
    from torchrec.distributed.types import ShardingPlan
    ebc = module.get_submodule(EBC_PATH)
    names = [c.name for c in ebc.embedding_bag_configs()]
    if sharding == "auto":
        return _planner_plan(module, names, world_size, local_size, device_type, local_batch,
                             pooling, pg)
    if sharding not in SHARDING_TYPES:
        raise ConfigError(f"--sharding must be auto or one of {', '.join(SHARDING_TYPES)}, got {sharding!r}")
    if sharding == "column_wise" and (dim % world_size or (dim // world_size) % 4):
        raise ConfigError(f"column_wise splits each table into {world_size} column blocks of a multiple "
                          f"of 4 columns (torchrec): --embedding-dim {dim} does not; use a multiple of "
                          f"{4 * world_size}")
    if sharding == "table_row_wise" and (local_size < 1 or world_size % local_size):
        raise ConfigError(f"table_row_wise needs whole hosts: {world_size} ranks are not a multiple of "
                          f"{local_size} ranks per host")
    hosts = max(1, world_size // max(local_size, 1))
    # a function of the table only (never of this process's node): every rank builds the same plan
    gens = {"table_wise": lambda i: table_wise(rank=i % world_size),
            "row_wise": lambda i: row_wise(),
            "column_wise": lambda i: column_wise(ranks=list(range(world_size))),
            "table_row_wise": lambda i: table_row_wise(host_index=i % hosts),
            "data_parallel": lambda i: data_parallel()}
    mp = construct_module_sharding_plan(ebc, {n: gens[sharding](i) for i, n in enumerate(names)},
                                        local_size=local_size, world_size=world_size,
                                        device_type=device_type)
    return ShardingPlan({EBC_PATH: mp})


def _planner_plan(module, names, world_size, local_size, device_type, local_batch, pooling, pg):
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.types import ParameterConstraints, PlannerError
    kw = {}
    if device_type == "cuda":
        kw["hbm_cap"] = torch.cuda.get_device_properties(0).total_memory
    else:
        kw["ddr_cap"] = host_memory_bytes() // max(local_size, 1)
    if pg is not None:  # every rank plans alone, so every rank plans from the smallest memory of any
        from graphdist import comm
        cap = next(iter(kw))
        kw[cap] = min(int(c) for c in comm.all_gather_json(int(kw[cap]), pg))
    topo = Topology(world_size=world_size, local_world_size=local_size,
                    compute_device=device_type, **kw)
    constraints = {n: ParameterConstraints(pooling_factors=[max(float(p), 1e-3)])
                   for n, p in zip(names, pooling)}
    planner = EmbeddingShardingPlanner(topology=topo, batch_size=local_batch,
                                       constraints=constraints)
    from torchrec.distributed.sharding_plan import get_default_sharders
    sharders = get_default_sharders()
    try:  # on every rank, from the same inputs (not torchrec's collective_plan, which pickles rank
        return planner.plan(module, sharders)  # 0's plan to the others); the plans' digests are compared
    except PlannerError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"torchrec's planner found no plan that fits {world_size} rank(s) of "
                          f"{fmt_bytes(kw.get('hbm_cap', kw.get('ddr_cap', 0)))}: {first}") from e


class IdStats:
    """Id statistics of the training data: ids per sample and a sample of ids, per feature."""

    def __init__(self, pooling: list[float], ids: list[np.ndarray]):
        self.pooling = [float(p) for p in pooling]
        """Mean number of ids per sample, per feature."""
        self.ids = ids
        """A sample of (hashed) ids per feature, to estimate how lookups spread over row blocks."""

    def row_fraction(self, f: int, r0: int, r1: int) -> float:
        a = self.ids[f]
        return float(((a >= r0) & (a < r1)).mean()) if a.size else 0.0

    def distinct(self, f: int, r0: int, r1: int, samples: float) -> float:
        """Expected distinct rows in ``[r0, r1)`` of feature ``f`` that ``samples`` consecutive
        samples look up: the mean over the sample's consecutive runs of that many samples (all
        of it when it holds fewer, scaled up by the ids missing)."""
        a = self.ids[f]
        if not a.size or samples <= 0:
            return 0.0
        per = max(1, int(round(samples * max(self.pooling[f], 1e-9))))
        runs = [a[i:i + per] for i in range(0, max(a.size - per, 0) + 1, per)] if a.size >= per else [a]
        counts = [np.unique(x[(x >= r0) & (x < r1)]).size for x in runs[:64]]
        return float(np.mean(counts)) * (per / a.size if a.size < per else 1.0)


def describe_plan(plan, num_embeddings: list[int], dim: int, world_size: int, global_batch: int,
                  stats: IdStats, optimizer: str) -> dict:
    """Per-table and per-rank summary of a ``ShardingPlan`` over ``world_size`` ranks that split
    ``global_batch`` evenly (JSON-ready).

    Per rank: ``embedding_bytes`` (weights + optimizer state; data_parallel also its gradient),
    ``lookups_per_batch``, ``a2a_bytes_per_batch`` (forward all-to-all, sent + received: ids and
    lengths as int64, pooled rows as float32), ``a2a_bytes_per_step`` (forward + backward: the
    pooled gradients travel back), ``allreduce_bytes_per_batch`` (data_parallel gradients) and
    ``sync_bytes_per_sync`` (the fused shards' weights + optimizer state: what a replica sync
    all-reduces; :func:`expand_2d` keeps it only when there are replicas)."""
    mp = plan.plan[EBC_PATH]
    W, b = world_size, global_batch / world_size
    per_rank = [{"rank": r, "embedding_bytes": 0, "lookups_per_batch": 0.0, "a2a_bytes_per_batch": 0.0,
                 "a2a_bytes_per_step": 0.0, "a2a_group_size": W, "allreduce_bytes_per_batch": 0,
                 "sync_bytes_per_sync": 0} for r in range(W)]

    def a2a(r, ids, pooled):
        per_rank[r]["a2a_bytes_per_batch"] += ids + pooled
        per_rank[r]["a2a_bytes_per_step"] += ids + 2 * pooled

    tables = {}
    for i, n in enumerate(num_embeddings):
        name = f"t_{i}"
        ps = mp[name]
        st = ps.sharding_type
        p = stats.pooling[i]
        shards = ([] if ps.sharding_spec is None else
                  [(s.placement.rank(), s.shard_offsets, s.shard_sizes) for s in ps.sharding_spec.shards])
        ranks = sorted({s[0] for s in shards}) if shards else list(range(W))
        tables[name] = {"type": st, "ranks": ranks, "kernel": ps.compute_kernel, "rows": int(n),
                        "dim": dim, "pooling": round(p, 3)}
        if st == "data_parallel":
            for r in range(W):
                pr = per_rank[r]
                pr["embedding_bytes"] += 4 * (n * dim + optimizer_state_floats(optimizer, n, dim) + n * dim)
                pr["lookups_per_batch"] += b * p
                pr["allreduce_bytes_per_batch"] += 4 * n * dim
            continue
        for (r, off, size) in shards:
            rows, cols = size
            nbytes = 4 * (rows * cols + optimizer_state_floats(optimizer, rows, cols))
            per_rank[r]["embedding_bytes"] += nbytes
            per_rank[r]["sync_bytes_per_sync"] += nbytes
        if st in ("table_wise", "column_wise"):
            for (o, off, size) in shards:
                d = size[1]
                per_rank[o]["lookups_per_batch"] += global_batch * p
                for r in range(W):  # the owner receives every other rank's ids and sends back pooled rows
                    k = (W - 1) if r == o else 1
                    a2a(r, k * b * (p + 1) * ID_BYTES, k * b * 4 * d)
        else:  # row_wise, table_row_wise: ids bucketised by row block, pooled partial sums reduce-scattered
            group = [s[0] for s in shards]
            frac = {r: stats.row_fraction(i, off[0], off[0] + size[0]) for (r, off, size) in shards}
            n_g = len(group)
            for r in group:
                per_rank[r]["lookups_per_batch"] += global_batch * p * frac[r]
                sent = sum(b * (p * frac[q] + 1) * ID_BYTES for q in group if q != r)
                recv = (n_g - 1) * b * (p * frac[r] + 1) * ID_BYTES
                a2a(r, sent + recv, 2 * (n_g - 1) * b * 4 * dim)
    for pr in per_rank:
        pr["lookups_per_batch"] = round(pr["lookups_per_batch"], 1)
        pr["a2a_bytes_per_batch"] = int(round(pr["a2a_bytes_per_batch"]))
        pr["a2a_bytes_per_step"] = int(round(pr["a2a_bytes_per_step"]))
    return {"tables": tables, "ranks": per_rank, "global_batch": global_batch, "optimizer": optimizer}


def expand_2d(desc: dict, layout) -> dict:
    """The plan of one S-rank sharding group (``desc`` from :func:`describe_plan` with the
    group's batch) as the whole job's report: ``layout`` (:class:`embeddings.twod.Layout`) adds
    the sharding and replica groups, and every global rank gets the row of its group rank, with
    ``sharding_group`` and ``group_rank``. Replica sync bytes are zero without replicas."""
    ranks = []
    for r in range(layout.world):
        g, j = layout.position(r)
        row = {**desc["ranks"][j], "rank": r, "sharding_group": g, "group_rank": j}
        if layout.groups == 1:
            row["sync_bytes_per_sync"] = 0
        ranks.append(row)
    return {**desc, "ranks": ranks, "global_batch": desc["global_batch"] * layout.groups,
            "group_batch": desc["global_batch"], **layout.describe()}


def plan_hash(plan, groups: dict | None = None) -> str:
    """A digest of everything that places a table (type, kernel, ranks, shard offsets, sizes and
    placements): equal on every rank iff the ranks built the same plan. ``groups`` (2D: the
    sharding and replica groups, :meth:`embeddings.twod.Layout.describe`) places the group ranks
    of the plan on global ranks, and is hashed with it."""
    items = {} if groups is None else {"2d": groups}
    for path, mp in sorted(plan.plan.items()):
        for name, ps in sorted(mp.items()):
            shards = ([] if ps.sharding_spec is None else
                      [(str(s.placement), list(s.shard_offsets), list(s.shard_sizes))
                       for s in ps.sharding_spec.shards])
            items[f"{path}.{name}"] = [ps.sharding_type, ps.compute_kernel, list(ps.ranks or []), shards]
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:16]


def check_memory(desc: dict, budget_bytes: int) -> None:
    """Raise :class:`ConfigError` when a rank's embedding bytes exceed ``budget_bytes``."""
    worst = max(desc["ranks"], key=lambda r: r["embedding_bytes"])
    if worst["embedding_bytes"] > budget_bytes:
        where = f"rank {worst['rank']}"
        if desc.get("sparse_groups", 1) > 1:
            where += f" (of a {len(desc['sharding_groups'][0])}-rank sharding group)"
        raise ConfigError(f"sharding plan does not fit: {where} needs {fmt_bytes(worst['embedding_bytes'])} "
                          f"of embeddings and optimizer state, budget is {fmt_bytes(budget_bytes)} per rank "
                          "(--memory-budget-gb)")


def memory_line(desc: dict, budget_bytes: int) -> str:
    """What the plan holds per rank, said before anything is allocated."""
    worst = max(desc["ranks"], key=lambda r: r["embedding_bytes"])
    copies = desc.get("sparse_groups", 1)
    return (f"memory per rank: up to {fmt_bytes(worst['embedding_bytes'])} of embeddings and optimizer state "
            f"(rank {worst['rank']}{f', one of {copies} replicas' if copies > 1 else ''}), budget "
            f"{fmt_bytes(budget_bytes)} (--memory-budget-gb)")


def format_plan(desc: dict) -> str:
    """The plan as text: the tables, then the ranks (and the 2D groups when there are replicas)."""
    lines = [f"{'table':<6} {'rows':>9} {'dim':>4} {'pool':>5}  {'type':<15} {'kernel':<7} ranks"]
    for name, t in desc["tables"].items():
        ranks = ",".join(map(str, t["ranks"]))
        lines.append(f"{name:<6} {t['rows']:>9} {t['dim']:>4} {t['pooling']:>5.2f}  {t['type']:<15} "
                     f"{t['kernel']:<7} {ranks}")
    two_d = desc.get("sparse_groups", 1) > 1
    if two_d:
        fmt = lambda gs: " ".join("{" + ",".join(map(str, g)) + "}" for g in gs)  # noqa: E731
        lines.append(f"2D: {len(desc['sharding_groups'])} replicas of a {len(desc['sharding_groups'][0])}-rank "
                     f"sharding group (table ranks above are group ranks); sharding groups "
                     f"{fmt(desc['sharding_groups'])}, replica groups {fmt(desc['replica_groups'])} "
                     f"(--sparse-layout {desc.get('sparse_layout', 'hosts')})")
    head = (f"{'rank':<5} {'emb+optim':>11} {'lookups/batch':>14} {'a2a group':>9} {'a2a/step':>10} "
            f"{'allreduce/batch':>16}" + (f" {'sync/sync':>10}" if two_d else ""))
    lines.append(head + f"   (global batch {desc['global_batch']}, optimizer {desc['optimizer']})")
    for r in desc["ranks"]:
        lines.append(f"{r['rank']:<5} {fmt_bytes(r['embedding_bytes']):>11} {r['lookups_per_batch']:>14.1f} "
                     f"{r['a2a_group_size']:>9} {fmt_bytes(r['a2a_bytes_per_step']):>10} "
                     f"{fmt_bytes(r['allreduce_bytes_per_batch']):>16}"
                     + (f" {fmt_bytes(r['sync_bytes_per_sync']):>10}" if two_d else ""))
    return "\n".join(lines)
