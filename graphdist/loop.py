"""The one training loop of every trainer (``train-gcn``, ``train-rec``, ``train-dlrm``).

The loop owns what is the same everywhere: the units (epochs or steps) and their numbering, the
progress bar, SIGINT / SIGTERM, checkpoint cadence and resume (with the settings check), early
stopping and callbacks, and naming a failed peer. A trainer gives it a :class:`Task`: how to run
units, its checkpointed state and history, and what must match on resume::

    units        1 .. total, in segments that end at every checkpoint:
                 [start+1 .. c1] [c1+1 .. c2] ... [.. total]      (c = multiples of checkpoint_every)
    per unit     task.run(segment) yields once per unit  -> bar, callbacks, early stop,
                 every poll_every units one all-reduce of the ranks' stop requests
    per segment  task.end_segment() (collective: e.g. one all-reduce of the segment's losses),
                 then a checkpoint when the segment ends at a checkpoint, or the run stops
    SIGINT       stop after the current unit (exit 130);  SIGTERM: checkpoint first (exit 143)

Every decision (stop, save) is taken from numbers all ranks share, so every rank makes it after
the same unit. ``task.run`` is a generator: a stop inside a segment closes it after the unit.
"""
from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from graphdist import comm, failures
from graphdist.checkpoint import (RESUME_FREE, Checkpointer, check_settings, interrupted, layout_diff, run_settings,
                                  state_layout)
from graphdist.errors import USER_ERRORS, ArtifactError, MissingFileError
from graphdist.log import get_logger
from graphdist.proc import GracefulStop
from graphdist.restarts import group_restarts

__all__ = ["Task", "LoopConfig", "LoopResult", "run_loop", "facts"]


def facts(d: dict) -> str:
    """``world_size 4, partition_id 1f2e...``: a layout's facts in one line's words."""
    return ", ".join(f"{k} {v}" for k, v in d.items())


class Task:
    """What a trainer gives :func:`run_loop` (subclass it; the defaults do nothing)."""

    history: dict
    """JSON data kept in every checkpoint's meta and restored on resume (losses, metrics, ...)."""

    optional: tuple = ()
    """prefixes of :meth:`state` keys a snapshot may lack (written before they were saved); on a
    resume onto the same layout they keep their current values"""

    def run(self, units: range) -> Iterator[dict | None]:
        """Train units ``units`` (1-based numbers, ascending), yielding after each one: the values
        to show on the progress bar (or None). Collective."""
        raise NotImplementedError

    def end_segment(self) -> None:
        """After the units of a segment (or of a stopped run): collective bookkeeping."""

    def should_stop(self) -> bool:
        """Early stopping after the unit just run; must be the same on every rank."""
        return False

    def before_save(self) -> None:
        """Right before a checkpoint (e.g. synchronise replicas). Collective."""

    def state(self) -> dict:
        """The DCP state dict to save, and to fill in place on resume."""
        raise NotImplementedError

    def loaded(self, state: dict) -> None:
        """After ``state`` was filled from a checkpoint (e.g. push it into the model)."""

    def scalars(self) -> dict:
        """Extra values to chart after each unit (``--tensorboard``), by tag; the history's
        per-unit series are charted without this."""
        return {}

    def resharded(self, was: dict) -> None:
        """After a resume from a snapshot of another world size or partition (``was``): forget
        what the history says about the old layout (e.g. its traffic per epoch)."""

    def load_resharded(self, ckpt: Checkpointer, snap, was: dict, now: dict) -> None:
        """Fill the state from snapshot ``snap``, written by another world size or partition
        (``was``: its world size and recorded facts; ``now``: this run's); only with
        ``LoopConfig.reshard``. The
        default loads :meth:`state` through DCP, which places replicated tensors and the shards of
        ShardedTensors / DTensors wherever this layout keeps them, after checking that the
        snapshot holds every tensor with its whole shape (else one line naming what differs).
        A task whose state is kept by rank under its own keys overrides it. Collective."""
        state = self.state()
        diff = layout_diff(ckpt.layout(snap), state_layout(state))
        if diff:
            raise ArtifactError(f"checkpoint {snap} ({facts(was)}) cannot be resharded onto this run "
                                f"({facts(now)}): it has {diff}; resume on {was['world_size']} ranks with the "
                                "layout that wrote it")
        ckpt.load(snap, state)
        self.loaded(state)


