"""Everything before the first step: data splits, checks, the plan, the sharded model, optimizers.

    train, ev = load_splits(cfg)
    validate(cfg, train, world)
    model = build_sharded(cfg, train, device)     # ShardedModel: dmp, opt, plan description,
                                                  # layout, sync (2D) and the plan digest

``--sparse-groups 1``: one ``DistributedModelParallel`` over all W ranks. ``G > 1``: the plan is
made for one sharding group of S = W/G ranks and the model is replicated G times
(:mod:`embeddings.twod`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from embeddings.config import DLRMTrainConfig
from embeddings.data import ID_STATS_ROWS, ClickData, id_stats, load_click_data, split_eval
from embeddings.model import LossWrapper, build_model, init_rows, table_name
from embeddings.sharding import (EBC_PATH, build_plan, check_memory, describe_plan, expand_2d, memory_line,
                                 optimizer_state_floats, plan_hash)
from embeddings.twod import Layout, build_dmp_2d, layout_for
from graphdist import comm
from graphdist.errors import ConfigError
from graphdist.fmt import fmt_bytes

MIN_STEPS_PER_EPOCH = 50
"""Fewer optimizer steps than this per epoch draw a warning (a large batch on a small file)."""
ROWS_PER_USED_ROW = 10
"""Tables holding more than this many times the rows the training data can touch draw a warning."""


def load_splits(cfg: DLRMTrainConfig) -> tuple[ClickData, ClickData]:
    kw = dict(num_embeddings_per_feature=cfg.num_embeddings_per_feature,
              num_embeddings_cap=cfg.num_embeddings, skip_bad_lines=cfg.skip_bad_lines,
              cache_dir=cfg.cache_dir)
    data = load_click_data(cfg.spec, **kw)
    if cfg.eval_data:
        ev = load_click_data(cfg.eval_data, **kw)
        if _widths(ev) != _widths(data):
            raise ConfigError(f"--eval-data {cfg.eval_data} has {_widths(ev, True)} but the training data {cfg.spec} "
                              f"has {_widths(data, True)}: evaluate on data of the training's columns")
        ev.num_embeddings = data.num_embeddings
        return data, ev
    return split_eval(data, cfg.eval_fraction)


def _widths(data: ClickData, text: bool = False):
    """The input's dense and id features (a ``clicks:`` log's by name), or ``text`` saying them."""
    cols = data.columns or {}
    w = (data.dense.shape[1], len(data.num_embeddings), cols.get("dense"), cols.get("sparse"))
    if not text:
        return w
    names = f" (dense {', '.join(w[2])}; ids {', '.join(w[3])})" if cols else ""
    return f"{w[0]} dense and {w[1]} id features{names}"


def validate(cfg: DLRMTrainConfig, train: ClickData, world_size: int) -> None:
    cfg.validate()
    if cfg.sparse_groups != "auto":
        layout_for(world_size, cfg.sparse_groups)  # G divides W
    if cfg.batch_size < 1 or cfg.batch_size % world_size:
        raise ConfigError(f"--batch-size {cfg.batch_size} must be a positive multiple of the world size {world_size}")
    if cfg.eval_batch_size < 1:
        raise ConfigError(f"--eval-batch-size must be >= 1, got {cfg.eval_batch_size}")
    if len(train) < cfg.batch_size:
        raise ConfigError(f"{len(train)} training rows are fewer than one global batch of {cfg.batch_size}")
    if cfg.steps is None and cfg.epochs < 1:
        raise ConfigError(f"--epochs must be >= 1, got {cfg.epochs}")
    if cfg.sparse_groups != "auto" and cfg.sparse_groups > 1 and cfg.embedding_optimizer == "adam":
        raise ConfigError("--sparse-groups > 1 averages the replicas' row-wise/element-wise AdaGrad "
                          "state ('sum', as DMPCollection.sync); --embedding-optimizer adam has none: use "
                          "rowwise_adagrad, rowwise_adagrad_scaled, adagrad or sgd")


def touchable_rows(train: ClickData) -> tuple[list[int], bool]:
    """``(rows per table the training rows can touch, exact)``: the distinct hashed ids per
    feature, counted, when the split is at most the :data:`~embeddings.data.ID_STATS_ROWS` rows
    :func:`~embeddings.data.id_stats` reads anyway (``exact``); on more rows the ids themselves
    (rows x ids per row, from the bag lengths), an upper bound read without touching the ids.
    Never more than the table."""
    n, sizes = len(train), [int(x) for x in train.num_embeddings]
    if n <= ID_STATS_ROWS:
        return [min(r, int(np.unique(ids).size)) for r, ids in zip(sizes, id_stats(train).ids)], True
    ids = (np.asarray(train.lengths).sum(0) if train.lengths is not None
           else np.full(len(sizes), n * train.cat.shape[2]))
    return [min(r, int(c)) for r, c in zip(sizes, ids)], False


def table_warning(cfg: DLRMTrainConfig, train: ClickData) -> str | None:
    """A warning when the tables hold more than :data:`ROWS_PER_USED_ROW` times the rows the
    training data can touch (:func:`touchable_rows`): the others never get a gradient, yet take
    memory (and, with --sparse-groups on CUDA, replica-sync time). It names the sizes, the bound
    and sizes that fit with room to spare: one ``--num-embeddings`` for every table holding half
    that many times the touched rows when that is at least the busiest feature's ids (hashing
    ids into fewer rows merges some, at worst about a third at one row per id, so the suggested
    size does not warn in turn), else a ``--num-embeddings-per-feature`` list of twice each
    feature's ids."""
    sizes = [int(x) for x in train.num_embeddings]
    used, exact = touchable_rows(train)
    total, touch = sum(sizes), sum(used)
    if total <= ROWS_PER_USED_ROW * touch:
        return None
    d, opt = cfg.model.embedding_dim, state_optimizer(cfg.embedding_optimizer)
    nbytes = sum(4 * (r * d + optimizer_state_floats(opt, r, d)) for r in sizes)
    bound = (f"the {len(train):,} training rows touch only {touch:,} of them (distinct ids, counted)" if exact else
             f"the {len(train):,} training rows can touch at most {touch:,} of them (ids per row x rows)")
    half = ROWS_PER_USED_ROW // 2
    one = _two_digits(half * touch // len(sizes), up=False)
    if one >= max(used):
        advice = (f"--num-embeddings {one} would fit ({len(sizes)} x {one:,} rows: {half}x the rows the data "
                  f"{'touches' if exact else 'can touch'}, and at least the busiest feature's {max(used):,} ids)")
    else:
        per = ",".join(str(min(r, _two_digits(2 * u))) for r, u in zip(sizes, used))
        advice = f"--num-embeddings-per-feature {per} (twice each feature's ids) would fit"
    return (f"the {len(sizes)} tables hold {total:,} rows ({fmt_bytes(nbytes)} of weights and optimizer state) "
            f"but {bound}: {total / touch:.0f}x more rows than the data uses; the rest never train and "
            f"only take memory; {advice}")


def _two_digits(x: int, up: bool = True) -> int:
    """``x`` rounded to two significant digits, up (35686 -> 36000) or down (-> 35000); at least 1."""
    step = 10 ** max(len(str(int(x))) - 2, 0)
    return max(1, (-(-int(x) // step) if up else int(x) // step) * step)


def epoch_warning(cfg: DLRMTrainConfig, n_train: int, world: int | None = None) -> str | None:
    """A warning when one epoch is fewer than :data:`MIN_STEPS_PER_EPOCH` steps (the model
    barely trains), naming the largest ``--batch-size`` (a multiple of the ``world`` size,
    default: the current process group's) that gives at least that many steps per epoch.

    The advice is a smaller batch, not more epochs: more passes over the same few rows overfit
    them (issue 16, 10k real Criteo rows: ``--epochs 5`` at batch 256 lowered the AUC from 0.7285
    to 0.6122, ``--batch-size 64`` raised it to 0.7394; issue 38: 5 epochs at batch 2048 raised
    the held-out NE to 2.04, worse than predicting the click rate, NE 1)."""
    per_epoch = n_train // cfg.batch_size
    if per_epoch >= MIN_STEPS_PER_EPOCH:
        return None
    w = world if world is not None else comm.world()[1]
    best = max(n_train // MIN_STEPS_PER_EPOCH // w * w, w)
    if n_train // best >= MIN_STEPS_PER_EPOCH:
        advice = (f"use --batch-size {best} or smaller for >= {MIN_STEPS_PER_EPOCH} steps per epoch "
                  f"({n_train // best} at {best})")
    else:
        advice = (f"even --batch-size {best} (one row per rank) gives only {n_train // best} steps per "
                  f"epoch: use more training rows")
    return (f"one epoch is only {per_epoch} steps ({n_train} training rows / --batch-size "
            f"{cfg.batch_size}); the model will barely train: {advice}; more --epochs will not help: "
            f"more passes over the same few rows overfit them (on 10k real Criteo rows, 5 epochs gave "
            f"a held-out NE of 2.04: worse than always predicting the click rate)")


def total_steps(cfg: DLRMTrainConfig, n_train: int) -> int:
    return int(cfg.steps) if cfg.steps is not None else cfg.epochs * (n_train // cfg.batch_size)


def optimizer_class(name: str, lr: float, groups: int = 1):
    """``(class, kwargs)``; torchrec maps these onto FBGEMM's fused kernels (EXACT_* / ADAM).

    ``rowwise_adagrad_scaled`` (momentum-scaled row-wise AdaGrad, named after arXiv 2508.03854,
    whose Algorithm 1 was not checked: see tests/test_dlrm_scaled_adagrad.py) steps by
    ``lr / (sqrt(v / c) + eps)`` with ``c = groups``; that is exactly FBGEMM's
    EXACT_ROWWISE_ADAGRAD with ``lr * sqrt(c)`` and ``eps * sqrt(c)`` (the state ``v`` is the
    same, so the replica sync averages it unchanged); there is no fused kernel of its own."""
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad
    eps = 1e-8
    if name == "rowwise_adagrad_scaled":
        c = math.sqrt(groups)
        return RowWiseAdagrad, {"lr": lr * c, "eps": eps * c}
    return {"rowwise_adagrad": (RowWiseAdagrad, {"lr": lr, "eps": eps}),
            "adagrad": (torch.optim.Adagrad, {"lr": lr, "eps": eps}),
            "adam": (torch.optim.Adam, {"lr": lr}),
            "sgd": (torch.optim.SGD, {"lr": lr})}[name]


def state_optimizer(name: str) -> str:
    """The optimizer whose state the plan report counts (the scaled variant keeps the same)."""
    return "rowwise_adagrad" if name == "rowwise_adagrad_scaled" else name


def memory_budget(cfg: DLRMTrainConfig, device: torch.device, local_size: int) -> int:
    if cfg.memory_budget_gb is not None:
        return int(cfg.memory_budget_gb * 2**30)
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    from graphdist.memory import host_memory_bytes
    return host_memory_bytes() // max(local_size, 1)


def host_room(local_size: int, started: bool) -> int | None:
    """Bytes this host has for its ``local_size`` ranks' tables (embeddings and optimizer
    state): ``MemAvailable`` (or its memory cgroup's room) while the ranks run, what they hold
    already being in use; before they start (the launcher's check), less what each will hold
    before its tables, taken as what this process holds now (the runtime and the data). None
    where the OS does not say."""
    from graphdist.memory import resident_bytes
    from partitioners.sysmem import mem_available
    avail, rss = mem_available(), resident_bytes() or 0
    if avail is None:
        return None
    return avail if started else avail + rss - local_size * rss


def check_host_memory(desc: dict, local_size: int) -> None:
    """On every rank, before the tables are placed (CPU): the ranks of each host (host-major)
    together need their embeddings and optimizer state; stop every rank with one line when
    that is more than the host has available (:func:`host_room`, the least any of its ranks
    saw)."""
    rank, world = comm.world()
    L = max(1, min(local_size, world))
    room = host_room(L, True)
    mine = torch.tensor([[desc["ranks"][rank]["embedding_bytes"], -1 if room is None else room]], dtype=torch.float64)
    seen = comm.all_gather_rows(mine).tolist()
    for h in range(world // L):
        ranks = seen[h * L:(h + 1) * L]
        rooms = [r[1] for r in ranks if r[1] >= 0]
        need = sum(r[0] for r in ranks)
        if rooms and need > min(rooms):
            raise ConfigError(f"the sharding plan does not fit in memory: the {L} rank(s) of host {h} need "
                              f"{fmt_bytes(need)} of embeddings and optimizer state (up to "
                              f"{fmt_bytes(max(r[0] for r in ranks))} per rank) and the host has {fmt_bytes(min(rooms))} "
                              "available; use fewer --sparse-groups, more ranks or hosts, smaller tables or "
                              "a smaller --embedding-dim")


def plan_for(cfg: DLRMTrainConfig, train: ClickData, world_size: int, local_size: int,
             device_type: str, pg=None):
    """``(module, plan, description)`` - the unsharded module with tables on ``meta``.

    ``world_size`` is the whole job; with ``--sparse-groups G`` the plan is made for one
    sharding group of ``world_size / G`` ranks (group ranks) and the description covers every
    global rank (:func:`~embeddings.sharding.expand_2d`)."""
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    layout = layout_for(world_size, cfg.sparse_groups, local_size, cfg.sparse_layout)
    S = layout.size
    module = LossWrapper(build_model(cfg.model, train.dense.shape[1], train.num_embeddings, cfg.seed,
                                     ebc_device="meta"))
    # the fused optimizer must be attached before planning: it makes the planner pick FUSED kernels
    cls, kw = optimizer_class(cfg.embedding_optimizer, cfg.embedding_lr, cfg.sparse_groups)
    apply_optimizer_in_backward(cls, module.get_submodule(EBC_PATH).parameters(), kw)
    stats = id_stats(train)
    group_local = layout.node_group_size if cfg.sparse_groups > 1 else local_size
    group_batch = cfg.batch_size // cfg.sparse_groups
    plan = build_plan(module, cfg.sharding, train.num_embeddings, cfg.model.embedding_dim,
                      S, group_local, device_type, cfg.batch_size // world_size, stats.pooling, pg)
    desc = describe_plan(plan, train.num_embeddings, cfg.model.embedding_dim, S, group_batch, stats,
                         state_optimizer(cfg.embedding_optimizer))
    desc = expand_2d(desc, layout)
    fused = [n for n, t in desc["tables"].items() if t["kernel"] == "fused"]
    if device_type == "cpu" and cfg.embedding_optimizer == "adam" and fused:
        # FBGEMM's CPU kernels assert "Optimizer adam is not supported in CPU mode"
        raise ConfigError(f"--embedding-optimizer adam has no fused CPU kernel in FBGEMM ({len(fused)} "
                          "sharded tables); use rowwise_adagrad, adagrad or sgd on CPU, "
                          "or --sharding data_parallel, or a GPU")
    return module, plan, desc


def fill_embeddings(dmp: torch.nn.Module, seed: int, num_embeddings: list[int], dim: int) -> None:
    """Write :func:`init_rows` into every local shard (or replica) of every table: ShardedTensor
    (1D), DTensor over local shards (2D) or a plain replicated table."""
    sd = dmp.state_dict()
    with torch.no_grad():
        for i, n in enumerate(num_embeddings):
            key = [k for k in sd if k.endswith(f"embedding_bags.{table_name(i)}.weight")]
            if len(key) != 1:
                raise RuntimeError(f"table {table_name(i)}: state_dict keys {key}")
            t = sd[key[0]]
            if hasattr(t, "to_local"):  # DTensor
                t = t.to_local()
                if hasattr(t, "local_shards"):
                    for s, (r0, c0) in zip(t.local_shards(), t.local_offsets()):
                        s.copy_(init_rows(seed, i, n, dim, r0, r0 + s.shape[0], c0, c0 + s.shape[1]))
                    continue
            if hasattr(t, "local_shards"):  # ShardedTensor
                for s in t.local_shards():
                    (r0, c0), (nr, nc) = s.metadata.shard_offsets, s.metadata.shard_sizes
                    s.tensor.copy_(init_rows(seed, i, n, dim, r0, r0 + nr, c0, c0 + nc))
            else:
                t.copy_(init_rows(seed, i, n, dim, 0, n, 0, dim))


@dataclass
class ShardedModel:
    """The sharded model of one rank and what the trainer needs around it."""

    dmp: torch.nn.Module
    """DistributedModelParallel (or DMPCollection on CUDA with --sparse-groups > 1)."""
    opt: object
    """CombinedOptimizer: fused tables (a view), dense layers, replicated (data_parallel) tables."""
    desc: dict
    """The plan report (:func:`~embeddings.sharding.describe_plan`, every global rank)."""
    layout: Layout
    """Sharding and replica groups (G = 1: one group of all ranks)."""
    sync: object = None
    """``sync()`` averaging the replicas (None at G = 1)."""
    plan_digest: str = ""
    """:func:`~embeddings.sharding.plan_hash` of the plan, checked equal on every rank."""

    def __iter__(self):  # dmp, opt, desc = build_sharded(...)
        return iter((self.dmp, self.opt, self.desc))


def shard(module, plan, device: torch.device, layout: Layout, pg=None):
    """``(dmp, sync)``: ``module`` sharded by ``plan``. One group (G = 1): torchrec's
    ``DistributedModelParallel`` over ``pg`` (default: the whole job), no sync. G > 1: the plan
    is for one sharding group and the model is replicated (:func:`embeddings.twod.build_dmp_2d`)."""
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.types import ShardingEnv
    if layout.groups > 1:
        return build_dmp_2d(module, plan, device, layout)
    dmp = DistributedModelParallel(module, env=ShardingEnv.from_process_group(pg or dist.group.WORLD),
                                   device=device, plan=plan)
    return dmp, None


def make_optimizer(cfg: DLRMTrainConfig, dmp):
    """One CombinedOptimizer: the fused tables (stepped inside backward), the dense layers and
    the data_parallel tables."""
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter
    dcls, dkw = optimizer_class(cfg.dense_optimizer, cfg.dense_lr)
    rest = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    # data_parallel tables come back from DMP as plain replicated parameters (DDP all-reduces
    # their gradients over all ranks); they get the embedding optimizer, unfused, stepped with the
    # dense one. They are not replicas that drift apart, so the scaled variant is not scaled there.
    replicated = {k: p for k, p in rest.items() if "embedding_bags" in k}
    dense = {k: p for k, p in rest.items() if k not in replicated}
    parts = [("fused", dmp.fused_optimizer),
             ("dense", KeyedOptimizerWrapper(dense, lambda params: dcls(params, **dkw)))]
    if replicated:
        ecls, ekw = optimizer_class(cfg.embedding_optimizer, cfg.embedding_lr, 1)
        parts.append(("replicated_embeddings",
                      KeyedOptimizerWrapper(replicated, lambda params: ecls(params, **ekw))))
    return CombinedOptimizer(parts)


def build_sharded(cfg: DLRMTrainConfig, train: ClickData, device: torch.device, pg=None) -> ShardedModel:
    """The sharded model on the current process group (every rank must call it); the plan must
    be the same on every rank (checked by its digest before anything is placed). Ranks per host
    (the planner's topology, the 2D layout) are the job's agreed placement's
    (:func:`graphdist.hosts.placement`; 1 where hosts run unequal or interleaved ranks)."""
    from graphdist.hosts import placement
    pg = pg or dist.group.WORLD
    world = comm.world(pg)[1]
    where = placement()
    local = (where.ranks_per_host or 1) if world == where.world else 1  # ranks per host
    layout = layout_for(world, cfg.sparse_groups, local, cfg.sparse_layout)
    module, plan, desc = plan_for(cfg, train, world, local, device.type, pg)
    digest = plan_hash(plan, layout.describe() if layout.groups > 1 else None)
    comm.check_same(digest, "the torchrec sharding plan (digest)")
    budget = memory_budget(cfg, device, local)
    check_memory(desc, budget)
    if device.type == "cpu":
        check_host_memory(desc, local)
    if comm.world()[0] == 0 and cfg.print_plan:
        from graphdist.log import get_logger
        get_logger("graphdist.dlrm").info(memory_line(desc, budget))
    dmp, sync = shard(module, plan, device, layout, pg)
    fill_embeddings(dmp, cfg.seed, train.num_embeddings, cfg.model.embedding_dim)
    return ShardedModel(dmp, make_optimizer(cfg, dmp), desc, layout, sync, digest)
