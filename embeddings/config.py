"""Typed configuration of ``graphdist train-dlrm`` (CLI flags map one to one onto these fields)."""
from __future__ import annotations

from dataclasses import dataclass, field

from embeddings.model import ModelConfig


@dataclass
class DLRMTrainConfig:
    """Everything a DLRM training run needs; same values on every rank."""

    spec: str = "criteo-synth:"
    """Training data: ``criteo:PATH`` or ``criteo-synth:k=v,...``."""
    eval_data: str | None = None
    """Separate evaluation data spec; when None the last ``eval_fraction`` of ``spec`` is held out."""
    eval_fraction: float = 0.2
    """Fraction of rows (the last ones) held out for evaluation, in (0, 1)."""
    sharding: str = "auto"
    """``auto`` (torchrec planner) or one type for every table: table_wise, row_wise, column_wise,
    table_row_wise, data_parallel."""
    batch_size: int = 512
    """GLOBAL batch size, split evenly across ranks (so losses do not depend on the world size)."""
    eval_batch_size: int = 4096
    """Global batch size for evaluation."""
    epochs: int = 1
    """Passes over the training rows (ignored when ``steps`` is set)."""
    steps: int | None = None
    """Total optimizer steps (batches taken in order, wrapping around the training rows)."""
    seed: int = 0
    """Seeds data generation and model initialisation."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Model shape."""
    embedding_optimizer: str = "rowwise_adagrad"
    """Fused optimizer of the embedding tables: rowwise_adagrad, adagrad, sgd, or adam (GPU only:
    FBGEMM's CPU kernels have no Adam)."""
    embedding_lr: float = 0.05
    """Learning rate of the embedding optimizer."""
    dense_optimizer: str = "adagrad"
    """Optimizer of the dense (data-parallel) layers: adagrad, adam or sgd."""
    dense_lr: float = 0.05
    """Learning rate of the dense optimizer."""
    num_embeddings_per_feature: list[int] | None = None
    """Rows of each of the 26 tables (ids are hashed modulo this)."""
    num_embeddings: int | None = None
    """One table size for every feature (criteo: the hash size; synth: a cap)."""
    skip_bad_lines: bool = False
    """Skip (and count) malformed Criteo lines instead of stopping at the first one."""
    cache_dir: str | None = None
    """Where the Criteo binary cache goes (default: next to the data)."""
    pipeline: bool | None = None
    """Use torchrec's TrainPipelineSparseDist (input all-to-all of batch i+1 overlaps batch i).
    None = auto: on with CUDA (streams overlap the all-to-all), off on CPU, where there is nothing
    to overlap with and it measured about 10 % more CPU time per step (docs/benchmarks/dlrm.md)."""
    memory_budget_gb: float | None = None
    """Per-rank memory for embeddings + optimizer state; a plan that needs more stops (exit 2).
    Default: device memory (GPU) or host RAM / local ranks (CPU)."""
    report: str | None = None
    """Write the JSON report here (rank 0)."""
    checkpoint_dir: str | None = None
    """Directory for torch.distributed.checkpoint snapshots (``step_<t>/`` + ``latest``)."""
    checkpoint_every: int = 0
    """Save every this many steps (0: only at the end when ``checkpoint_dir`` is set)."""
    resume: bool = False
    """Continue from the latest checkpoint in ``checkpoint_dir``."""
    progress: bool = True
    """tqdm bar on rank 0."""
    print_plan: bool = True
    """Print the sharding plan table on rank 0."""
