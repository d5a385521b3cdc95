"""The one checkpoint mechanism of every trainer: torch.distributed.checkpoint, atomic, last N kept.

    ROOT/
      step_00000040/        one snapshot: every rank writes its own shards (DCP), rank 0 adds
        .metadata             meta.json (step, world size, run identity, history so far)
        __0_0.distcp ...
        meta.json
      step_00000050/
      latest                text file naming the newest complete snapshot

:meth:`Checkpointer.save` is collective. It writes into ``step_<t>.tmp/``; after a barrier rank 0
adds ``meta.json``, renames the directory to ``step_<t>/``, replaces ``latest`` (temp file +
``os.replace``) and removes snapshots beyond the newest ``keep``. A crash at any point leaves
``latest`` naming a complete snapshot (or no ``latest`` at all). Replicated tensors (dense
weights that are equal on every rank) are stored once; sharded ones (torchrec ShardedTensors)
by their owners. ``ROOT`` must be one directory that every rank sees (a shared filesystem
across nodes).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from graphdist import comm
from graphdist.errors import ArtifactError, Interrupted, MissingFileError
from graphdist.fileio import atomic_write_json, atomic_write_text

__all__ = ["Checkpointer"]

_META = "meta.json"
_LATEST = "latest"


class Checkpointer:
    """Snapshots of one run in ``root``; the newest ``keep`` are kept (``keep >= 1``)."""

    def __init__(self, root, keep: int = 2, pg=None):
        self.root = Path(root)
        self.keep = max(1, int(keep))
        self.pg = pg

    def path(self, step: int) -> Path:
        return self.root / f"step_{int(step):08d}"

    def snapshots(self) -> list[Path]:
        """Complete snapshots (with ``meta.json``), oldest first."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.glob("step_*")
                      if p.is_dir() and not p.name.endswith(".tmp") and (p / _META).exists())

    def save(self, step: int, state: dict, meta: dict) -> Path:
        """Write ``state`` (a DCP state dict) and ``meta`` (JSON) as snapshot ``step``."""
        import torch.distributed.checkpoint as dcp
        final = self.path(step)
        tmp = final.with_name(final.name + ".tmp")
        if comm.world(self.pg)[0] == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        comm.barrier(self.pg)
        dcp.save(state, checkpoint_id=str(tmp), process_group=self.pg)
        comm.barrier(self.pg)
        if comm.world(self.pg)[0] == 0:
            atomic_write_json(tmp / _META, {"step": int(step), "world_size": comm.world(self.pg)[1], **meta})
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            atomic_write_text(self.root / _LATEST, final.name + "\n")
            for old in self.snapshots()[:-self.keep]:
                if old != final:
                    shutil.rmtree(old, ignore_errors=True)
        comm.barrier(self.pg)
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

    def load(self, snap, state: dict) -> dict:
        """Fill ``state`` in place from snapshot ``snap``; returns its meta."""
        import torch.distributed.checkpoint as dcp
        snap = Path(snap)
        if not snap.is_dir():
            raise MissingFileError(f"--resume: checkpoint {snap} not found")
        meta = self.read_meta(snap)
        dcp.load(state, checkpoint_id=str(snap), process_group=self.pg)
        return meta


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
