"""``graphdist train-gcn (SPEC [--parts K --method M] | --partition DIR) [--nproc N] ...``

Without a launcher environment, ``--nproc N`` (default: K, or the artifact's k, or 1) starts N
workers through torch's launcher; inside a worker (or under an external ``torchrun``) this
trains the rank's part. Every flag maps onto :class:`graphdist.trainer.GCNConfig`.
"""
from __future__ import annotations

from pathlib import Path

from graphdist.errors import ConfigError, DistributedError, GraphdistError
from graphdist.trainer import GCNConfig

_FLAGS = {  # GCNConfig field -> (flag, type, help)
    "parts": ("--parts", int, "number of parts K when partitioning SPEC in-process (= number of workers)"),
    "method": ("--method", str, "partition method for in-process partitioning (default: auto)"),
    "model": ("--model", str, "gcn (Kipf & Welling) or sage (GraphSAGE mean)"),
    "layers": ("--layers", int, "graph convolution layers (default 2)"),
    "hidden": ("--hidden", int, "hidden width (default 16)"),
    "dropout": ("--dropout", float, "dropout probability (default 0.5)"),
    "lr": ("--lr", float, "Adam learning rate (default 0.01)"),
    "weight_decay": ("--weight-decay", float, "weight decay on the first layer (default 5e-4)"),
    "epochs": ("--epochs", int, "training epochs (default 200)"),
    "seed": ("--seed", int, "seed for partitioning, init and dropout (default 0)"),
    "report": ("--report", str, "write the JSON report to FILE"),
    "checkpoint_dir": ("--checkpoint-dir", str, "write checkpoints into this directory"),
    "checkpoint_every": ("--checkpoint-every", int, "checkpoint every N epochs (default 10)"),
    "device": ("--device", str, "auto, cpu or cuda (default auto)"),
    "patience": ("--patience", int, "early stopping: epochs without a better val accuracy (0 = off)"),
    "timeout_s": ("--timeout", float, "collective timeout in seconds (default 300)"),
    "malloc_mmap_mb": ("--malloc-mmap-mb", int, "CPU: give tensors above N MiB their own mmap so freed memory "
                                                "returns to the OS at once (lower peak RSS, more page faults; "
                                                "default 4, 0 = glibc default)"),
    "stop_after": ("--stop-after", int, None),  # testing aid, hidden
}
_SWITCHES = {
    "resume": ("--resume", "continue from the latest checkpoint in --checkpoint-dir"),
    "batch_norm": ("--batch-norm", "batch norm between layers (statistics over all ranks)"),
    "row_normalize": ("--row-normalize", "divide each feature row by its sum (Kipf's Cora preprocessing)"),
    "weight_decay_all": ("--weight-decay-all", "apply weight decay to all layers, not only the first"),
}


def config_from_args(args) -> GCNConfig:
    kw = {f: getattr(args, f) for f in list(_FLAGS) + list(_SWITCHES) if getattr(args, f) is not None}
    kw["spec"], kw["partition"] = args.spec, args.partition
    kw["progress"] = not args.no_progress
    cfg = GCNConfig(**kw)
    cfg.summary = not getattr(args, "no_summary", False)
    return cfg


def config_to_argv(cfg: GCNConfig) -> list[str]:
    """The command line that reproduces ``cfg`` (used to start workers)."""
    base = GCNConfig()
    argv = ["train-gcn"] + ([cfg.spec] if cfg.spec else [])
    if cfg.partition:
        argv += ["--partition", str(cfg.partition)]
    for f, (flag, _t, _h) in _FLAGS.items():
        v = getattr(cfg, f)
        if v is not None and v != getattr(base, f):
            argv += [flag, str(v)]
    argv += [flag for f, (flag, _h) in _SWITCHES.items() if getattr(cfg, f)]
    if not cfg.progress:
        argv.append("--no-progress")
    if not getattr(cfg, "summary", True):
        argv.append("--no-summary")
    return argv


def torch_cuda_count() -> int:
    import torch
    return torch.cuda.device_count()


def _artifact_k(directory) -> int:
    from graphdist.artifact import read_meta
    return int(read_meta(directory)["k"])


def _handler(args) -> int:
    from graphdist.launch import launch, under_launcher
    from graphdist.runtime import env_world, pick_backend
    cfg = config_from_args(args)
    cfg.validate()
    pick_backend(cfg.device)  # CUDA requested without GPUs: one line, exit 2, before any worker starts
    if not under_launcher():
        k = _artifact_k(cfg.partition) if cfg.partition else cfg.parts
        nproc = args.nproc if args.nproc is not None else (k or 1)
        if k is not None and nproc != k:
            raise ConfigError(f"--nproc {nproc} does not match the {k} parts of the partition "
                              f"(world size must equal k)")
        _, dev_type = pick_backend(cfg.device)
        if dev_type == "cuda" and nproc > torch_cuda_count():
            raise ConfigError(f"--nproc {nproc} needs {nproc} GPUs on this node but {torch_cuda_count()} are visible")
        if nproc > 1:
            return launch(nproc, config_to_argv(cfg))
    rank, ws, _ = env_world()
    try:
        from graphdist.trainer import train
        rep = train(cfg)
    except GraphdistError as e:
        if rank == 0 or ws == 1 or isinstance(e, DistributedError):
            raise
        return 2  # rank 0 reports the same user error once
    finally:
        from graphdist.runtime import shutdown
        shutdown()
    if rank == 0 and getattr(cfg, "summary", True):
        _summary(rep, cfg)
    return 0


def _summary(rep: dict, cfg: GCNConfig) -> None:
    mb = rep["comm/halo_bytes_per_epoch"] / 1e6
    print(f"test_acc {rep['test_acc']:.4f} (best val {rep['best_val_acc']:.4f} at epoch {rep['best_epoch']}), "
          f"final loss {rep['losses'][-1]:.4f}, {rep['time/epoch_s'] * 1e3:.1f} ms/epoch, "
          f"halo {rep['comm/halo_rows_per_epoch']:,} rows = {mb:.2f} MB/epoch, "
          f"peak mem {rep['mem/peak_bytes'] / 2**20:.0f} MiB/rank, world size {rep['world_size']}")
    if cfg.report:
        print(f"report: {Path(cfg.report)}")


def register(sub) -> None:
    import argparse
    p = sub.add_parser("train-gcn", help="full-batch GCN/GraphSAGE training on k partitioned ranks",
                       description="Train a GCN on a graph split over k workers (halo exchange, "
                                   "data-parallel weights). Give a dataset SPEC or --partition DIR.")
    p.add_argument("spec", nargs="?", help="dataset spec (partitioned in-process); with --partition, "
                                           "the artifact must have been cut from it")
    p.add_argument("--partition", help="partition artifact directory from `graphdist partition`")
    p.add_argument("--nproc", type=int, help="start N local workers (default: the number of parts)")
    for f, (flag, t, h) in _FLAGS.items():
        p.add_argument(flag, dest=f, type=t, default=None, help=argparse.SUPPRESS if h is None else h)
    for f, (flag, h) in _SWITCHES.items():
        p.add_argument(flag, dest=f, action="store_true", default=None, help=h)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-summary", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=_handler)

