"""A whole ``train-dlrm`` job: checks, then one process or ``nproc`` local workers.

    from embeddings import DLRMTrainConfig, run
    report = run(DLRMTrainConfig(spec="criteo-synth:", nproc=2, sharding="row_wise"))
    report["auc"]

With ``nproc > 1`` this process first checks the input (data, Criteo cache, flags, that the
plan fits) so that mistakes end in one line and exit 2 before any worker starts, then starts the
workers (:func:`graphdist.launch.launch`). Output paths are checked first, also by rank 0 of a
worker (under an external torchrun nobody checked before). :func:`worker` trains this rank; rank
0 prints the summary and then writes the report.
"""
from __future__ import annotations

import logging
import warnings

from embeddings.config import DLRMTrainConfig
from graphdist.errors import ConfigError

__all__ = ["run", "worker", "train_rank", "quiet_torchrec", "require_torchrec", "summary_line"]


def quiet_torchrec() -> None:
    """torchrec/fbgemm log a lot at import and sharding time; keep warnings and errors only."""
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    for name in ("torchrec", "fbgemm_gpu", "torch.distributed", "torch.fx", "torch.fx._symbolic_trace"):
        logging.getLogger(name).setLevel(logging.ERROR)
    root = logging.getLogger()
    if not any(isinstance(f, _DropTorchrec) for f in root.filters):
        root.addFilter(_DropTorchrec())  # torchrec also warns through the root logger


class _DropTorchrec(logging.Filter):
    def filter(self, record):
        return record.levelno >= logging.ERROR or not any(
            s in record.pathname for s in ("torchrec", "fbgemm_gpu"))


def precheck(cfg: DLRMTrainConfig, world: int, device_type: str) -> None:
    """Everything that can be wrong with the input, checked once before workers start; says the
    memory per rank of the layout (of every candidate with ``--sparse-groups auto``)."""
    import torch

    from embeddings.build import host_room, load_splits, memory_budget, plan_for, validate
    from embeddings.sharding import check_memory, memory_line
    from graphdist.fmt import fmt_bytes
    from graphdist.log import get_logger
    log = get_logger("graphdist.dlrm")
    train, _ = load_splits(cfg)  # also builds the criteo binary cache once
    validate(cfg, train, world)  # --sparse-groups G divides the world size
    local = cfg.nproc  # ranks per node
    budget = memory_budget(cfg, torch.device(device_type), local)
    if cfg.sparse_groups == "auto":
        from embeddings.auto import evaluate, memory_lines, no_fit
        room = host_room(local, False) if device_type == "cpu" else None
        cands = evaluate(cfg, train, world, local, device_type, budget, room)
        if not any(c["fits"] for c in cands):
            raise ConfigError(no_fit(cands))
        log.info("\n".join(["--sparse-groups auto, the layouts' memory:", *memory_lines(cands)]))
        return
    _, _, desc = plan_for(cfg, train, world, local, device_type)  # for S = W / G ranks with G > 1
    check_memory(desc, budget)
    room = host_room(local, False) if device_type == "cpu" else None
    need = sum(r["embedding_bytes"] for r in desc["ranks"][:local])
    if room is not None and need > room:
        raise ConfigError(f"the sharding plan does not fit in memory: the {local} ranks of this host need "
                          f"{fmt_bytes(need)} of embeddings and optimizer state and it has {fmt_bytes(room)} available "
                          "(after what each rank holds before its tables); use fewer --sparse-groups, more ranks or "
                          "hosts, smaller tables or a smaller --embedding-dim")
    log.info(memory_line(desc, budget) + ("" if room is None else f"; this host's {local} ranks: {fmt_bytes(need)} "
                                          f"of {fmt_bytes(room)} available"))


def train_rank(cfg: DLRMTrainConfig) -> dict:
    """This rank's part of the job: join the process group from the environment, train, return
    the report (every rank)."""
    from embeddings.trainer import train
    from graphdist.proc import env_world
    from graphdist.procgroup import init_distributed
    quiet_torchrec()
    if env_world()[0] == 0:  # under torchrun nobody checked the outputs before the workers started
        cfg.check_outputs()
    ctx = init_distributed(cfg.device)
    return train(cfg, ctx.device)


def worker(cfg: DLRMTrainConfig) -> dict:
    """Train this rank; rank 0 prints the summary, then writes the report
    (:func:`graphdist.launch.rank_main`, as every trainer)."""
    from graphdist.launch import rank_main
    return rank_main(train_rank, cfg, summary_line)


def require_torchrec() -> None:
    """One line naming the install command when torchrec (or its FBGEMM build) is missing."""
    try:
        import torchrec  # noqa: F401
    except ImportError as e:
        from graphdist.errors import MissingDependencyError
        raise MissingDependencyError(
            f"train-dlrm needs torchrec, which is not importable ({e}); it is not in graphdist's package "
            "metadata because it declares the CUDA-only fbgemm-gpu: run bash scripts/install.sh, or "
            "pip install --no-deps torchrec==1.9.2 fbgemm-gpu-cpu==1.8.0 && pip install tensordict "
            "torchmetrics==1.0.3 pyre-extensions iopath") from None


def run(cfg: DLRMTrainConfig) -> dict | None:
    """Check ``cfg``, then train here or on ``cfg.nproc`` local workers; returns the report (the
    dict the ``--report`` JSON holds); errors raise, as :func:`graphdist.gnn.run`'s."""
    from graphdist.launch import run_job, under_launcher
    from graphdist.procgroup import pick_backend
    require_torchrec()
    quiet_torchrec()
    cfg.validate()
    cfg.check_outputs()
    _, dev_type = pick_backend(cfg.device)
    world = cfg.nproc * cfg.nodes.max_nodes
    if not under_launcher() and cfg.sparse_groups != "auto":
        from embeddings.twod import layout_for
        layout_for(world, cfg.sparse_groups)  # G divides W: before any data is read
    if world > 1 and not under_launcher():
        precheck(cfg, world, dev_type)
    return run_job(worker, cfg, cfg.nproc, cfg.nodes)


def summary_line(report: dict) -> str:
    from embeddings.metrics import metrics_text
    from graphdist.fmt import fmt_bytes
    return (metrics_text(report["auc"], report["logloss"], report["ne"], report["eval_samples"],
                         report["eval_click_rate"])
            + f"  throughput {report['throughput/samples_per_s']:.0f} samples/s  steps {report['steps']}  "
            f"world_size {report['world_size']}"
            + (f" ({report['sparse_groups']} replicas x {report['world_size'] // report['sparse_groups']})"
               if report.get("sparse_groups", 1) > 1 else "")
            + ("  (--sparse-groups auto)" if report.get("sparse_auto") else "")
            + (f"  replica sync {fmt_bytes(report['comm/replica_sync_bytes_per_step'])}/step"
               if report.get("sparse_groups", 1) > 1 else "")
            + f"  peak mem {report['mem/peak_bytes'] / 2**20:.0f} MiB/rank"
            + (f"  bad_lines {report['bad_lines']}" if report['bad_lines'] else ""))
