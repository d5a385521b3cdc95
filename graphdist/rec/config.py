"""Typed configuration of ``graphdist train-rec``; the CLI flags are generated from it
(:mod:`graphdist.config`). Defaults are the LightGCN paper's / reference code's."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from graphdist.config import RunConfig, check_choices
from graphdist.errors import ConfigError
from graphdist.launch import Nodes
from partitioners import METHODS


@dataclass
class RecConfig(RunConfig):
    """Everything one ``graphdist train-rec`` run needs (the same on every rank)."""

    UNRECORDED: ClassVar[dict] = {"halo_rounds": 1}
    """What a setting was in effect in a checkpoint written before the setting existed."""

    spec: str | None = field(default=None, metadata={"positional": True, "metavar": "SPEC"})
    """interaction data: ratings:FILE, lightgcn:DIR or rec-synth:... (not needed with --partition; given
    there too, the artifact must be cut from it)"""
    partition: str | None = field(default=None, metadata={"metavar": "DIR"})
    """recommender partition artifact (`graphdist partition SPEC --parts K --out DIR`): each rank reads
    only its part and its interactions, never the whole log"""
    parts: int | None = None
    """number of parts K when partitioning in-process (= number of workers; default: --nproc)"""
    method: Literal[METHODS] = "auto"
    """partition method when partitioning in-process"""
    nproc: int | None = None
    """start N local workers (default: the number of parts, divided by --nnodes); ignored under torchrun"""
    nodes: Nodes = field(default_factory=Nodes)
    """multi-node jobs"""
    dim: int = 64
    """embedding size"""
    layers: int = 3
    """propagation layers L (the final embedding is the mean of layers 0..L)"""
    lr: float = 1e-3
    """Adam learning rate"""
    l2: float = 1e-4
    """L2 regularisation of the batch's layer-0 embeddings (the reference's --decay)"""
    batch_size: int = 2048
    """BPR triples per step (global: the same batches at any number of ranks)"""
    epochs: int = 1000
    """training epochs; an epoch draws as many triples as there are training interactions"""
    steps: int | None = None
    """stop after N training steps (batches) in all, the last epoch cut short (a fixed amount of work
    at a large batch; the report and the summary line say so)"""
    topk: int = 20
    """K of recall@K and NDCG@K"""
    eval_users: int | None = None
    """evaluate on a fixed random sample of N of the users with test items (the same users at any k;
    default: all of them)"""
    eval_every: int = 0
    """also evaluate every N epochs (0 = only after the last epoch)"""
    halo: Literal["plain", "mvc"] = "mvc"
    """halo exchange of each propagation layer: plain sends every halo row raw; mvc sends, per peer
    pair, raw rows or pre-aggregated partial sums as a minimum vertex cover of the cut picks (exact,
    fewer rows)"""
    halo_bits: Literal[32, 16, 8, 4, 2] = 32
    """bits per halo value in flight, forward and backward: 32 = float32 (exact); 16, 8, 4, 2 =
    per-row offset and scale, stochastic rounding, packed bytes (fewer bytes, not exact)"""
    halo_rounds: int = 0
    """move each layer's halo exchange in R smaller all-to-alls, each round's rows multiplied in and
    freed as they arrive (about 2/R of the exchange's buffers held at once; exact up to float
    rounding); 0 = the fewest that keep one round's rows under 16 MiB a rank, at most 8"""
    eval_halo_bits: Literal[32, 16, 8, 4, 2] = 32
    """bits per halo value when propagating for evaluation (32 = exact float32 rows, whatever
    --halo-bits training uses, so recall/NDCG have no rounding noise of their own)"""
    init_std: float = 0.1
    """standard deviation of the normal initial embeddings"""
    seed: int = 0
    """seed for partitioning, initialisation and sampling"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto (CUDA when available), cpu or cuda; one GPU per local rank"""
    malloc_mmap_mb: int = 4
    """CPU: tensors above N MiB get their own mmap, so freed memory returns to the OS at once (the
    per-step temporaries otherwise fragment glibc's heap); 0 = glibc default"""
    timeout_s: float = field(default=300.0, metadata={"flag": "--timeout"})
    """collective timeout in seconds: a silent peer makes the others fail after this long (rank 0
    partitioning a spec in-process is waited for without it)"""
    summary: bool = field(default=True, metadata={"cli": False})
    """print the one-line result summary on rank 0"""

    def validate(self) -> None:
        check_choices(self)
        self.nodes.validate()
        if not self.spec and not self.partition:
            raise ConfigError("give the interaction data SPEC (ratings:FILE, lightgcn:DIR or rec-synth:...) or "
                              "--partition DIR (an artifact of `graphdist partition SPEC --parts K --out DIR`)")
        for name, v, lo in (("dim", self.dim, 1), ("layers", self.layers, 0), ("batch-size", self.batch_size, 1),
                            ("epochs", self.epochs, 1), ("topk", self.topk, 1), ("eval-every", self.eval_every, 0),
                            ("checkpoint-every", self.checkpoint_every, 1), ("malloc-mmap-mb", self.malloc_mmap_mb, 0),
                            ("keep-checkpoints", self.keep_checkpoints, 1)):
            if v < lo:
                raise ConfigError(f"--{name} must be >= {lo}, got {v}")
        if self.lr <= 0 or self.l2 < 0 or self.init_std <= 0:
            raise ConfigError(f"--lr and --init-std must be > 0 and --l2 >= 0, got {self.lr}, {self.init_std} "
                              f"and {self.l2}")
        for name, v in (("parts", self.parts), ("nproc", self.nproc), ("steps", self.steps),
                        ("eval-users", self.eval_users)):
            if v is not None and v < 1:
                raise ConfigError(f"--{name} must be >= 1, got {v}")
        if not 0 <= self.halo_rounds <= 64:
            raise ConfigError(f"--halo-rounds must be in 0..64, got {self.halo_rounds}")
        if self.resume and not self.checkpoint_dir:
            raise ConfigError("--resume needs --checkpoint-dir")

    def check_outputs(self) -> None:
        """Every output path is writable, before any work (one line naming the flag otherwise)."""
        from graphdist.fileio import check_run_outputs
        check_run_outputs(self)