@dataclass
class LoopConfig:
    """How the loop runs; built by each trainer from its config."""

    total: int
    """units to reach (epochs or steps); a resumed run continues up to it"""
    unit: str = "epoch"
    """what one unit is called in messages and on the bar"""
    desc: str = "train"
    """the progress bar's label"""
    checkpoint_dir: str | None = None
    """snapshots go here (None: no checkpoints)"""
    checkpoint_every: int = 0
    """save after every N-th unit (and the last one); 0 = at the end only"""
    keep_checkpoints: int = 2
    """snapshots kept"""
    resume: bool = False
    """continue from the latest snapshot"""
    progress: bool = True
    """progress on rank 0: tqdm's bar on a terminal, a line per tenth of the run in a log
    (:mod:`graphdist.progress`)"""
    poll_every: int = 1
    """units between two checks (one tiny all-reduce) whether some rank got a signal"""
    settings: object = None
    """the trainer's config: its result-changing fields are saved and checked on resume"""
    free: frozenset = RESUME_FREE
    """config fields that may differ on resume"""
    identity: dict = field(default_factory=dict)
    """facts a snapshot must share with this run (graph fingerprint, partition id, plan digest)"""
    recorded: dict = field(default_factory=dict)
    """facts a snapshot records without requiring them on resume (the partition of a run whose
    state is replicated): what a resharded run reports it came from"""
    about: dict = field(default_factory=dict)
    """what a snapshot's readers need to know of the model and nothing on resume checks (a
    classifier's class count and class names, for ``infer`` and ``export``)"""
    tensorboard: str | None = None
    """write the run's curves here as TensorBoard event files (rank 0): every per-unit series of
    the history (loss, accuracies, epoch time, traffic), the task's own scalars, and memory"""
    reshard: bool = False
    """a snapshot written by another number of ranks or on another partition (another value of a
    ``recorded`` fact) loads into this run (:meth:`Task.load_resharded`): the state is replicated,
    sharded tensors DCP places anew, or the task redistributes it itself"""
    layout_free: frozenset = frozenset({"method"})
    """config fields that only choose the layout (the partitioner; DLRM's sharding): with
    ``reshard`` they may differ on resume, as the layout may"""
    why_not: str = ""
    """without ``reshard``: why the state cannot move to another layout (in the refusal's line)"""


@dataclass
class LoopResult:
    start: int
    """units done before this run (resumed from)"""
    done: int
    """units done at the end"""
    stopped: bool
    """ended before ``total`` (early stopping or a callback)"""
    resharded_from: dict | None = None
    """the snapshot's world size and recorded facts, when it was written by another number of
    ranks or another partition (``LoopConfig.reshard``); None otherwise"""


class _Board:
    """``--tensorboard DIR`` on rank 0: after each unit, the new entries of every history series
    that has one value per unit (the values a segment adds at its end are charted then, at their
    own units), the task's scalars, and the process's peak resident memory."""

    def __init__(self, log_dir: str, task: Task):
        from torch.utils.tensorboard import SummaryWriter
        self.w, self.task = SummaryWriter(log_dir=log_dir), task
        self.seen = {k: len(v) for k, v in task.history.items() if isinstance(v, list)}

    def write(self, done: int) -> None:
        from graphdist.memory import peak_rss_bytes
        for k, v in self.task.history.items():
            if not isinstance(v, list) or len(v) != done or len(v) <= self.seen.get(k, 0):
                continue
            for i in range(self.seen.get(k, 0), len(v)):
                if isinstance(v[i], (int, float)) and not isinstance(v[i], bool):
                    self.w.add_scalar(k, v[i], i + 1)
            self.seen[k] = len(v)
        for tag, val in self.task.scalars().items():
            self.w.add_scalar(tag, val, done)
        self.w.add_scalar("mem/peak_rss_bytes", peak_rss_bytes(), done)

    def close(self) -> None:
        self.w.close()


