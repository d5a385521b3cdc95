"""A whole ``train-gcn`` job: checks, then one process or ``nproc`` local workers.

    from graphdist.gnn import GCNConfig, run
    report = run(GCNConfig(spec="sbm:nodes=2000", parts=2, epochs=30))
    report["test_acc"], report["time/epoch_s"]

:func:`run` checks the config before any worker starts (world size vs parts, CUDA), then runs
:func:`worker` here (one process, or inside torchrun) or on ``nproc`` local workers
(:func:`graphdist.launch.launch`). :func:`worker` trains this rank; rank 0 prints the summary,
then writes the report.
"""
from __future__ import annotations

from graphdist.gnn.config import GCNConfig

__all__ = ["run", "worker", "summary_line"]


def worker(cfg: GCNConfig) -> dict:
    """Train this rank (the process group comes from the environment); rank 0 prints the summary,
    then writes the report (:func:`graphdist.launch.rank_main`)."""
    from graphdist.gnn.trainer import train
    from graphdist.launch import rank_main
    return rank_main(train, cfg, summary_line)


def run(cfg: GCNConfig) -> dict | None:
    """Check ``cfg``, then train here or on local workers; returns the report (the dict the
    ``--report`` JSON holds). Errors raise (:class:`~graphdist.errors.GraphdistError`; from
    launched workers, which printed theirs, :class:`~graphdist.errors.JobFailed`)."""
    from graphdist.partition.job import workers_for
    from graphdist.launch import run_job
    from graphdist.procgroup import pick_backend
    cfg.validate()
    cfg.check_outputs()
    _, dev_type = pick_backend(cfg.device)  # CUDA requested without GPUs: one line, before any worker
    return run_job(worker, cfg, workers_for(cfg, dev_type), cfg.nodes)


def summary_line(rep: dict) -> str:
    mb = rep["comm/halo_bytes_per_epoch"] / 1e6
    val = rep["best_val_acc"]
    chosen = (f"best val {val:.4f} at epoch {rep['best_epoch']}" if val == val else
              f"no validation rows: the model of the last epoch, {rep['best_epoch']}")
    return (f"test_acc {rep['test_acc']:.4f} ({chosen}), "
            f"final loss {rep['losses'][-1]:.4f}, {rep['time/epoch_s'] * 1e3:.1f} ms/epoch, "
            f"halo {rep['comm/halo_rows_per_epoch']:,} rows = {mb:.2f} MB/epoch "
            f"({rep.get('comm/halo', 'plain')}, {_bits(rep)}), "
            f"peak mem {rep['mem/peak_bytes'] / 2**20:.0f} MiB/rank, world size {rep['world_size']}")


def _bits(rep: dict) -> str:
    """``32 bit``, or ``--halo auto``'s widths per layer: ``bits 8/4 forward, 8/8 backward``;
    then what makes the run inexact, if anything: ``lossy: rows rounded, rel. error 2.1e-03``."""
    chosen = (rep.get("comm/halo_auto") or {}).get("bits")
    if not chosen:
        text = f"{rep.get('comm/halo_bits', 32)} bit"
    else:
        text = f"bits {'/'.join(map(str, chosen['forward']))} forward, {'/'.join(map(str, chosen['backward']))} backward"
    why = lossy(rep)
    return f"{text}, lossy: {'; '.join(why)}" if why else text


def lossy(rep: dict) -> list[str]:
    """What makes a run differ from the exact one: rounded rows (their largest measured relative
    error), rounded evaluation rows, stale halos, sampled boundary nodes. Empty for an exact run."""
    out = []
    err = rep.get("comm/halo_rel_error")
    if err:
        worst = max((e for d in ("forward", "backward") for e in err.get(d, []) if e is not None), default=None)
        out.append("rows rounded" + (f", rel. error up to {worst:.1e}" if worst is not None else ""))
    if rep.get("comm/eval_halo_bits", 32) < 32:
        out.append(f"evaluation rows at {rep['comm/eval_halo_bits']} bit")
    if rep.get("comm/halo_staleness"):
        out.append(f"halos {rep['comm/halo_staleness']} epoch stale")
    if rep.get("comm/boundary_rate", 1.0) < 1.0:
        out.append(f"boundary nodes sampled at {rep['comm/boundary_rate']:g}")
    return out

