"""Typed configuration of ``graphdist train-gcn``; the CLI flags are generated from it
(:mod:`graphdist.config`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from graphdist.config import RunConfig, check_choices
from graphdist.errors import ConfigError
from graphdist.launch import Nodes
from partitioners import METHODS


BUILTIN_MODELS = ("gcn", "sage")
"""``--model`` values that run graphdist's own layers (:mod:`graphdist.gnn.models`); every
other value is a PyG model (:mod:`graphdist.gnn.pyg.models`)."""
PYG_MODELS = ("gat", "gatv2", "gin", "gcn2", "sage-max", "transformer")
"""The names of the built-in PyG models (the keys of :data:`graphdist.gnn.pyg.models.BUILTIN`, held
equal by a test): the command checks such a name without importing PyG (3-4 s of CPU), which only
its workers need."""


@dataclass
class GCNConfig(RunConfig):
    """Everything one ``graphdist train-gcn`` run needs (the same on every rank)."""

    UNRECORDED: ClassVar[dict] = {"halo_rounds": 1}
    """What a setting was in effect in a checkpoint written before the setting existed."""

    spec: str | None = field(default=None, metadata={"positional": True, "metavar": "SPEC"})
    """dataset spec (partitioned in-process); with --partition, the artifact must have been cut from it"""
    partition: str | None = field(default=None, metadata={"metavar": "DIR"})
    """partition artifact directory from `graphdist partition` (each rank reads only its part)"""
    parts: int | None = None
    """number of parts K when partitioning SPEC in-process (= number of workers; default: --nproc)"""
    method: Literal[METHODS] = "auto"
    """partition method when partitioning in-process"""
    nproc: int | None = None
    """start N local workers (default: the number of parts, divided by --nnodes); ignored under torchrun"""
    nodes: Nodes = field(default_factory=Nodes)
    """multi-node jobs"""
    model: str = field(default="gcn", metadata={"metavar": "NAME|MODULE:CLASS"})
    """gcn (Kipf & Welling) or sage (GraphSAGE mean with root weight): graphdist's own fast layers;
    gat, gatv2, gin, gcn2, sage-max, transformer: PyG layers (graphdist.gnn.pyg.models); or
    MODULE:CLASS, a PyG model class built as CLASS(in_channels, hidden, out_channels,
    num_layers, dropout) and called as forward(x, edge_index)"""
    layers: int = 2
    """graph convolution layers"""
    hidden: int = 16
    """hidden width"""
    dropout: float = 0.5
    """dropout probability before every layer (training only)"""
    lr: float = 0.01
    """Adam learning rate"""
    weight_decay: float = 5e-4
    """L2 weight decay (Adam) on the first layer (Kipf), or on all layers with --weight-decay-all"""
    weight_decay_all: bool = False
    """apply --weight-decay to every layer, not only the first"""
    epochs: int = 200
    """training epochs (a resumed run continues up to this number)"""
    seed: int = 0
    """seed for partitioning, initialisation and dropout"""
    batch_norm: bool = False
    """batch norm between layers, statistics over all ranks' nodes"""
    row_normalize: bool = False
    """divide each feature row by its sum (Kipf's Cora preprocessing)"""
    patience: int = 0
    """early stopping: stop after N epochs without a better validation accuracy (0 = never)"""
    halo: Literal["plain", "mvc", "auto"] = "mvc"
    """halo exchange: plain sends every halo row raw; mvc sends, per peer pair, raw rows or
    pre-aggregated partial sums as a minimum vertex cover of the cut picks (exact, fewer rows);
    auto picks the one with the lower predicted epoch time (rates and link measured at start-up)"""
    halo_route: Literal["direct", "hosts"] = "direct"
    """direct: every message row goes straight to each rank that needs it; hosts: a raw halo row
    crosses to another host once, to one rank there that needs it, which forwards it to the others
    of its host (hosts from the launcher: a node's ranks; partial sums and rows inside a host go
    direct); the same values forward, backward sums in another order. With one host or one rank
    per host it is the direct route. Float rows, one round, fresh halos, graphdist's own models"""
    halo_bits: Literal[32, 16, 8, 4, 2] = 32
    """bits per halo value in flight, forward and backward: 32 = float32 (exact); 16, 8, 4, 2 =
    per-row offset and scale, stochastic rounding, packed bytes (fewer bytes, not exact)"""
    halo_error: float = 0.01
    """error budget of --halo auto (with --halo-bits 32, graphdist's own models): after the first
    epoch (exact, which measures the rows), each layer's forward and backward exchange travels at
    the width (32, 16, 8, 4, 2 bits) of the lowest predicted time whose expected relative error
    ||x_hat - x|| / ||x|| (comm/halo_rel_error) is at most E; 0 = exact rows only"""
    input_halo: Literal["resident", "exchange"] = "resident"
    """the first layer's input halo rows: resident = received once at start-up and held (the
    dropout mask drawn locally, keyed by global id: the same rows, bit for bit), so the first
    layer exchanges nothing; exchange = sent every epoch. resident falls back to exchange (and
    says so) when the rows do not fit memory, and with --halo-bits below 32, --halo-staleness,
    --boundary-rate, --label-rate or --halo auto choosing widths per layer"""
    halo_rounds: int = 0
    """move each exchange in N all-to-alls, each carrying a slice of every peer's rows that is
    multiplied in and freed as it arrives, so about 2/N of the exchange's buffers are live at
    once (SAR's sequential aggregation; gcn and sage). 0 = the fewest of 1, 2, 4, ..., 64 whose
    predicted peak fits this machine's memory (on CPU; 1 on CUDA, at k = 1, with PyG models,
    stale halos or boundary sampling). The same sum in another order: exact up to float rounding"""
    eval_halo_bits: Literal[32, 16, 8, 4, 2] = 32
    """bits per halo value in the evaluation pass (32 = exact float32 rows, whatever --halo-bits
    training uses, so test accuracy has no rounding noise of its own)"""
    halo_staleness: Literal[0, 1] = 0
    """0 = exact halos; 1 = PipeGCN: remote layer inputs (forward) and halo gradients
    (backward) come from the previous epoch, and each exchange runs behind a whole epoch of
    compute; the first epoch uses fresh (exact) rows; evaluation stays exact"""
    staleness_smoothing: float = 0.0
    """PipeGCN-GF: with --halo-staleness 1, use s = gamma s + (1 - gamma) stale rows, for
    features and gradients alike (0 = off, the rows as they came)"""
    boundary_rate: float = 1.0
    """BNS-GCN: each training epoch keeps each boundary node with probability P (keyed by seed,
    epoch and global node id, so every rank decides alike); dropped ones' cut edges are removed,
    kept ones' scaled by 1/P, and only kept rows are exchanged (mvc: partial sums always). 1 =
    exact; evaluation is exact"""
    label_rate: float = 0.0
    """masked label embedding (UniMP, SuperGCN's companion of 2-bit halos): each epoch a share
    of the training nodes, drawn by global id, feed their label into the input (the loss is
    taken on the others); evaluation feeds every training label. 0 = off; 0.62 as SuperGCN"""
    link_gbps: float = 0.0
    """simulated network: every halo exchange arrives no earlier than its bytes / G gigabits per
    second after it was posted (plus --link-latency-us), so a network can be modelled on one
    host; 0 = no delay. Changes the time only, not the result"""
    link_latency_us: float = 0.0
    """simulated network: latency of every halo exchange in microseconds (0 = none)"""
    reorder: Literal["blocks", "rcm", "community", "degree", "none"] = "blocks"
    """order of a rank's owned rows for SpMM locality: blocks (METIS blocks whose input rows fit
    16 MiB of cache, each in reverse Cuthill-McKee order; plain rcm when the part's input fits),
    rcm (reverse Cuthill-McKee of the whole owned block), community (grouped by label
    propagation), degree (descending) or none (global id order); the result does not depend on
    it beyond float rounding"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto (CUDA when available), cpu or cuda; one GPU per local rank"""
    timeout_s: float = field(default=300.0, metadata={"flag": "--timeout"})
    """collective timeout in seconds: a silent peer makes the others fail after this long (rank 0
    partitioning a spec in-process is waited for without it)"""
    malloc_mmap_mb: int = 4
    """CPU: tensors above N MiB get their own mmap, so freed memory returns to the OS at once
    (measured at 1M nodes, k=4: per-rank peak 0.37x of one process with 4, 0.44-0.46x with
    glibc's default; costs page faults). 0 = glibc default"""
    summary: bool = field(default=True, metadata={"cli": False})
    """print the one-line result summary on rank 0 (the demo prints its own)"""

    def validate(self) -> None:
        check_choices(self)
        self.nodes.validate()
        if self.spec is None and self.partition is None:
            raise ConfigError("give a dataset SPEC or --partition DIR")
        for name, v, lo in (("layers", self.layers, 1), ("hidden", self.hidden, 1), ("epochs", self.epochs, 1),
                            ("checkpoint-every", self.checkpoint_every, 1), ("patience", self.patience, 0),
                            ("keep-checkpoints", self.keep_checkpoints, 1)):
            if v < lo:
                raise ConfigError(f"--{name} must be >= {lo}, got {v}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"--dropout must be in [0, 1), got {self.dropout}")
        if not 0.0 <= self.label_rate < 1.0:
            raise ConfigError(f"--label-rate must be in [0, 1), got {self.label_rate}")
        for name, v in (("link-gbps", self.link_gbps), ("link-latency-us", self.link_latency_us)):
            if not v >= 0:
                raise ConfigError(f"--{name} must be >= 0, got {v}")
        if not 0.0 <= self.halo_error < 1.0:
            raise ConfigError(f"--halo-error must be in [0, 1), got {self.halo_error}")
        if not 0.0 <= self.staleness_smoothing < 1.0:
            raise ConfigError(f"--staleness-smoothing must be in [0, 1), got {self.staleness_smoothing}")
        if self.staleness_smoothing > 0 and self.halo_staleness == 0:
            raise ConfigError("--staleness-smoothing smooths stale halo rows: it needs --halo-staleness 1")
        if not 0.0 < self.boundary_rate <= 1.0:
            raise ConfigError(f"--boundary-rate must be in (0, 1], got {self.boundary_rate}")
        if not 0 <= self.halo_rounds <= 64:
            raise ConfigError(f"--halo-rounds must be in 0..64, got {self.halo_rounds}")
        if self.halo_rounds > 1 and (self.halo_staleness or self.boundary_rate < 1.0):
            raise ConfigError("--halo-rounds above 1 cannot be combined with --halo-staleness 1 or --boundary-rate "
                              "below 1 (their exchanges move whole)")
        if self.boundary_rate < 1.0 and self.halo_staleness:
            raise ConfigError("--boundary-rate below 1 and --halo-staleness 1 cannot be combined (the rows held "
                              "from one epoch would not be the rows the next epoch samples)")
        if self.halo_route == "hosts":
            self._check_route()
        if self.lr <= 0 or self.weight_decay < 0:
            raise ConfigError(f"--lr must be > 0 and --weight-decay >= 0, got {self.lr} and {self.weight_decay}")
        for name, v in (("parts", self.parts), ("nproc", self.nproc)):
            if v is not None and v < 1:
                raise ConfigError(f"--{name} must be >= 1, got {v}")
        if self.resume and not self.checkpoint_dir:
            raise ConfigError("--resume needs --checkpoint-dir")
        if self.model not in BUILTIN_MODELS:
            self._check_pyg_model()

    def _check_route(self) -> None:
        """``--halo-route hosts`` with the flags it does not take: one line naming them."""
        bad = [f for f, on in (("--halo auto", self.halo == "auto"),
                               (f"--halo-bits {self.halo_bits}", self.halo_bits < 32),
                               (f"--eval-halo-bits {self.eval_halo_bits}", self.eval_halo_bits < 32),
                               (f"--halo-rounds {self.halo_rounds}", self.halo_rounds > 1),
                               ("--halo-staleness 1", self.halo_staleness > 0),
                               (f"--boundary-rate {self.boundary_rate:g}", self.boundary_rate < 1.0),
                               ("--link-gbps / --link-latency-us", self.link_gbps > 0 or self.link_latency_us > 0),
                               (f"--model {self.model}", self.model not in BUILTIN_MODELS)) if on]
        if bad:
            raise ConfigError(f"--halo-route hosts cannot be combined with {', '.join(bad)} (it moves float32 rows, "
                              "fresh, in one round, for --halo plain|mvc and --model gcn|sage)")

    def _check_pyg_model(self) -> None:
        """A PyG ``--model``: the name or ``MODULE:CLASS`` resolves, and no flag of graphdist's own
        models is set."""
        for flag, on in (("--batch-norm", self.batch_norm), ("--label-rate", self.label_rate > 0),
                         ("--halo-rounds", self.halo_rounds > 1)):
            if on:
                hint = "; a MODULE:CLASS model may hold its own BatchNorm1d" if flag == "--batch-norm" else ""
                raise ConfigError(f"{flag} applies to --model gcn|sage only (graphdist's own layers), not to "
                                  f"--model {self.model}{hint}")
        if self.model in PYG_MODELS:
            return
        from graphdist.gnn.pyg.models import model_class
        model_class(self.model)  # MODULE:CLASS: the user's module is imported (it imports PyG)

    def check_outputs(self) -> None:
        """Every output path is writable, before any work (one line naming the flag otherwise)."""
        from graphdist.fileio import check_run_outputs
        check_run_outputs(self)
