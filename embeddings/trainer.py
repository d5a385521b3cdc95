"""Sharded DLRM training: DistributedModelParallel, fused embedding optimizer, train pipeline, eval.

Per step (global batch B, W ranks, b = B / W)::

    rank r: rows [t*B + r*b, t*B + (r+1)*b)  ──►  Batch(dense [b,13], KJT 26 keys, labels [b])
      input all-to-all (ids to the table owners) ─► lookups ─► output all-to-all (pooled [b,26,D])
      ─► dense arch + interaction + over arch ─► mean BCE over b
      backward: dense grads all-reduced (DDP, averaged); embedding grads returned by all-to-all,
      divided by W (torchrec's gradient division) and applied in the fused kernel
    => exactly the global-batch-mean update, whatever W is.

The loss reported per step is the global-batch mean (local means averaged over ranks once at the
end of the run, not per step, so logging costs no collective).
"""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from embeddings.config import DLRMTrainConfig
from embeddings.data import ClickData, id_stats, load_click_data, make_batch, split_eval
from embeddings.model import LossWrapper, build_model, init_rows, table_name
from embeddings.sharding import EBC_PATH, build_plan, check_memory, describe_plan, format_plan
from graphdist import comm
from graphdist.errors import ConfigError
from graphdist.runtime import get_logger


def load_splits(cfg: DLRMTrainConfig) -> tuple[ClickData, ClickData]:
    kw = dict(num_embeddings_per_feature=cfg.num_embeddings_per_feature,
              num_embeddings_cap=cfg.num_embeddings, skip_bad_lines=cfg.skip_bad_lines,
              cache_dir=cfg.cache_dir)
    data = load_click_data(cfg.spec, **kw)
    if cfg.eval_data:
        ev = load_click_data(cfg.eval_data, **kw)
        ev.num_embeddings = data.num_embeddings
        return data, ev
    return split_eval(data, cfg.eval_fraction)


def validate(cfg: DLRMTrainConfig, train: ClickData, world_size: int) -> None:
    cfg.validate()
    if cfg.batch_size < 1 or cfg.batch_size % world_size:
        raise ConfigError(f"--batch-size {cfg.batch_size} must be a positive multiple of the world size {world_size}")
    if cfg.eval_batch_size < 1:
        raise ConfigError(f"--eval-batch-size must be >= 1, got {cfg.eval_batch_size}")
    if len(train) < cfg.batch_size:
        raise ConfigError(f"{len(train)} training rows are fewer than one global batch of {cfg.batch_size}")
    if cfg.steps is None and cfg.epochs < 1:
        raise ConfigError(f"--epochs must be >= 1, got {cfg.epochs}")


