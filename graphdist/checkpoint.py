"""The one checkpoint mechanism of every trainer: torch.distributed.checkpoint, atomic, last N kept.

    ROOT/
      step_00000040/        one snapshot: every rank writes its own shards (DCP), rank 0 adds
        .metadata             meta.json (step, world size, the run's settings, history so far)
        __0_0.distcp ...
        meta.json
      step_00000050/
      latest                text file naming the newest complete snapshot
      order/                train-gcn: each part's locality order (graphdist.partition.order.keep)

:meth:`Checkpointer.save` is collective. ``latest`` always names a complete snapshot, whatever
instant a crash (or a power loss) hits:

1. every rank writes its shards into ``step_<t>.tmp/`` (DCP fsyncs each file it writes);
2. after a barrier rank 0 fsyncs every file of the snapshot, writes ``meta.json`` (fsynced),
   fsyncs the directory and renames it to its final name, then fsyncs ``ROOT``;
3. only then is ``latest`` switched to it (temp file, fsync, ``os.replace``, fsync ``ROOT``);
4. snapshots beyond the newest ``keep`` are removed, never the one ``latest`` names.

A snapshot is never deleted or overwritten before ``latest`` has moved off it: saving a step
that already exists under its name gets a fresh name (``step_<t>-1``) when ``latest`` names the
old one; an old one that ``latest`` does not name is moved aside and removed after the switch.
Replicated tensors (dense weights that are equal on every rank) are stored once; sharded ones
(torchrec ShardedTensors) by their owners. ``ROOT`` must be one directory that every rank sees
(a shared filesystem across nodes).

:func:`run_settings` / :func:`check_settings`: every config field that changes a run's result is
stored in ``meta.json`` and compared on resume (one line naming each differing field).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from pathlib import Path

from graphdist import comm
from graphdist.errors import ArtifactError, ConfigError, Interrupted, MissingFileError
from graphdist.fileio import atomic_write_json, atomic_write_text, fsync_dir, fsync_file

__all__ = ["Checkpointer", "interrupted", "run_settings", "check_settings", "recorded_setting", "with_recorded",
           "RESUME_FREE", "state_layout", "layout_diff", "partition_id"]

_META = "meta.json"
_LATEST = "latest"
_NAME = re.compile(r"step_(\d{8})(?:-(\d+))?")


def _key(p: Path) -> tuple[int, int]:
    m = _NAME.fullmatch(p.name)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else (-1, -1)


class Checkpointer:
    """Snapshots of one run in ``root``; the newest ``keep`` are kept (``keep >= 1``)."""

    def __init__(self, root, keep: int = 2, pg=None):
        self.root = Path(root)
        self.keep = max(1, int(keep))
        self.pg = pg
        self._last: Path | None = None

    def path(self, step: int) -> Path:
        """The snapshot of ``step`` this object saved last (else its plain name)."""
        if self._last is not None and _key(self._last)[0] == int(step):
            return self._last
        return self.root / f"step_{int(step):08d}"

    def snapshots(self) -> list[Path]:
        """Complete snapshots (with ``meta.json``), oldest first."""
        if not self.root.is_dir():
            return []
        return sorted((p for p in self.root.iterdir()
                       if p.is_dir() and _NAME.fullmatch(p.name) and (p / _META).exists()), key=_key)

    def _latest_name(self) -> str | None:
        try:
            return (self.root / _LATEST).read_text().strip() or None
        except OSError:
            return None

    def save(self, step: int, state: dict, meta: dict) -> Path:
        """Write ``state`` (a DCP state dict) and ``meta`` (JSON) as snapshot ``step``; returns its
        path (the same on every rank)."""
        import torch.distributed.checkpoint as dcp
        rank = comm.world(self.pg)[0]
        tmp = self.root / f"step_{int(step):08d}.tmp"
        if rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            for left in [*self.root.glob("step_*.tmp"), *self.root.glob(".step_*.stale-*")]:
                shutil.rmtree(left, ignore_errors=True)  # what a crashed save left behind
            tmp.mkdir()
        comm.barrier(self.pg)
        dcp.save(state, checkpoint_id=str(tmp), process_group=self.pg)
        comm.barrier(self.pg)
        name = None
        if rank == 0:
            name = self._publish(step, tmp, meta).name
        name = comm.all_gather_json(name, self.pg)[0]
        self._last = self.root / name
        comm.barrier(self.pg)
        return self._last

    def _publish(self, step: int, tmp: Path, meta: dict) -> Path:
        """Rank 0: make ``tmp`` a complete snapshot, give it its final name, switch ``latest``,
        prune. Every step leaves ``latest`` naming a complete snapshot."""
        for f in tmp.iterdir():
            if f.is_file():
                fsync_file(f)
        atomic_write_json(tmp / _META, {"step": int(step), "world_size": comm.world(self.pg)[1], **meta})
        fsync_dir(tmp)
        final = self.root / f"step_{int(step):08d}"
        current = self._latest_name()
        stale = None
        if final.exists():
            if final.name == current:  # never touch the snapshot `latest` names: take a new name
                n = 1
                while (self.root / f"{final.name}-{n}").exists():
                    n += 1
                final = self.root / f"{final.name}-{n}"
            else:  # an old copy nothing names (a crash before `latest` moved): aside, removed later
                stale = self.root / f".{final.name}.stale-{os.getpid()}"
                shutil.rmtree(stale, ignore_errors=True)
                os.replace(final, stale)
        os.replace(tmp, final)
        fsync_dir(self.root)
        atomic_write_text(self.root / _LATEST, final.name + "\n")
        if stale is not None:
            shutil.rmtree(stale, ignore_errors=True)
        for old in self.snapshots()[:-self.keep]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
        return final

    def latest(self) -> Path | None:
        """The snapshot ``latest`` names; None when there is none yet."""
        p = self.root / _LATEST
        if not p.exists():
            return None
        name = p.read_text().strip()
        snap = self.root / name
        if not (snap / _META).exists():
            raise ArtifactError(f"{p} names {name!r}, which is not a complete snapshot")
        return snap

    def read_meta(self, snap) -> dict:
        try:
            return json.loads((Path(snap) / _META).read_text())
        except (OSError, ValueError) as e:
            raise ArtifactError(f"{Path(snap) / _META}: unreadable ({e})") from None

    def layout(self, snap) -> dict:
        """``{key: global shape}`` of every tensor in snapshot ``snap`` (DCP's flattened keys, as
        :func:`state_layout` gives them for a state dict): what a state must look like to load it."""
        from torch.distributed.checkpoint import FileSystemReader
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata
        md = FileSystemReader(str(snap)).read_metadata().state_dict_metadata
        return {k: tuple(v.size) for k, v in md.items() if isinstance(v, TensorStorageMetadata)}

    def load(self, snap, state: dict) -> dict:
        """Fill ``state`` in place from snapshot ``snap``; returns its meta."""
        import torch.distributed.checkpoint as dcp
        snap = Path(snap)
        if not snap.is_dir():
            raise MissingFileError(f"--resume: checkpoint {snap} not found")
        meta = self.read_meta(snap)
        dcp.load(state, checkpoint_id=str(snap), process_group=self.pg)
        return meta


RESUME_FREE = frozenset({
    "spec", "partition", "parts", "nproc", "nodes", "report", "checkpoint_dir", "checkpoint_every", "keep_checkpoints",
    "resume", "progress", "summary", "timeout_s", "malloc_mmap_mb", "print_plan", "cache_dir", "epochs", "steps",
    "eval_every", "memory_budget_gb", "link_gbps", "link_latency_us", "tensorboard", "max_restarts", "input_halo"})
"""Config fields that do not change a run's result and may differ on ``--resume``: where the data
and outputs are (the data itself is checked by its fingerprint), how many workers start where (the
world size is checked), how often to save and evaluate, what is shown, and the length (a resumed
run may be extended: ``--epochs`` / ``--steps``), a simulated link's speed (it changes the time only), and
whether the input's halo rows are held or exchanged (the same rows, bit for bit)."""


