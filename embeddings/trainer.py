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
shard average weights and optimizer state (:mod:`embeddings.twod`: on CPU only the rows looked
up since the last sync, on CUDA DMPCollection's whole shards); also at the end and before every
checkpoint, so a snapshot and the evaluated model are one model. The report's
``comm/replica_sync_bytes_per_step`` is what the syncs moved per step (the largest rank),
``comm/replica_sync_whole_bytes_per_step`` what whole-shard syncs would have moved.

SIGINT / SIGTERM (:class:`graphdist.proc.GracefulStop`) are polled every
:data:`STOP_POLL_STEPS` steps with one tiny all-reduce, so every rank stops after the same
step; SIGTERM writes a checkpoint first (with ``--checkpoint-dir``); then
:class:`~graphdist.errors.Interrupted` says where to resume. A failed collective names the peer
(:func:`graphdist.failures.raise_peer_failure`); a local error is raised as itself.

The loss reported per step is the global-batch mean (local means averaged over ranks once per
segment, not per step, so logging costs no collective).
"""
from __future__ import annotations

import time

import torch

from embeddings.build import (ShardedModel, build_sharded, epoch_warning, load_splits, table_warning, total_steps,
                              validate)
from embeddings.config import DLRMTrainConfig
from embeddings.data import ClickData, make_batch
from embeddings.sharding import format_plan
from graphdist import comm
from graphdist.checkpoint import resuming
from graphdist.loop import LoopConfig, Task, run_loop
from graphdist.log import get_logger
from graphdist.memory import peak_memory_bytes

STOP_POLL_STEPS = 10
"""Steps between two checks (one all-reduce of one number) whether some rank got a signal."""


def step_batches(data: ClickData, cfg: DLRMTrainConfig, steps: range, slot: int, world: int):
    """Batches of the given global steps (0-based; wrapping around the training rows every epoch)."""
    per_epoch = len(data) // cfg.batch_size
    for t in steps:
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


class _DLRMTask(Task):
    """Steps in segments: with a pipeline (``TrainPipelineSparseDist``) the input all-to-all of
    batch i+1 is started before the forward of batch i; the pipeline is drained and detached at
    the end of every segment, so the plain model is usable (eval, checkpoint) in between. With
    replicas (``sm.sync``) they are averaged after every step t with t % --sync-every == 0, and
    before a checkpoint and at the end. Losses stay on the device until the segment ends (one
    host sync and one all-reduce per segment, not per step, which would stall a GPU's queue)."""

    def __init__(self, cfg: DLRMTrainConfig, sm, pipe, data: ClickData, device, step_callbacks=()):
        self.cfg, self.sm, self.pipe, self.data, self.device = cfg, sm, pipe, data, device
        self.step_callbacks = step_callbacks
        self.history = {"losses": []}
        self.local: list[torch.Tensor] = []
        self.t_train, self.steps_run, self.done, self.synced_at, self.syncs = 0.0, 0, 0, 0, 0
        self.step_times: list[float] = []
        self.t_sync = 0.0

    def run(self, units):
        cfg, sm, pipe = self.cfg, self.sm, self.pipe
        rank, world = comm.world()
        it = step_batches(self.data, cfg, range(units[0] - 1, units[-1]), _slot(sm, rank), world)
        t0 = time.perf_counter()
        if pipe is not None:
            pipe.reset()
        try:
            for t in units:
                t_step = time.perf_counter()
                if pipe is not None:
                    loss = pipe.progress(it)[0].detach()
                else:
                    sm.opt.zero_grad()
                    loss, _ = sm.dmp(next(it).to(self.device))
                    loss.backward()
                    sm.opt.step()
                    loss = loss.detach()
                self.local.append(loss)
                self.done, self.steps_run = t, self.steps_run + 1
                if sm.sync is not None and t % cfg.sync_every == 0:
                    self._sync(t)
                self.step_times.append(time.perf_counter() - t_step)
                for cb in self.step_callbacks:
                    cb(t, loss)
                yield None
        finally:
            if pipe is not None:
                pipe.detach()
            self.t_train += time.perf_counter() - t0

    def end_segment(self) -> None:
        local = torch.stack(self.local).float().cpu().tolist() if self.local else []
        self.local = []
        self.history["losses"] += _global_losses(local, comm.world()[1])

    def sync_now(self) -> None:
        """One model: the replicas averaged unless the last step already did."""
        if self.sm.sync is not None and self.synced_at != self.done:
            self._sync(self.done)

    def _sync(self, step: int) -> None:
        t0 = time.perf_counter()
        self.sm.sync()
        self.t_sync += time.perf_counter() - t0
        self.synced_at, self.syncs = step, self.syncs + 1

    def sync_bytes(self, rank: int) -> tuple[int, int]:
        """``(moved, whole)``: bytes this rank put into its replica syncs so far, and what syncs
        of whole shards (weights + optimizer state, the plan's ``sync_bytes_per_sync``) would
        have; DMPCollection's sync (CUDA) moves whole shards."""
        from embeddings.twod import ReplicaSync
        if self.sm.sync is None:
            return 0, 0
        whole = self.sm.desc["ranks"][rank]["sync_bytes_per_sync"] * self.syncs
        return (self.sm.sync.bytes_moved if isinstance(self.sm.sync, ReplicaSync) else whole), whole

    def before_save(self) -> None:
        self.sync_now()

    def state(self) -> dict:
        """The sharded model (embedding shards as ShardedTensors, or DTensors with replicas, dense
        replicas) and every optimizer state (fused row-wise Adagrad sums included)."""
        return {"model": self.sm.dmp.state_dict(), "optim": self.sm.opt.state_dict()}

    def loaded(self, state: dict) -> None:
        self.sm.dmp.load_state_dict(state["model"])
        self.sm.opt.load_state_dict(state["optim"])


def run_steps(dmp, opt, pipe, data: ClickData, cfg: DLRMTrainConfig, steps: range, device: torch.device, *,
              model: ShardedModel | None = None) -> list[float]:
    """Train on the global steps ``steps`` (0-based) exactly as ``train-dlrm`` does (the same task
    the training loop runs, replica sync included); returns this rank's local losses. For
    benchmarks and tests that time or compare the step loop alone."""
    import types
    sm = model if model is not None else types.SimpleNamespace(dmp=dmp, opt=opt, sync=None)
    task = _DLRMTask(cfg, sm, pipe, data, device)
    for _ in task.run(range(steps.start + 1, steps.stop + 1)):
        pass
    return torch.stack(task.local).float().cpu().tolist() if task.local else []


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
    """The splits. A Criteo cache not built yet is built once per file system, by the first rank
    to take its lock (:func:`embeddings.criteo.ensure_cache`; the others wait on the lock, then
    map it); every rank then waits for all without the collective timeout
    (:func:`graphdist.comm.wait_for_all`): under torchrun the build of the Kaggle file takes
    minutes, and ranks done first would otherwise time out in the next collective."""
    splits = load_splits(cfg)
    if any(s and s.startswith("criteo:") for s in (cfg.spec, cfg.eval_data)):
        comm.wait_for_all("dlrm/data")
    return splits


def train(cfg: DLRMTrainConfig, device: torch.device | None = None, callbacks=(), step_callbacks=()) -> dict:
    """Run training on the initialised default process group; returns the report (all ranks).

    ``callbacks``: ``cb(step, history) -> bool`` on every rank after each step (True stops there,
    as in every trainer, :func:`graphdist.loop.run_loop`). ``step_callbacks``: ``cb(step, loss)``
    after each step with this rank's loss as a 0-d tensor on the device (``float()`` it only when
    needed: on a GPU that waits for the step)."""
    log = get_logger("graphdist.dlrm")
    rank, world = comm.world()
    device = device or torch.device("cpu")
    train_data, eval_data = _prepare(cfg, rank)
    validate(cfg, train_data, world)
    T = total_steps(cfg, len(train_data))
    if rank == 0:
        for warn in (epoch_warning(cfg, len(train_data)), table_warning(cfg, train_data)):
            if warn:
                log.warning(f"warning: {warn}")
    cfg, auto = _resolve_layout(cfg, train_data, device)
    sm = build_sharded(cfg, train_data, device)
    if rank == 0 and cfg.print_plan:
        print(format_plan(sm.desc), flush=True)
    task = _DLRMTask(cfg, sm, make_pipeline(cfg, sm.dmp, sm.opt, device), train_data, device, step_callbacks)
    if auto is not None:
        task.history["sparse_auto"] = auto  # kept in every checkpoint (a resume restores the history)
    lc = LoopConfig(total=T, unit="step", desc="train-dlrm", checkpoint_dir=cfg.checkpoint_dir,
                    checkpoint_every=cfg.checkpoint_every, keep_checkpoints=cfg.keep_checkpoints,
                    resume=resuming(cfg), tensorboard=cfg.tensorboard, progress=cfg.progress and rank == 0, poll_every=STOP_POLL_STEPS,
                    settings=cfg, recorded={"plan_digest": sm.plan_digest}, reshard=True,
                    about=_columns(train_data),
                    layout_free=frozenset({"sharding", "sparse_groups", "sparse_layout"}))
    sm.dmp.train()
    res = run_loop(task, lc, callbacks)
    if auto is not None and "candidates" not in auto:  # resumed: the estimates of the run that chose
        auto = {**task.history.get("sparse_auto", {}), **auto}
    task.sync_now()  # one model to evaluate
    losses = task.history["losses"]
    tput = task.steps_run * cfg.batch_size / task.t_train if task.t_train > 0 else 0.0
    metrics = evaluate(sm.dmp, eval_data, cfg, device)
    per_step = max(task.steps_run, 1)
    per_rank = comm.all_gather_json((peak_memory_bytes(device), *(b / per_step for b in task.sync_bytes(rank))))
    peaks = [p for p, _, _ in per_rank]
    desc = sm.desc
    for row in desc["ranks"]:
        row["peak_bytes"] = int(peaks[row["rank"]])
        row["sync_bytes_per_step"] = round(per_rank[row["rank"]][1])
    return {**{k: metrics[k] for k in ("auc", "logloss", "ne")},
            "throughput/samples_per_s": tput, "steps": len(losses), "losses": losses,
            "sharding_plan": {n: {"type": t["type"], "ranks": t["ranks"]} for n, t in desc["tables"].items()},
            "world_size": world, "sparse_groups": cfg.sparse_groups,
            "plan": desc, "plan_digest": sm.plan_digest, "run/resharded_from": res.resharded_from,
            "mem/peak_bytes": int(max(peaks)), "mem/peak_bytes_per_rank": [int(p) for p in peaks],
            "comm/replica_sync_bytes_per_step": round(max(m for _, m, _ in per_rank)),
            "comm/replica_sync_whole_bytes_per_step": round(max(w for _, _, w in per_rank)),
            "eval_samples": metrics["eval_samples"],
            "eval_click_rate": metrics["eval_click_rate"], "train_samples": len(train_data),
            "bad_lines": int(train_data.bad_lines + (eval_data.bad_lines if cfg.eval_data else 0)),
            "time/train_s": task.t_train, "time/step_s": _steady(task.step_times),
            "time/replica_sync_s_per_step": task.t_sync / per_step,
            "sparse_layout": cfg.sparse_layout, "sparse_auto": auto,
            "pipeline": task.pipe is not None, "config": _cfg_dict(cfg)}


def _columns(data: ClickData) -> dict:
    """What a checkpoint's readers (``export``) need of the input: a ``clicks:`` log's columns."""
    return {"columns": data.columns} if data.columns else {}


def _resolve_layout(cfg: DLRMTrainConfig, train_data: ClickData, device):
    """``(cfg, choice)``: with ``--sparse-groups auto`` the layout :mod:`embeddings.auto` chose
    (printed on rank 0), else ``(cfg, None)``."""
    if cfg.sparse_groups != "auto":
        return cfg, None
    from embeddings.auto import format_choice, resolve
    from graphdist.hosts import placement
    rank, world = comm.world()
    where = placement()  # ranks per host as the job agreed on them (1 where hosts run unequal ranks)
    cfg, auto = resolve(cfg, train_data, device, where.ranks_per_host or 1)
    if rank == 0 and cfg.print_plan:
        print(format_choice(auto), flush=True)
    return cfg, auto


WARMUP_STEPS = 5
"""Steps left out of ``time/step_s`` (torchrec and DDP set up buffers in the first steps)."""


def _steady(xs: list[float]) -> float:
    """The mean step after the first :data:`WARMUP_STEPS` (after the first step when a run has
    fewer than twice as many)."""
    xs = xs[WARMUP_STEPS:] if len(xs) >= 2 * WARMUP_STEPS else xs[1:] or xs
    return float(sum(xs) / len(xs)) if xs else 0.0


def _global_losses(local: list[float], world: int) -> list[float]:
    if not local and world > 1:  # every rank ran the same steps: all empty alike
        return []
    t = comm.all_reduce_sum(torch.tensor(local, dtype=torch.float64))
    return (t / world).tolist()


def _cfg_dict(cfg: DLRMTrainConfig) -> dict:
    import dataclasses
    return dataclasses.asdict(cfg)