def _segments(start: int, total: int, every: int) -> list[range]:
    ends = sorted({min(e, total) for e in range(every, total + 1, every)} | {total}) if every > 0 else [total]
    out, lo = [], start
    for e in ends:
        if e > lo:
            out.append(range(lo + 1, e + 1))
            lo = e
    return out


def _resume(ckpt: Checkpointer | None, lc: LoopConfig, task: Task) -> tuple[int, dict | None]:
    if ckpt is None:  # validate() refuses --resume without --checkpoint-dir
        raise MissingFileError("--resume needs --checkpoint-dir")
    snap = ckpt.latest()
    if snap is None:
        raise MissingFileError(f"--resume: no checkpoint in {lc.checkpoint_dir} (no 'latest' file)")
    meta = ckpt.read_meta(snap)
    ws = comm.world()[1]
    # a fact the snapshot does not record (written before it was recorded) is taken as unchanged
    was = {"world_size": meta.get("world_size"), **{k: meta.get(k, v) for k, v in lc.recorded.items()}}
    now = {"world_size": ws, **lc.recorded}
    resharded = was != now
    if resharded and not lc.reshard:
        why = f": {lc.why_not}" if lc.why_not else ""
        raise ArtifactError(f"checkpoint {snap} was written on {facts(was)}, this run has {facts(now)}; its state "
                            f"belongs to those ranks (it cannot be resharded{why}): "
                            f"resume on {was['world_size']} ranks and the same partition")
    for k, v in lc.identity.items():
        if meta.get(k) != v:
            raise ArtifactError(f"checkpoint {snap} has {k} {meta.get(k)}, this run has {v}: resume on the same "
                                "data and partition")
    if lc.settings is not None:
        check_settings(snap, meta.get("settings"), lc.settings, lc.free | lc.layout_free if lc.reshard else lc.free)
    if resharded:
        task.load_resharded(ckpt, snap, was, now)
    else:
        state = task.state()
        if task.optional:
            held = ckpt.layout(snap)
            state = {k: v for k, v in state.items() if k in held or not k.startswith(task.optional)}
        ckpt.load(snap, state)
        task.loaded(state)
    task.history = meta["history"]
    if resharded:
        task.resharded(was)
        get_logger().info(f"resumed from {lc.unit} {int(meta['step'])} in {lc.checkpoint_dir}, resharded from "
                          f"{facts(was)} onto {ws} rank{'' if ws == 1 else 's'}")
        return int(meta["step"]), was
    get_logger().info(f"resumed from {lc.unit} {int(meta['step'])} in {lc.checkpoint_dir}")
    return int(meta["step"]), None


def _say_if_replacing(ckpt: Checkpointer, lc: LoopConfig) -> None:
    """A fresh run (no ``--resume``) in a ``--checkpoint-dir`` that holds an earlier run's
    checkpoint replaces it as it saves (a forgotten ``--resume`` after a crash): one line first,
    while nothing of it is gone yet."""
    try:
        snap = ckpt.latest()
    except ArtifactError:  # `latest` names no complete snapshot: nothing to continue, nothing to say
        return
    if snap is not None:
        first = min(lc.checkpoint_every or lc.total, lc.total)
        get_logger().warning(f"warning: {lc.checkpoint_dir} holds an earlier run's checkpoint ({snap.name}); this run "
                             f"starts afresh and its first checkpoint (after {lc.unit} {first}) replaces it: to "
                             "continue that run instead, stop now and add --resume")