def _flat(cfg) -> dict:
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if dataclasses.is_dataclass(v):
            out.update(_flat(v))
        else:
            out[f.name] = v
    return out


def run_settings(cfg, free=RESUME_FREE) -> dict:
    """The config fields of ``cfg`` (nested ones flattened) that change the result, as JSON data."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in _flat(cfg).items() if k not in free}


def _defaults(cls) -> dict:
    try:
        return _flat(cls())
    except TypeError:  # a config without defaults for every field
        return {}


def check_settings(snap, saved: dict | None, cfg, free=RESUME_FREE) -> None:
    """Refuse to resume from ``snap`` (settings ``saved``) with a ``cfg`` that would change the
    result: one :class:`~graphdist.errors.ConfigError` line naming every differing field with its
    old and new value. A field the snapshot has no record of (written before the field existed)
    must have the value it had then: ``type(cfg).UNRECORDED[field]`` where the class names one,
    else its default."""
    from graphdist.config import flag_name
    if saved is None:
        raise ConfigError(f"checkpoint {snap} records no run settings (written by an older graphdist), so "
                          "resuming it cannot be checked; start a new --checkpoint-dir")
    now = run_settings(cfg, free)
    defaults = {**_defaults(type(cfg)), **getattr(type(cfg), "UNRECORDED", {})}
    names = {f.name: flag_name(f) for f in _all_fields(type(cfg))}
    diffs = []
    for k, v in now.items():
        old = saved[k] if k in saved else defaults.get(k, v)
        if old != v:
            diffs.append(f"{names.get(k, k)} {_show(old)} -> {_show(v)}")
    if diffs:
        raise ConfigError(f"--resume: checkpoint {snap} was written with other settings ({'; '.join(diffs)}); "
                          "resume with the same settings, or start a new --checkpoint-dir")


def state_layout(state: dict) -> dict:
    """``{key: global shape}`` of the tensors of a DCP state dict (ShardedTensor and DTensor by
    their whole size), keyed as DCP stores them."""
    from graphdist.torch_internals import dcp_flat_shapes
    return dcp_flat_shapes(state)


def layout_diff(saved: dict, want: dict, most: int = 3) -> str:
    """What keeps a snapshot of tensor layout ``saved`` from filling a state of layout ``want``
    (both :func:`state_layout`): the keys it lacks and the shapes that differ, the first
    ``most`` of each; "" when every wanted tensor is there with its shape. Keys the snapshot has
    beyond ``want`` are not read."""
    missing = [k for k in want if k not in saved]
    shapes = [f"{k} {list(saved[k])} -> {list(want[k])}" for k in want if k in saved and saved[k] != want[k]]
    out = []
    if missing:
        more = ", ..." if len(missing) > most else ""
        out.append(f"{len(missing)} tensors it does not hold ({', '.join(missing[:most])}{more})")
    if shapes:
        out.append(f"{len(shapes)} of other shapes ({'; '.join(shapes[:most])}{'; ...' if len(shapes) > most else ''})")
    return " and ".join(out)


def partition_id(owned) -> str:
    """Which rows each rank owns, as one hash over all ranks (collective): a checkpoint holding
    state by rank position (table rows, stale halo rows) only fits the same partition."""
    import hashlib
    mine = hashlib.blake2b(owned.cpu().numpy().tobytes(), digest_size=8).hexdigest()
    return hashlib.blake2b("/".join(comm.all_gather_json(mine)).encode(), digest_size=8).hexdigest()


def resuming(cfg) -> bool:
    """Whether this run continues from a checkpoint: ``--resume``, or ``--resume auto`` when
    ``--checkpoint-dir`` holds one (its ``latest``). With ``--max-restarts`` a restarted worker
    group decides again, so it continues from the checkpoint its failed predecessor wrote."""
    if cfg.resume == "auto":
        return bool(cfg.checkpoint_dir) and (Path(cfg.checkpoint_dir) / "latest").is_file()
    return bool(cfg.resume)


def recorded_setting(cfg, name: str, unrecorded=None):
    """On ``--resume``, the value of setting ``name`` in the latest checkpoint's settings (what
    the checkpointed run resolved, e.g. ``halo`` or ``halo_rounds``), ``unrecorded`` when that
    checkpoint was written before the setting existed; None without a checkpoint."""
    if not (resuming(cfg) and cfg.checkpoint_dir):
        return None
    ck = Checkpointer(cfg.checkpoint_dir)
    snap = ck.latest()
    if snap is None:
        return None
    return (ck.read_meta(snap).get("settings") or {}).get(name, unrecorded)


def with_recorded(cfg, name: str):
    """``cfg`` with setting ``name`` as the checkpointed run resolved it, when ``cfg`` leaves it to
    be chosen (0) and resumes: a resumed run keeps the choice (``type(cfg).UNRECORDED[name]``
    for a checkpoint written before the setting existed). Otherwise ``cfg`` unchanged."""
    if getattr(cfg, name) or not resuming(cfg):
        return cfg
    unrecorded = getattr(type(cfg), "UNRECORDED", {}).get(name)
    return dataclasses.replace(cfg, **{name: int(recorded_setting(cfg, name, unrecorded) or 0)})


def _all_fields(cls):
    import typing
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints.get(f.name)):
            yield from _all_fields(hints[f.name])
        else:
            yield f


def _show(v) -> str:
    if isinstance(v, list):
        return ",".join(map(str, v)) if v else "[]"
    return str(v)


def interrupted(signum: int, progress: str, ckpt: "Checkpointer | None", saved, checkpoint_dir) -> Interrupted:
    """The one line a trainer stops with on SIGINT / SIGTERM: where it stopped (``progress``, e.g.
    ``"epoch 5 of 100"``) and which checkpoint ``--resume`` continues from."""
    import signal
    if ckpt is None:
        where = "no checkpoint (no --checkpoint-dir)"
    elif saved:
        where = f"latest checkpoint {ckpt.path(saved)}; continue with --resume"
    else:
        where = f"no checkpoint in {checkpoint_dir} yet"
    return Interrupted(f"{signal.Signals(signum).name} after {progress}; {where}", signum)
