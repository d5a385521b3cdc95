"""A trained run's checkpoint, as the commands that use it read it (``infer``, ``recommend``,
``export``, ``score``): the snapshot ``latest`` names, the run's recorded settings and graph
fingerprint, which trainer wrote it, and the table of exporters.

    tr = open_checkpoint("ckpt/")           # one line if there is none
    tr.require("gcn", "infer")              # a checkpoint of another trainer: one line naming both
    tr.check_fingerprint(graph_fp, "SPEC")  # of another graph: one line naming both fingerprints
    tr.load({"model": model.state_dict()})  # only these tensors (no optimizer state)

The trainer is known by the settings its config records (:data:`TRAINERS`: a field set that
marks it). ``graphdist export`` dispatches on it: each trainer's exporter is a
``"module:function"`` called as ``fn(trained, cfg)`` with the ``ExportConfig`` (the core names
a workload only by such a string). Any number of ranks may read any checkpoint: the settings
give the model's shape, so no training flag is repeated.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from graphdist.errors import ArtifactError, ConfigError, MissingFileError

__all__ = ["Trained", "open_checkpoint", "trainer_of", "exporter", "TRAINERS"]

TRAINERS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "gcn": (("model", "hidden", "layers", "row_normalize"), "train-gcn (GCN / GraphSAGE / PyG model)",
            "graphdist.gnn.export:export_gcn"),
    "rec": (("dim", "layers", "topk", "init_std"), "train-rec (LightGCN)", "graphdist.rec.export:export_rec"),
}
"""``name: (settings that mark its checkpoints, what wrote them, its exporter "module:function")``."""


def trainer_of(settings: dict | None) -> str | None:
    """The :data:`TRAINERS` name whose marking settings ``settings`` all has, else None."""
    if not isinstance(settings, dict):
        return None
    for name, (keys, _, _) in TRAINERS.items():
        if all(k in settings for k in keys):
            return name
    return None


def exporter(name: str):
    """The export function of trainer ``name`` (imported when needed)."""
    mod, fn = TRAINERS[name][2].split(":")
    return getattr(importlib.import_module(mod), fn)


@dataclass
class Trained:
    """One snapshot of a training run's checkpoint directory."""

    root: Path
    """The ``--checkpoint-dir``."""
    snap: Path
    """The snapshot ``latest`` names."""
    meta: dict
    """Its ``meta.json``: step, world size, fingerprint, settings, history."""

    @property
    def settings(self) -> dict:
        """The run's recorded settings (the config fields that change its result)."""
        return self.meta.get("settings") or {}

    @property
    def trainer(self) -> str | None:
        return trainer_of(self.meta.get("settings"))

    @property
    def fingerprint(self) -> str | None:
        return self.meta.get("fingerprint")

    @property
    def step(self) -> int:
        return int(self.meta.get("step", 0))

    def describe(self) -> dict:
        """What the outputs' manifests say about it."""
        return {"checkpoint": str(self.snap), "step": self.step, "trainer": self.trainer,
                "fingerprint": self.fingerprint}

    def require(self, name: str, command: str) -> None:
        """Refuse (one line naming both) a checkpoint written by another trainer than ``name``."""
        have = self.trainer
        if have == name:
            return
        what = TRAINERS[have][1] if have else "an unknown trainer (no recorded settings this graphdist knows)"
        raise ConfigError(f"--checkpoint-dir {self.root}: a checkpoint of {what}, but {command} needs one of "
                          f"{TRAINERS[name][1]}")

    def check_fingerprint(self, fingerprint: str, what: str) -> None:
        """Refuse, naming both, a graph other than the one the checkpoint was trained on."""
        if self.fingerprint != fingerprint:
            raise ArtifactError(f"--checkpoint-dir {self.root} was trained on a graph with fingerprint "
                                f"{self.fingerprint}, but {what} has fingerprint {fingerprint} (another graph)")

    def layout(self) -> dict:
        """``{key: shape}`` of every tensor the snapshot holds (DCP's flattened keys)."""
        from graphdist.checkpoint import Checkpointer
        return Checkpointer(self.root).layout(self.snap)

    def load(self, state: dict, group=None) -> None:
        """Fill ``state`` (a DCP state dict: only the tensors wanted) from the snapshot. Collective
        when a process group exists (every rank reads the replicated tensors it needs)."""
        from graphdist.checkpoint import Checkpointer
        Checkpointer(self.root, pg=group).load(self.snap, state)


def open_checkpoint(checkpoint_dir, flag: str = "--checkpoint-dir") -> Trained:
    """The snapshot ``latest`` names in ``checkpoint_dir`` (one line if there is none)."""
    from graphdist.checkpoint import Checkpointer
    root = Path(checkpoint_dir)
    if not root.is_dir():
        raise MissingFileError(f"{flag} {checkpoint_dir}: no such directory")
    ck = Checkpointer(root)
    snap = ck.latest()
    if snap is None:
        raise MissingFileError(f"{flag} {checkpoint_dir}: no checkpoint there (no 'latest' file; train with "
                               f"--checkpoint-dir {checkpoint_dir})")
    return Trained(root, snap, ck.read_meta(snap))
