"""A whole ``train-rec`` job: checks, then one process or ``nproc`` local workers.

    from graphdist.rec import RecConfig, run
    run(RecConfig(spec="rec-synth:", parts=2, method="metis", epochs=20, report="runs/rec.json"))

Same shape as :mod:`graphdist.gnn.job`: :func:`run` checks the config and the output paths before
any worker starts, then runs :func:`worker` here (one process, or inside torchrun) or on
``nproc`` local workers; rank 0 prints the summary, then writes the report.
"""
from __future__ import annotations

from pathlib import Path

from graphdist.errors import ConfigError
from graphdist.rec.config import RecConfig

__all__ = ["run", "worker", "summary_line"]


def worker(cfg: RecConfig) -> int:
    """Train this rank (the process group comes from the environment); rank 0 prints the summary."""
    from graphdist import comm
    from graphdist.rec.trainer import train
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
            print(summary_line(rep, cfg.topk), flush=True)
        if cfg.report:
            write_report(cfg.report, rep)
            if cfg.summary:
                print(f"report: {Path(cfg.report)}", flush=True)
    return 0


def write_report(path, rep: dict) -> None:
    """Atomic JSON write; a failure (disk full) is one line that says the result was printed."""
    from graphdist.fileio import atomic_write_json
    try:
        atomic_write_json(path, rep)
    except OSError as e:
        raise ConfigError(f"--report {path}: could not write the report ({e.strerror or e}); "
                          "the summary above is the result") from None


def _world(cfg: RecConfig) -> int:
    """Workers to start: ``--nproc``, else the number of parts (artifact k or ``--parts``), else 1."""
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
        raise ConfigError(f"{where} does not match the {k} parts of the partition (world size must equal k)")
    return nproc


def run(cfg: RecConfig) -> int:
    """Check ``cfg``, then train here or on local workers; returns the exit code."""
    from graphdist.launch import run_job, under_launcher
    from graphdist.runtime import pick_backend
    from graphdist.specs import parse_spec
    cfg.validate()
    parse_spec(cfg.spec, "ratings")  # a wrong kind or a missing file: one line, before any worker
    cfg.check_outputs()
    _, dev_type = pick_backend(cfg.device)
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


def summary_line(rep: dict, k: int = 20) -> str:
    return (f"recall@{k} {rep[f'recall@{k}']:.4f}, ndcg@{k} {rep[f'ndcg@{k}']:.4f} "
            f"(popularity: recall@{k} {rep[f'popularity/recall@{k}']:.4f}), "
            f"final loss {rep['losses'][-1] if rep['losses'] else float('nan'):.4f}, "
            f"{rep['time/epoch_s'] * 1e3 if rep['time/epoch_s'] else float('nan'):.1f} ms/epoch, "
            f"halo {rep['comm/halo_bytes_per_epoch'] / 1e6:.2f} MB/epoch "
            f"({rep.get('comm/halo', 'plain')}, {rep.get('comm/halo_bits', 32)} bit), "
            f"items {rep['comm/item_bytes_per_epoch'] / 1e6:.2f} MB/epoch, "
            f"peak mem {rep['mem/peak_bytes'] / 2**20:.0f} MiB/rank, world size {rep['world_size']}")
