"""Sharded DLRM training: the step loop, replica sync, stop on signals, checkpoints, evaluation.

Per step (global batch B, W ranks, b = B / W)::

    rank r: slice Layout.slot(r) of the batch  ──►  Batch(dense [b,13], KJT 26 keys, labels [b])
      input all-to-all (ids to the table owners) ─► lookups ─► output all-to-all (pooled [b,26,D])
      ─► dense arch + interaction + over arch ─► mean BCE over b
      backward: dense grads all-reduced (DDP, averaged over W); embedding grads returned by
      all-to-all, divided by the all-to-all group size (torchrec's gradient division) and
      applied in the fused kernel
    => at --sparse-groups 1 exactly the global-batch-mean update, whatever W is.

With ``--sparse-groups G`` the all-to-all group is one sharding group of S = W/G ranks (whose
slices are the g-th 1/G of the batch), and every ``--sync-every`` steps the G replicas of each
shard average weights and optimizer state (:mod:`embeddings.twod`); also at the end and before
every checkpoint, so a snapshot and the evaluated model are one model.

SIGINT / SIGTERM (:class:`graphdist.runtime.GracefulStop`) are polled every
:data:`STOP_POLL_STEPS` steps with one tiny all-reduce, so every rank stops after the same
step; SIGTERM writes a checkpoint first (with ``--checkpoint-dir``); then
:class:`~graphdist.errors.Interrupted` says where to resume. A failed collective names the peer
(:func:`graphdist.comm.raise_peer_failure`); a local error is raised as itself.

The loss reported per step is the global-batch mean (local means averaged over ranks once per
segment, not per step, so logging costs no collective).
"""
from __future__ import annotations

import signal
import time

import torch

from embeddings.build import (ShardedModel, build_sharded, epoch_warning, fill_embeddings,  # noqa: F401
                              load_splits, memory_budget, optimizer_class, plan_for, total_steps,
                              validate)
from embeddings.config import DLRMTrainConfig
from embeddings.data import ClickData, make_batch
from embeddings.sharding import format_plan
from graphdist import comm
from graphdist.errors import USER_ERRORS, ArtifactError
from graphdist.runtime import GracefulStop, get_logger, peak_memory_bytes

STOP_POLL_STEPS = 10
"""Steps between two checks (one all-reduce of one number) whether some rank got a signal."""


class _Stopper:
    """The stop flag every rank agrees on: polled before every STOP_POLL_STEPS-th batch."""

    def __init__(self, signalled: GracefulStop | None):
        self.signalled = signalled
        self.signum: int | None = None

    def poll(self) -> bool:
        mine = {None: 0.0, signal.SIGINT: 1.0}.get(self.signalled.signum if self.signalled else None, 1000.0)
        total = float(comm.all_reduce_sum(torch.tensor([mine], dtype=torch.float64))[0])
        if total > 0:
            self.signum = signal.SIGTERM if total >= 1000.0 else signal.SIGINT
        return self.signum is not None


def step_batches(data: ClickData, cfg: DLRMTrainConfig, steps: range, slot: int, world: int,
                 stopper: _Stopper | None = None):
    """Batches of the given global steps (wrapping around the training rows every epoch);
    ends early, on every rank alike, once ``stopper`` agrees that some rank was signalled."""
    per_epoch = len(data) // cfg.batch_size
    for t in steps:
        if stopper is not None and t > steps.start and t % STOP_POLL_STEPS == 0 and stopper.poll():
            return
        yield make_batch(data, (t % per_epoch) * cfg.batch_size, cfg.batch_size, slot, world)[0]


def use_pipeline(cfg: DLRMTrainConfig, device: torch.device) -> bool:
    return cfg.pipeline if cfg.pipeline is not None else device.type == "cuda"


def make_pipeline(cfg: DLRMTrainConfig, dmp, opt, device: torch.device):
    """``TrainPipelineSparseDist`` over ``dmp`` when :func:`use_pipeline`, else None. Its own
    DMPCollection sync is off: the trainer syncs (same place in the step, same interval rule
    on CPU and CUDA)."""
    if not use_pipeline(cfg, device):
        return None
    from torchrec.distributed.train_pipeline import TrainPipelineSparseDist
    return TrainPipelineSparseDist(dmp, opt, device, execute_all_batches=True,
                                   dmp_collection_sync_interval_batches=None)


def _slot(sm, rank: int) -> int:
    return sm.layout.slot(rank) if isinstance(sm, ShardedModel) else rank


