"""A whole ``train-rec`` job: checks, then one process or ``nproc`` local workers.

    from graphdist.rec import RecConfig, run
    report = run(RecConfig(spec="rec-synth:", parts=2, method="metis", epochs=20))
    report["recall@20"]

Same shape as :mod:`graphdist.gnn.job`: :func:`run` checks the config and the output paths before
any worker starts, then runs :func:`worker` here (one process, or inside torchrun) or on
``nproc`` local workers; rank 0 prints the summary, then writes the report.
"""
from __future__ import annotations

from graphdist.rec.config import RecConfig

__all__ = ["run", "worker", "summary_line"]


def worker(cfg: RecConfig) -> dict:
    """Train this rank (the process group comes from the environment); rank 0 prints the summary,
    then writes the report (:func:`graphdist.launch.rank_main`)."""
    from graphdist.launch import rank_main
    from graphdist.rec.trainer import train
    return rank_main(train, cfg, lambda rep: summary_line(rep, cfg.topk))


def run(cfg: RecConfig) -> dict | None:
    """Check ``cfg``, then train here or on local workers; returns the report (the dict the
    ``--report`` JSON holds); errors raise, as :func:`graphdist.gnn.run`'s."""
    from graphdist.partition.job import workers_for
    from graphdist.launch import run_job
    from graphdist.procgroup import pick_backend
    from graphdist.specs import parse_spec
    cfg.validate()
    if cfg.spec:
        parse_spec(cfg.spec, "ratings")  # a wrong kind or a missing file: one line, before any worker
    elif cfg.partition:
        from graphdist.rec.artifact import check_rec_artifact
        check_rec_artifact(cfg.partition)
    cfg.check_outputs()
    _, dev_type = pick_backend(cfg.device)
    return run_job(worker, cfg, workers_for(cfg, dev_type), cfg.nodes)


def summary_line(rep: dict, k: int = 20) -> str:
    capped = f", {rep['steps']} steps (--steps)" if rep.get("steps_cap") is not None else ""
    sampled = f" on {rep['eval_users']} sampled users" if rep.get("eval_users_sampled") else ""
    ranking = (f"recall@{k} {rep[f'recall@{k}']:.4f}, ndcg@{k} {rep[f'ndcg@{k}']:.4f}{sampled} "
               f"(popularity: recall@{k} {rep[f'popularity/recall@{k}']:.4f})") if rep["eval_users"] else (
        f"recall@{k} and ndcg@{k} not measured (no test interactions)")
    return (f"{ranking}, final loss {rep['losses'][-1] if rep['losses'] else float('nan'):.4f}{capped}, "
            f"{rep['time/epoch_s'] * 1e3 if rep['time/epoch_s'] else float('nan'):.1f} ms/epoch, "
            f"halo {rep['comm/halo_bytes_per_epoch'] / 1e6:.2f} MB/epoch "
            f"({rep.get('comm/halo', 'plain')}, {rep.get('comm/halo_bits', 32)} bit), "
            f"items {rep['comm/item_bytes_per_epoch'] / 1e6:.2f} MB/epoch, "
            f"peak mem {rep['mem/peak_bytes'] / 2**20:.0f} MiB/rank, world size {rep['world_size']}")
