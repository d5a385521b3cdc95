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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from graphdist.errors import ArtifactError, ConfigError, MissingFileError
from graphdist.launch import Nodes
from partitioners import METHODS

__all__ = ["Trained", "open_checkpoint", "trainer_of", "exporter", "TRAINERS", "ExportConfig", "export"]

TRAINERS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "gcn": (("model", "hidden", "layers", "row_normalize"), "train-gcn (GCN / GraphSAGE / PyG model)",
            "graphdist.gnn.export:export_gcn"),
    "rec": (("dim", "layers", "topk", "init_std"), "train-rec (LightGCN)", "graphdist.rec.export:export_rec"),
    "dlrm": (("embedding_dim", "dense_arch", "over_arch", "embedding_optimizer"), "train-dlrm (DLRM / DCNv2)",
             "embeddings.export:export_dlrm"),
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

    def check_fingerprint(self, fingerprint: str, what: str, elsewhere: str = "") -> None:
        """Refuse, naming both, a graph other than the one the checkpoint was trained on;
        ``elsewhere``: what the user can do for another graph, appended to the line."""
        if self.fingerprint != fingerprint:
            raise ArtifactError(f"--checkpoint-dir {self.root} was trained on a graph with fingerprint "
                                f"{self.fingerprint}, but {what} has fingerprint {fingerprint} (another graph)"
                                + (f"; {elsewhere}" if elsewhere else ""))

    def layout(self) -> dict:
        """``{key: shape}`` of every tensor the snapshot holds (DCP's flattened keys)."""
        from graphdist.checkpoint import Checkpointer
        return Checkpointer(self.root).layout(self.snap)

    def load(self, state: dict, group=None) -> None:
        """Fill ``state`` (a DCP state dict: only the tensors wanted) from the snapshot. Collective
        when a process group exists (every rank reads the replicated tensors it needs); one
        process without one reads alone."""
        import warnings

        from graphdist.checkpoint import Checkpointer
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            Checkpointer(self.root, pg=group).load(self.snap, state)

    def tensors(self, prefix: str) -> dict:
        """Every tensor of the snapshot under ``prefix.`` (e.g. ``model``), read whole into this
        process: ``{name without the prefix: tensor}``, in the checkpoint's order."""
        import torch
        from torch.distributed.checkpoint import FileSystemReader
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata
        md = FileSystemReader(str(self.snap)).read_metadata().state_dict_metadata
        want = {k[len(prefix) + 1:]: torch.empty(tuple(v.size), dtype=v.properties.dtype) for k, v in md.items()
                if k.startswith(prefix + ".") and isinstance(v, TensorStorageMetadata)}
        self.load({prefix: want})
        return want


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


@dataclass
class ExportConfig:
    """``graphdist export``: a trained model that leaves graphdist (:data:`TRAINERS` says how
    each trainer's checkpoint is written out)."""

    halo_bits = 32  # (the graph job checks read it: the recommender's vectors move float32 rows)

    spec: str | None = field(default=None, metadata={"positional": True, "metavar": "SPEC"})
    """a recommender's interaction data (its final vectors propagate over the user-item graph;
    a GCN checkpoint needs no data)"""
    partition: str | None = field(default=None, metadata={"metavar": "DIR"})
    """a recommender's partition artifact instead of SPEC (each rank reads only its part)"""
    checkpoint_dir: str = field(default="", metadata={"required": True, "metavar": "DIR"})
    """the training run's --checkpoint-dir (its latest snapshot)"""
    out: str = field(default="", metadata={"required": True, "metavar": "DIR"})
    """output folder (GCN, DLRM: model.py, model.pt, model.json; recommender: users.parquet, items.parquet)"""
    overwrite: bool = False
    """replace an existing, non-empty --out"""
    quantize: Literal["none", "int8"] = "none"
    """DLRM: int8 writes the embedding tables row-wise int8 for serving (torchrec's inference
    quantisation: D + 4 bytes a row, padded to 16; 0.31x of float32 at --embedding-dim 64)"""
    parts: int | None = None
    """number of parts K when partitioning SPEC in-process (recommender; default: --nproc)"""
    method: Literal[METHODS] = "auto"
    """partition method when partitioning in-process (recommender)"""
    seed: int = 0
    """seed of the in-process partition (recommender)"""
    nproc: int | None = None
    """start N local workers (recommender; default: the number of parts); ignored under torchrun"""
    nodes: Nodes = field(default_factory=Nodes)
    """multi-node jobs"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto (CUDA when available), cpu or cuda"""
    timeout_s: float = field(default=300.0, metadata={"flag": "--timeout"})
    """collective timeout in seconds"""
    malloc_mmap_mb: int = 4
    """CPU: tensors above N MiB get their own mmap"""
    report: str | None = field(default=None, metadata={"cli": False})
    """(the job machinery's report file; export prints what it wrote)"""
    summary: bool = field(default=True, metadata={"cli": False})
    """print the one-line summary"""

    def validate(self) -> None:
        from graphdist.config import check_choices
        check_choices(self)
        self.nodes.validate()
        if not self.checkpoint_dir or not self.out:
            raise ConfigError("--checkpoint-dir and --out are required")

    def check_outputs(self) -> None:
        from graphdist.outputs import check_out
        check_out(self.out, self.overwrite)


def export(cfg: ExportConfig) -> dict:
    """Check ``cfg`` and its output, open the checkpoint and hand it to its trainer's exporter."""
    cfg.validate()
    cfg.check_outputs()
    tr = open_checkpoint(cfg.checkpoint_dir)
    name = tr.trainer
    if name is None:
        raise ConfigError(f"--checkpoint-dir {cfg.checkpoint_dir}: a checkpoint of an unknown trainer (export knows "
                          f"{', '.join(TRAINERS[t][1] for t in TRAINERS)})")
    if cfg.quantize != "none" and name != "dlrm":
        raise ConfigError(f"--quantize {cfg.quantize}: only for a checkpoint of {TRAINERS['dlrm'][1]}; "
                          f"--checkpoint-dir {cfg.checkpoint_dir} is one of {TRAINERS[name][1]}")
    return exporter(name)(tr, cfg)
