"""What every graph workload's job (``train-gcn``, ``train-rec``) shares around its trainer.

    nproc = workers_for(cfg)          # before any worker: --nproc vs the parts, CUDA, --halo-bits
    report = run_job(worker, cfg, nproc, cfg.nodes)                  # graphdist.launch
    ...
    def worker(cfg): return rank_main(train, cfg, summary_line)     # in each worker (graphdist.launch)

A config here is any graph workload's config: it has ``spec``, ``partition``, ``parts``,
``nproc``, ``nodes``, ``halo_bits``, ``summary`` and ``report``.
"""
from __future__ import annotations

from graphdist.errors import ConfigError

__all__ = ["workers_for", "check_halo_bits"]


def _parts_world(cfg) -> int:
    """Workers to start on this node: ``--nproc``, else the number of parts (artifact k or
    ``--parts``) over the nodes, else 1; a mismatch with the parts is an error naming both."""
    from graphdist.partition.artifact import read_meta
    k = cfg.parts
    if cfg.partition:
        k = int(read_meta(cfg.partition)["k"])
        if cfg.parts is not None and cfg.parts != k:
            raise ConfigError(f"--parts {cfg.parts} does not match the artifact {cfg.partition}, "
                              f"which has k={k} parts")
    nn = cfg.nodes.max_nodes
    nproc = cfg.nproc if cfg.nproc is not None else max((k or 1) // nn, 1)
    if k is not None and nproc * nn != k:
        where = f"--nproc {nproc}" + (f" x --nnodes {nn}" if nn > 1 else "")
        raise ConfigError(f"{where} does not match the {k} parts of the partition "
                          f"(world size must equal k)")
    return nproc


def check_halo_bits(cfg, world_size: int) -> None:
    """Quantised halos (``--halo-bits`` / ``--eval-halo-bits`` below 32) need an exchange: k >= 2."""
    for flag, bits in (("--halo-bits", cfg.halo_bits), ("--eval-halo-bits", getattr(cfg, "eval_halo_bits", 32))):
        if bits < 32 and world_size == 1:
            raise ConfigError(f"{flag} {bits} quantises the halo exchange, but a 1-part job has none; use "
                              f"{flag} 32 or train on k >= 2 parts")


def workers_for(cfg, device_type: str) -> int:
    """Local workers to start (1 under a launcher, which started them), after the checks that
    need no data: parts vs world size, quantised halos on a 1-part job, GPUs for ``--nproc``."""
    from graphdist.launch import under_launcher
    if under_launcher():
        return 1
    nproc = _parts_world(cfg)
    check_halo_bits(cfg, nproc * cfg.nodes.min_nodes)
    if device_type == "cuda":
        import torch
        if nproc > torch.cuda.device_count():
            raise ConfigError(f"--nproc {nproc} needs {nproc} GPUs on this node but "
                              f"{torch.cuda.device_count()} are visible")
    return nproc
