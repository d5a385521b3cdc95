"""Typed configuration of ``graphdist train-dlrm``; the CLI flags are generated from it
(:mod:`graphdist.config`), nested :class:`~embeddings.model.ModelConfig` fields included."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from embeddings.model import ModelConfig
from embeddings.sharding import SHARDING_TYPES
from graphdist.config import RunConfig, check_choices
from graphdist.launch import Nodes
from graphdist.errors import ConfigError

SHARDING_CHOICES = ("auto", *SHARDING_TYPES)
EMB_OPTIMIZERS = ("rowwise_adagrad", "rowwise_adagrad_scaled", "adagrad", "adam", "sgd")
DENSE_OPTIMIZERS = ("adagrad", "adam", "sgd")


@dataclass
class DLRMTrainConfig(RunConfig):
    """Everything a DLRM training run needs; same values on every rank."""

    spec: str = field(default="criteo-synth:", metadata={"positional": True, "metavar": "SPEC"})
    """training data: criteo:PATH (a TSV, CSV or Parquet file; a directory of day_* or *.parquet files)
    or criteo-synth:k=v,..."""
    nproc: int = 1
    """local worker processes (per node with --nnodes); ignored under torchrun"""
    nodes: Nodes = field(default_factory=Nodes)
    """multi-node jobs"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto (CUDA when available), cpu or cuda; one GPU per local rank"""
    eval_data: str | None = field(default=None, metadata={"group": "eval", "metavar": "SPEC"})
    """separate evaluation data spec (instead of holding out --eval-fraction)"""
    eval_fraction: float = field(default=0.2, metadata={"group": "eval"})
    """hold out the last fraction of the rows (time order) for evaluation, in (0, 1)"""
    sharding: Literal[SHARDING_CHOICES] = "auto"
    """auto (torchrec's planner) or one sharding type for every table"""
    batch_size: int = 256
    """GLOBAL batch size, split evenly across ranks (losses do not depend on the world size)"""
    eval_batch_size: int = 4096
    """global batch size for evaluation"""
    epochs: int = field(default=1, metadata={"group": "length"})
    """passes over the training rows"""
    steps: int | None = field(default=None, metadata={"group": "length"})
    """total optimizer steps instead of --epochs (batches in order, wrapping around)"""
    seed: int = 0
    """seeds data generation and model initialisation"""
    model: ModelConfig = field(default_factory=ModelConfig)
    """model shape"""
    embedding_optimizer: Literal[EMB_OPTIMIZERS] = "rowwise_adagrad"
    """fused optimizer of the embedding tables (adam: GPU only, FBGEMM's CPU kernels have none);
    rowwise_adagrad_scaled: momentum-scaled row-wise AdaGrad for 2D sparse parallelism (after
    arXiv 2508.03854), the step lr / (sqrt(v / G) + eps) with G = --sparse-groups
    (= rowwise_adagrad at G = 1)"""
    embedding_lr: float = 0.02
    """learning rate of the embedding optimizer"""
    dense_optimizer: Literal[DENSE_OPTIMIZERS] = "adagrad"
    """optimizer of the dense (data-parallel) layers"""
    dense_lr: float = 0.01
    """learning rate of the dense optimizer"""
    num_embeddings_per_feature: list[int] | None = None
    """rows of each of the 26 tables, comma-separated (ids are hashed modulo this)"""
    num_embeddings: int | None = None
    """one table size for every feature (criteo: the hash size, default 100000; synth: a cap)"""
    skip_bad_lines: bool = False
    """skip (and count) malformed Criteo lines instead of stopping at the first one"""
    cache_dir: str | None = field(default=None, metadata={"metavar": "DIR"})
    """where the Criteo binary cache goes (default: $XDG_CACHE_HOME/graphdist/criteo, else ~/.cache/graphdist/criteo)"""
    pipeline: bool | None = None
    """torchrec's TrainPipelineSparseDist (input all-to-all of batch i+1 overlaps batch i);
    automatic: on with CUDA, off on CPU, where it measured about 10% more CPU time per step"""
    sparse_groups: int | Literal["auto"] = 1
    """2D sparse parallelism: G replicas of the sharded embedding model; each table is sharded
    over a group of W/G ranks (all-to-all inside it) and the G replicas average their shards and
    optimizer state every --sync-every steps (on CPU only the rows looked up since the last sync;
    on CUDA torchrec DMPCollection, whole shards). 1: every table is sharded over all W ranks.
    auto: the layout (1D, or G and --sparse-layout) with the lowest estimated step time that fits
    --memory-budget-gb, from the tables, the batch and the links measured at start-up (kept on
    --resume)"""
    sparse_layout: Literal["hosts", "torchrec"] = "hosts"
    """with --sparse-groups > 1, which ranks form a sharding group (ranks are host-major, as
    torchrun numbers them): hosts, S = W/G consecutive ranks, so the all-to-all stays inside a
    node when S divides the ranks per node and the replica sync crosses nodes; torchrec, every
    G-th rank (DMPCollection's default), so the sync stays inside a node when G divides the
    ranks per node and the all-to-all crosses nodes. Both train the same model"""
    sync_every: int = 1
    """with --sparse-groups > 1: average the embedding replicas every N steps (also at the end
    and before every checkpoint)"""
    memory_budget_gb: float | None = None
    """per-rank memory for embeddings + optimizer state; a plan that needs more stops
    (default: device memory, or host RAM / local ranks on CPU; on CPU the ranks of a host must
    also fit together in the memory it has available)"""
    checkpoint_every: int = 0
    """save every N steps (0: only at the end when --checkpoint-dir is set)"""
    print_plan: bool = field(default=True, metadata={"cli": False})
    """print the sharding plan table on rank 0"""

    def validate(self) -> None:
        check_choices(self)
        self.nodes.validate()
        if not 0.0 < self.eval_fraction < 1.0:
            raise ConfigError(f"--eval-fraction must be in (0, 1), got {self.eval_fraction}")
        for flag, v in (("--batch-size", self.batch_size), ("--nproc", self.nproc),
                        ("--embedding-dim", self.model.embedding_dim), ("--eval-batch-size", self.eval_batch_size),
                        ("--epochs", self.epochs), ("--keep-checkpoints", self.keep_checkpoints)):
            if v < 1:
                raise ConfigError(f"{flag} must be >= 1, got {v}")
        if self.steps is not None and self.steps < 1:
            raise ConfigError(f"--steps must be >= 1, got {self.steps}")
        if self.checkpoint_every < 0:
            raise ConfigError(f"--checkpoint-every must be >= 0, got {self.checkpoint_every}")
        if self.sparse_groups != "auto" and self.sparse_groups < 1:
            raise ConfigError(f"--sparse-groups must be >= 1 or auto, got {self.sparse_groups}")
        if self.sync_every < 1:
            raise ConfigError(f"--sync-every must be >= 1, got {self.sync_every}")
        if self.memory_budget_gb is not None and self.memory_budget_gb <= 0:
            raise ConfigError(f"--memory-budget-gb must be > 0, got {self.memory_budget_gb}")
        if self.resume and not self.checkpoint_dir:
            raise ConfigError("--resume needs --checkpoint-dir")

    def check_outputs(self) -> None:
        """Every output path is writable, before any work (one line naming the flag otherwise)."""
        from graphdist.fileio import check_run_outputs
        check_run_outputs(self)