def run_steps(dmp, opt, pipe, data: ClickData, cfg: DLRMTrainConfig, steps: range,
              device: torch.device, bar=None, *, model: ShardedModel | None = None,
              stopper: _Stopper | None = None, callbacks=()) -> list[float]:
    """Train on the given global steps; returns this rank's local losses (fewer when stopped).

    With a pipeline (``TrainPipelineSparseDist``) the input all-to-all of batch i+1 is started
    before the forward of batch i; the pipeline is drained and detached at the end, so the
    plain model is usable (eval, checkpoint) afterwards. With replicas (``model.sync``) they
    are averaged after every step t with (t + 1) % --sync-every == 0. Losses stay on the device
    until the end (one host sync per call, not one per step, which would stall a GPU's queue).
    """
    rank, world = comm.world()
    it = step_batches(data, cfg, steps, _slot(model, rank), world, stopper)
    sync = model.sync if model is not None else None
    out_losses: list[torch.Tensor] = []

    def after_step():
        t = steps.start + len(out_losses) - 1
        if sync is not None and (t + 1) % cfg.sync_every == 0:
            sync()
        for cb in callbacks:
            cb(t + 1, out_losses[-1])
        if bar is not None:
            bar.update(1)

    if pipe is not None:
        pipe.reset()
        while True:
            try:
                out = pipe.progress(it)
            except StopIteration:
                break
            out_losses.append(out[0].detach())
            after_step()
        pipe.detach()
    else:
        for batch in it:
            opt.zero_grad()
            loss, _ = dmp(batch.to(device))
            loss.backward()
            opt.step()
            out_losses.append(loss.detach())
            after_step()
    return torch.stack(out_losses).float().cpu().tolist() if out_losses else []


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


def _prepare(cfg: DLRMTrainConfig, rank: int):
    """The splits; rank 0 builds the Criteo cache once, the others then map it."""
    if rank == 0 and any(s and s.startswith("criteo:") for s in (cfg.spec, cfg.eval_data)):
        load_splits(cfg)
    comm.barrier()
    return load_splits(cfg)


def train(cfg: DLRMTrainConfig, device: torch.device | None = None, callbacks=()) -> dict:
    """Run training on the initialised default process group; returns the report (all ranks).

    ``callbacks``: functions ``cb(steps_done, local_loss)`` called on every rank after each
    step (the same steps everywhere), e.g. to watch progress; ``local_loss`` is this rank's loss
    as a 0-d tensor on the device (``float()`` it only when needed: on a GPU that waits for the
    step); their return value is ignored."""
    from graphdist.checkpoint import Checkpointer, interrupted
    log = get_logger("graphdist.dlrm")
    rank, world = comm.world()
    device = device or torch.device("cpu")
    train_data, eval_data = _prepare(cfg, rank)
    validate(cfg, train_data, world)
    T = total_steps(cfg, len(train_data))
    warn = epoch_warning(cfg, len(train_data))
    if warn and rank == 0:
        log.warning(f"warning: {warn}")
    sm = build_sharded(cfg, train_data, device)
    dmp, opt, desc = sm.dmp, sm.opt, sm.desc
    if rank == 0 and cfg.print_plan:
        print(format_plan(desc), flush=True)
    start, losses = 0, []
    ckpt = Checkpointer(cfg.checkpoint_dir, cfg.keep_checkpoints) if cfg.checkpoint_dir else None
    if cfg.resume:
        start, losses = _resume(ckpt, cfg, sm, log)
    every = cfg.checkpoint_every if cfg.checkpoint_every > 0 else T
    bounds = sorted({min(s, T) for s in range(start, T, every)} | {T})
    pipe = make_pipeline(cfg, dmp, opt, device)
    bar = None
    if cfg.progress and rank == 0:
        from tqdm import tqdm
        bar = tqdm(total=T, initial=start, desc="train-dlrm", unit="step", dynamic_ncols=True)
    new_losses: list[float] = []
    dmp.train()
    t_train = 0.0
    done, saved = start, (start if cfg.resume and start else 0)
    last = [start]  # the last finished step, for naming where a collective failed

    def track(step, loss):
        last[0] = step
    try:
        with GracefulStop() as signalled:
            stopper = _Stopper(signalled)
            for seg_end in bounds:
                if seg_end <= done:
                    continue
                t0 = time.perf_counter()
                local = run_steps(dmp, opt, pipe, train_data, cfg, range(done, seg_end), device, bar,
                                  model=sm, stopper=stopper, callbacks=[track, *callbacks])
                t_train += time.perf_counter() - t0
                done += len(local)
                new_losses += _global_losses(local, world)
                stopped = stopper.signum is not None
                save = ckpt is not None and ((done == seg_end and (cfg.checkpoint_every > 0 or done == T))
                                             or stopper.signum == signal.SIGTERM)
                if sm.sync is not None and done % cfg.sync_every and (done == T or save):
                    sm.sync()  # one model at the end and in every snapshot
                if save:
                    _save(ckpt, cfg, sm, done, losses + new_losses)
                    saved = done
                if stopped:
                    raise interrupted(stopper.signum, f"step {done} of {T}", ckpt, saved, cfg.checkpoint_dir)
    except USER_ERRORS:
        raise
    except Exception as e:  # noqa: BLE001 - a failed collective names the peer; anything else is itself
        if comm.is_collective_failure(e):
            comm.raise_peer_failure(e, f"step {min(last[0] + 1, T)} of {T}")
        raise
    finally:
        if bar is not None:
            bar.close()
    losses = list(losses) + new_losses
    n_steps = len(new_losses)
    tput = n_steps * cfg.batch_size / t_train if t_train > 0 else 0.0
    metrics = evaluate(dmp, eval_data, cfg, device)
    peaks = comm.all_gather_object(peak_memory_bytes(device))
    for row in desc["ranks"]:
        row["peak_bytes"] = int(peaks[row["rank"]])
    return {**{k: metrics[k] for k in ("auc", "logloss", "ne")},
            "throughput/samples_per_s": tput, "steps": len(losses), "losses": losses,
            "sharding_plan": {n: {"type": t["type"], "ranks": t["ranks"]} for n, t in desc["tables"].items()},
            "world_size": world, "sparse_groups": cfg.sparse_groups,
            "plan": desc, "plan_digest": sm.plan_digest,
            "mem/peak_bytes": int(max(peaks)), "mem/peak_bytes_per_rank": [int(p) for p in peaks],
            "eval_samples": metrics["eval_samples"],
            "eval_click_rate": metrics["eval_click_rate"], "train_samples": len(train_data),
            "bad_lines": int(train_data.bad_lines + (eval_data.bad_lines if cfg.eval_data else 0)),
            "time/train_s": t_train, "pipeline": pipe is not None, "config": _cfg_dict(cfg)}


