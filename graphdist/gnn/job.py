"""A whole ``train-gcn`` job: checks, then one process or ``nproc`` local workers.

    from graphdist.gnn import GCNConfig, run
    run(GCNConfig(spec="sbm:nodes=2000", parts=2, epochs=30, report="runs/gcn.json"))

:func:`run` checks the config before any worker starts (world size vs parts, CUDA), then runs
:func:`worker` here (one process, or inside torchrun) or on ``nproc`` local workers
(:func:`graphdist.launch.launch`). :func:`worker` trains this rank and prints the summary on
rank 0; the report is written by the trainer.
"""
from __future__ import annotations

from pathlib import Path

from graphdist.errors import ConfigError
from graphdist.gnn.config import GCNConfig

__all__ = ["run", "worker", "summary_line"]


def worker(cfg: GCNConfig) -> int:
    """Train this rank (the process group comes from the environment); rank 0 prints the summary."""
    from graphdist import comm
    from graphdist.gnn.trainer import train
    from graphdist.runtime import env_world, shutdown
    try:
        rep = train(cfg)
    except BaseException as e:
        comm.publish_failure(e)  # while the group still exists: peers can name what happened here
        raise
    finally:
        shutdown()
    if env_world()[0] == 0:
        if cfg.summary:  # the result first: if the report cannot be written, it is not lost
            print(summary_line(rep), flush=True)
        if cfg.report:
            write_report(cfg.report, rep)
            if cfg.summary:
                print(f"report: {Path(cfg.report)}", flush=True)
    return 0


def write_report(path, rep: dict) -> None:
    """Atomic JSON write; a failure (disk full) is one line that says the result was printed."""
    from graphdist.errors import ConfigError
    from graphdist.fileio import atomic_write_json
    try:
        atomic_write_json(path, rep)
    except OSError as e:
        raise ConfigError(f"--report {path}: could not write the report ({e.strerror or e}); "
                          "the summary above is the result") from None


def _world(cfg: GCNConfig) -> int:
    """Workers to start: ``--nproc``, else the number of parts (artifact k or ``--parts``), else 1;
    a mismatch with the parts is an error naming both."""
    from graphdist.halo.artifact import read_meta
    k = cfg.parts
    if cfg.partition:
        k = int(read_meta(cfg.partition)["k"])
        if cfg.parts is not None and cfg.parts != k:
            raise ConfigError(f"--parts {cfg.parts} does not match the artifact {cfg.partition}, "
                              f"which has k={k} parts")
    nn = cfg.nodes.nnodes
    nproc = cfg.nproc if cfg.nproc is not None else max((k or 1) // nn, 1)
    if k is not None and nproc * nn != k:
        where = f"--nproc {nproc}" + (f" x --nnodes {nn}" if nn > 1 else "")
        raise ConfigError(f"{where} does not match the {k} parts of the partition "
                          f"(world size must equal k)")
    return nproc


def run(cfg: GCNConfig) -> int:
    """Check ``cfg``, then train here or on local workers; returns the exit code."""
    from graphdist.launch import run_job, under_launcher
    from graphdist.runtime import pick_backend
    cfg.validate()
    cfg.check_outputs()
    _, dev_type = pick_backend(cfg.device)  # CUDA requested without GPUs: one line, before any worker
    nproc = 1
    if not under_launcher():
        nproc = _world(cfg)
        if cfg.halo_bits < 32 and nproc * cfg.nodes.nnodes == 1:
            raise ConfigError(f"--halo-bits {cfg.halo_bits} quantises the halo exchange, but a 1-part job has "
                              "none; use --halo-bits 32 or train on k >= 2 parts")
        if dev_type == "cuda":
            import torch
            if nproc > torch.cuda.device_count():
                raise ConfigError(f"--nproc {nproc} needs {nproc} GPUs on this node but "
                                  f"{torch.cuda.device_count()} are visible")
    return run_job(worker, cfg, nproc, cfg.nodes)


def summary_line(rep: dict) -> str:
    mb = rep["comm/halo_bytes_per_epoch"] / 1e6
    return (f"test_acc {rep['test_acc']:.4f} (best val {rep['best_val_acc']:.4f} at epoch {rep['best_epoch']}), "
            f"final loss {rep['losses'][-1]:.4f}, {rep['time/epoch_s'] * 1e3:.1f} ms/epoch, "
            f"halo {rep['comm/halo_rows_per_epoch']:,} rows = {mb:.2f} MB/epoch "
            f"({rep.get('comm/halo', 'plain')}, {rep.get('comm/halo_bits', 32)} bit), "
            f"peak mem {rep['mem/peak_bytes'] / 2**20:.0f} MiB/rank, world size {rep['world_size']}")