def run_loop(task: Task, lc: LoopConfig, callbacks: tuple[Callable[[int, dict], bool], ...] = ()) -> LoopResult:
    """Run ``task`` up to ``lc.total`` units (see the module docstring). ``callbacks``:
    ``cb(unit, history) -> bool`` on every rank after each unit; True stops there (checkpointed
    when checkpointing). Raises :class:`~graphdist.errors.Interrupted` on a signal."""
    from graphdist.progress import progress
    ckpt = Checkpointer(lc.checkpoint_dir, lc.keep_checkpoints) if lc.checkpoint_dir else None
    if group_restarts() > 0 and comm.world()[0] == 0:  # the agent restarted the group (--max-restarts)
        where = f"from the latest checkpoint in {lc.checkpoint_dir}" if lc.resume else "from the start (no checkpoint)"
        get_logger().warning(f"restart {group_restarts()} of the worker group ({failures.restart_cause()}); "
                             f"continuing {where}")
    if not lc.resume and ckpt is not None and group_restarts() == 0 and comm.world()[0] == 0:
        _say_if_replacing(ckpt, lc)
    start, was = _resume(ckpt, lc, task) if lc.resume else (0, None)
    meta_base = {**lc.identity, **lc.recorded, **lc.about, "settings": run_settings(lc.settings, lc.free) if lc.settings is not None else None}

    def save(t: int) -> None:
        task.before_save()
        ckpt.save(t, task.state(), {**meta_base, "history": task.history})

    bar = progress(lc.total, desc=lc.desc, unit=lc.unit, initial=start, enabled=comm.world()[0] == 0 and lc.progress)
    board = _Board(lc.tensorboard, task) if lc.tensorboard and comm.world()[0] == 0 else None
    done, saved, stopped, signum = start, start if lc.resume else 0, False, None
    try:
        with GracefulStop() as signalled:
            for seg in _segments(start, lc.total, lc.checkpoint_every):
                gen = task.run(seg)
                try:
                    for t, shown in zip(seg, gen):
                        done = t
                        bar.update(1)
                        if shown:
                            bar.set_postfix(shown)
                        if board is not None:
                            board.write(t)
                        stopped = any([bool(cb(t, task.history)) for cb in callbacks]) or task.should_stop()
                        if t % lc.poll_every == 0 or t == seg[-1] or stopped:
                            signum = _poll(signalled)
                        if stopped or signum is not None:
                            break
                finally:
                    gen.close()
                task.end_segment()
                if board is not None:
                    board.write(done)  # series a segment adds at its end (the DLRM's losses)
                boundary = done == seg[-1] and (lc.checkpoint_every > 0 or done == lc.total)
                if ckpt is not None and (boundary or stopped or signum == signal.SIGTERM):
                    save(done)
                    saved = done
                if signum is not None:
                    bar.close()
                    raise interrupted(signum, f"{lc.unit} {done} of {lc.total}", ckpt, saved, lc.checkpoint_dir)
                if stopped:
                    break
    except USER_ERRORS:
        raise
    except Exception as e:  # noqa: BLE001 - a failed collective names the peer; anything else is itself
        if failures.is_collective_failure(e):
            failures.raise_peer_failure(e, f"{lc.unit} {min(done + 1, lc.total)} of {lc.total}")
        raise
    finally:
        bar.close()
        if board is not None:
            board.close()
    return LoopResult(start, done, stopped, was)


def _poll(signalled: GracefulStop) -> int | None:
    """The signal some rank got (SIGTERM wins), agreed by one all-reduce; None if none did."""
    mine = {None: 0.0, signal.SIGINT: 1.0}.get(signalled.signum, 1000.0)
    total = float(comm.all_reduce_sum(torch.tensor([mine], dtype=torch.float64))[0])
    if total >= 1000.0:
        return signal.SIGTERM
    return signal.SIGINT if total > 0 else None