_RUN_KEYS = ("sharding", "sparse_groups", "seed", "batch_size", "embedding_optimizer")
"""Config fields a checkpoint must agree with to be resumed."""


def _state(dmp, opt) -> dict:
    """What a checkpoint holds: the sharded model (embedding shards as ShardedTensors, or
    DTensors with replicas, dense replicas) and every optimizer state (fused row-wise Adagrad
    sums included)."""
    return {"model": dmp.state_dict(), "optim": opt.state_dict()}


def _save(ckpt, cfg, sm, step: int, losses: list[float]) -> None:
    ckpt.save(step, _state(sm.dmp, sm.opt),
              {"losses": losses, "plan_digest": sm.plan_digest, **{k: getattr(cfg, k) for k in _RUN_KEYS}})


def _resume(ckpt, cfg, sm, log) -> tuple[int, list[float]]:
    snap = ckpt.latest()
    if snap is None:
        log.info(f"no checkpoint in {cfg.checkpoint_dir}; starting from step 0")
        return 0, []
    meta = ckpt.read_meta(snap)
    for k in _RUN_KEYS:
        if k in meta and meta[k] != getattr(cfg, k):
            raise ArtifactError(f"checkpoint {snap} has {k}={meta[k]!r} but this run has "
                                f"{getattr(cfg, k)!r}")
    if meta.get("world_size") not in (None, comm.world()[1]):
        raise ArtifactError(f"checkpoint {snap} was written by {meta.get('world_size')} ranks, "
                            f"this run has {comm.world()[1]}")
    state = _state(sm.dmp, sm.opt)
    ckpt.load(snap, state)
    sm.dmp.load_state_dict(state["model"])
    sm.opt.load_state_dict(state["optim"])
    log.info(f"resumed from {snap} at step {int(meta['step'])}")
    return int(meta["step"]), [float(x) for x in meta["losses"]]


def _global_losses(local: list[float], world: int) -> list[float]:
    if not local and world > 1:  # every rank ran the same steps: all empty alike
        return []
    t = comm.all_reduce_sum(torch.tensor(local, dtype=torch.float64))
    return (t / world).tolist()


def _cfg_dict(cfg: DLRMTrainConfig) -> dict:
    import dataclasses
    return dataclasses.asdict(cfg)