def total_steps(cfg: DLRMTrainConfig, n_train: int) -> int:
    return int(cfg.steps) if cfg.steps is not None else cfg.epochs * (n_train // cfg.batch_size)


def optimizer_class(name: str, lr: float):
    """``(class, kwargs)``; torchrec maps these onto FBGEMM's fused kernels (EXACT_* / ADAM)."""
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad
    return {"rowwise_adagrad": (RowWiseAdagrad, {"lr": lr, "eps": 1e-8}),
            "adagrad": (torch.optim.Adagrad, {"lr": lr, "eps": 1e-8}),
            "adam": (torch.optim.Adam, {"lr": lr}),
            "sgd": (torch.optim.SGD, {"lr": lr})}[name]


def memory_budget(cfg: DLRMTrainConfig, device: torch.device, local_size: int) -> int:
    if cfg.memory_budget_gb is not None:
        return int(cfg.memory_budget_gb * 2**30)
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    from graphdist.runtime import host_memory_bytes
    return host_memory_bytes() // max(local_size, 1)


def plan_for(cfg: DLRMTrainConfig, train: ClickData, world_size: int, local_size: int,
             device_type: str, pg=None):
    """``(module, plan, description)`` - the unsharded module with tables on ``meta``."""
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    module = LossWrapper(build_model(cfg.model, train.dense.shape[1], train.num_embeddings, cfg.seed,
                                     ebc_device="meta"))
    # the fused optimizer must be attached before planning: it makes the planner pick FUSED kernels
    cls, kw = optimizer_class(cfg.embedding_optimizer, cfg.embedding_lr)
    apply_optimizer_in_backward(cls, module.get_submodule(EBC_PATH).parameters(), kw)
    stats = id_stats(train)
    plan = build_plan(module, cfg.sharding, train.num_embeddings, cfg.model.embedding_dim,
                      world_size, local_size, device_type, cfg.batch_size // world_size,
                      stats.pooling, pg)
    desc = describe_plan(plan, train.num_embeddings, cfg.model.embedding_dim, world_size,
                         cfg.batch_size, stats, cfg.embedding_optimizer)
    fused = [n for n, t in desc["tables"].items() if t["kernel"] == "fused"]
    if device_type == "cpu" and cfg.embedding_optimizer == "adam" and fused:
        # FBGEMM's CPU kernels assert "Optimizer adam is not supported in CPU mode"
        raise ConfigError(f"--embedding-optimizer adam has no fused CPU kernel in FBGEMM ({len(fused)} "
                          "sharded tables); use rowwise_adagrad, adagrad or sgd on CPU, "
                          "or --sharding data_parallel, or a GPU")
    return module, plan, desc


def fill_embeddings(dmp: torch.nn.Module, seed: int, num_embeddings: list[int], dim: int) -> None:
    """Write :func:`init_rows` into every local shard (or replica) of every table."""
    sd = dmp.state_dict()
    with torch.no_grad():
        for i, n in enumerate(num_embeddings):
            key = [k for k in sd if k.endswith(f"embedding_bags.{table_name(i)}.weight")]
            if len(key) != 1:
                raise RuntimeError(f"table {table_name(i)}: state_dict keys {key}")
            t = sd[key[0]]
            if hasattr(t, "local_shards"):
                for s in t.local_shards():
                    (r0, c0), (nr, nc) = s.metadata.shard_offsets, s.metadata.shard_sizes
                    s.tensor.copy_(init_rows(seed, i, n, dim, r0, r0 + nr, c0, c0 + nc))
            else:
                t.copy_(init_rows(seed, i, n, dim, 0, n, 0, dim))


def build_sharded(cfg: DLRMTrainConfig, train: ClickData, device: torch.device, pg=None):
    """``(dmp, optimizer, plan description)`` on the current process group."""
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.types import ShardingEnv
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter
    pg = pg or dist.group.WORLD
    world = comm.world(pg)[1]
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    module, plan, desc = plan_for(cfg, train, world, local, device.type, pg)
    check_memory(desc, memory_budget(cfg, device, local))
    dmp = DistributedModelParallel(module, env=ShardingEnv.from_process_group(pg), device=device,
                                   plan=plan)
    fill_embeddings(dmp, cfg.seed, train.num_embeddings, cfg.model.embedding_dim)
    dcls, dkw = optimizer_class(cfg.dense_optimizer, cfg.dense_lr)
    if dcls.__name__ == "RowWiseAdagrad":  # pragma: no cover - not offered for dense layers
        raise ConfigError("rowwise_adagrad is an embedding optimizer")
    rest = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    # data_parallel tables come back from DMP as plain replicated parameters (DDP all-reduces
    # their gradients); they get the embedding optimizer, unfused, stepped with the dense one
    replicated = {k: p for k, p in rest.items() if "embedding_bags" in k}
    dense = {k: p for k, p in rest.items() if k not in replicated}
    parts = [("fused", dmp.fused_optimizer),
             ("dense", KeyedOptimizerWrapper(dense, lambda params: dcls(params, **dkw)))]
    if replicated:
        ecls, ekw = optimizer_class(cfg.embedding_optimizer, cfg.embedding_lr)
        parts.append(("replicated_embeddings",
                      KeyedOptimizerWrapper(replicated, lambda params: ecls(params, **ekw))))
    opt = CombinedOptimizer(parts)
    return dmp, opt, desc


def step_batches(data: ClickData, cfg: DLRMTrainConfig, steps: range, rank: int, world: int):
    """Batches of the given global steps (wrapping around the training rows every epoch)."""
    per_epoch = len(data) // cfg.batch_size
    for t in steps:
        yield make_batch(data, (t % per_epoch) * cfg.batch_size, cfg.batch_size, rank, world)[0]


def use_pipeline(cfg: DLRMTrainConfig, device: torch.device) -> bool:
    return cfg.pipeline if cfg.pipeline is not None else device.type == "cuda"


def make_pipeline(cfg: DLRMTrainConfig, dmp, opt, device: torch.device):
    """``TrainPipelineSparseDist`` over ``dmp`` when :func:`use_pipeline`, else None."""
    if not use_pipeline(cfg, device):
        return None
    from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
    return TrainPipelineSparseDist(dmp, opt, device, execute_all_batches=True)


def run_steps(dmp, opt, pipe, data: ClickData, cfg: DLRMTrainConfig, steps: range,
              device: torch.device, bar=None) -> list[float]:
    """Train on the given global steps; returns this rank's local losses.

    With a pipeline (``TrainPipelineSparseDist``) the input all-to-all of batch i+1 is started
    before the forward of batch i; the pipeline is drained and detached at the end, so the
    plain model is usable (eval, checkpoint) afterwards.
    """
    rank, world = comm.world()
    it = step_batches(data, cfg, steps, rank, world)
    out_losses: list[float] = []
    if pipe is not None:
        pipe.reset()
        while True:
            try:
                out = pipe.progress(it)
            except StopIteration:
                break
            out_losses.append(float(out[0]))
            if bar is not None:
                bar.update(1)
        pipe.detach()
    else:
        for batch in it:
            opt.zero_grad()
            loss, _ = dmp(batch.to(device))
            loss.backward()
            opt.step()
            out_losses.append(float(loss.detach()))
            if bar is not None:
                bar.update(1)
    return out_losses


@torch.no_grad()
def evaluate(dmp, data: ClickData, cfg: DLRMTrainConfig, device: torch.device) -> dict:
    """AUC / log loss / NE over the whole eval set: every rank's logits are gathered first."""
    from embeddings.metrics import click_metrics
    rank, world = comm.world()
    e = -(-cfg.eval_batch_size // world)  # per rank, rounded up
    E = e * world
    was = dmp.training
    dmp.eval()
    logits, labels = [], []
    for s in range(0, len(data), E):
        batch, n = make_batch(data, s, E, rank, world, pad_to=e)
        _, (_, lg, y) = dmp(batch.to(device))
        logits.append(lg[:n].float().cpu())
        labels.append(y[:n].float().cpu())
    dmp.train(was)
    local = torch.stack([torch.cat(logits), torch.cat(labels)], 1) if logits else torch.zeros(0, 2)
    # rows were handed out window by window; order does not matter for the metrics
    allv = comm.all_gather_rows(local).numpy()
    return click_metrics(allv[:, 1], allv[:, 0])


def train(cfg: DLRMTrainConfig, device: torch.device | None = None) -> dict:
    """Run training on the initialised default process group; returns the report (all ranks)."""
    from graphdist.checkpoint import Checkpointer
    log = get_logger("graphdist.dlrm")
    rank, world = comm.world()
    device = device or torch.device("cpu")
    if rank == 0 and any(s and s.startswith("criteo:") for s in (cfg.spec, cfg.eval_data)):
        load_splits(cfg)  # rank 0 builds the binary cache once, the others then map it
    comm.barrier()
    train_data, eval_data = load_splits(cfg)
    validate(cfg, train_data, world)
    T = total_steps(cfg, len(train_data))
    dmp, opt, desc = build_sharded(cfg, train_data, device)
    if rank == 0 and cfg.print_plan:
        print(format_plan(desc), flush=True)
    start, losses = 0, []
    ckpt = Checkpointer(cfg.checkpoint_dir, cfg.keep_checkpoints) if cfg.checkpoint_dir else None
    if cfg.resume:
        snap = ckpt.latest()
        if snap is None:
            log.info(f"no checkpoint in {cfg.checkpoint_dir}; starting from step 0")
        else:
            state = _state(dmp, opt)
            meta = ckpt.load(snap, state)
            dmp.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            start, losses = int(meta["step"]), [float(x) for x in meta["losses"]]
            log.info(f"resumed from {snap} at step {start}")
    every = cfg.checkpoint_every if cfg.checkpoint_every > 0 else T
    bounds = sorted({min(s, T) for s in range(start, T, every)} | {T})
    pipe = make_pipeline(cfg, dmp, opt, device)
    bar = None
    if cfg.progress and rank == 0:
        from tqdm import tqdm
        bar = tqdm(total=T, initial=start, desc="train-dlrm", unit="step", dynamic_ncols=True)
    local_losses: list[float] = []
    dmp.train()
    t_train = 0.0
    seg_start = start
    for seg_end in bounds:
        if seg_end <= seg_start:
            continue
        t0 = time.perf_counter()
        local_losses += run_steps(dmp, opt, pipe, train_data, cfg, range(seg_start, seg_end), device, bar)
        t_train += time.perf_counter() - t0
        seg_start = seg_end
        if ckpt is not None and (cfg.checkpoint_every > 0 or seg_end == T):
            ckpt.save(seg_end, _state(dmp, opt),
                      {"losses": list(losses) + _global_losses(local_losses, world)})
    if bar is not None:
        bar.close()
    new_losses = _global_losses(local_losses, world)
    losses = list(losses) + new_losses
    n_steps = len(new_losses)
    tput = n_steps * cfg.batch_size / t_train if t_train > 0 else 0.0
    metrics = evaluate(dmp, eval_data, cfg, device)
    report = {**{k: metrics[k] for k in ("auc", "logloss", "ne")},
              "throughput/samples_per_s": tput, "steps": len(losses), "losses": losses,
              "sharding_plan": {n: {"type": t["type"], "ranks": t["ranks"]} for n, t in desc["tables"].items()},
              "world_size": world,
              "plan": desc, "eval_samples": metrics["eval_samples"],
              "eval_click_rate": metrics["eval_click_rate"], "train_samples": len(train_data),
              "bad_lines": int(train_data.bad_lines + (eval_data.bad_lines if cfg.eval_data else 0)),
              "time/train_s": t_train, "pipeline": pipe is not None, "config": _cfg_dict(cfg)}
    return report


def _state(dmp, opt) -> dict:
    """What a checkpoint holds: the sharded model (embedding shards as ShardedTensors, dense
    replicas) and every optimizer state (fused row-wise Adagrad sums included)."""
    return {"model": dmp.state_dict(), "optim": opt.state_dict()}


def _global_losses(local: list[float], world: int) -> list[float]:
    t = comm.all_reduce_sum(torch.tensor(local, dtype=torch.float64))
    return (t / world).tolist()


def _cfg_dict(cfg: DLRMTrainConfig) -> dict:
    import dataclasses
    return dataclasses.asdict(cfg)
