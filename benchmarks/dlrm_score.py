"""Scoring with the unsharded DLRM in one process against the training's evaluation on the same
rows (issue 45 item 5)::

    python benchmarks/dlrm_score.py --work /tmp/bench45/dlrm --nproc 2 --rounds 3 --json dlrm_score.json

1. data: ``criteo-synth`` rows of one planted click model (``--scale``) written as Criteo TSV,
   the first ``--train-rows`` to train on and the next ``--eval-rows`` to evaluate;
2. training on ``--nproc`` ranks (``train-dlrm``'s own ``train``: ``--sharding``, ``--steps``,
   every table ``--num-embeddings`` rows of ``--dim``), with a checkpoint;
3. ``graphdist export --checkpoint-dir CK --out EX`` and ``... --quantize int8 --out EX8``, each
   in a fresh process, as a user runs them;
4. ``--rounds`` times, alternating: the training's evaluation of the eval rows
   (``embeddings.trainer.evaluate``, what ``train-dlrm`` runs after its last step, on the
   sharded model loaded from the checkpoint, timed on rank 0 between barriers: batches, forward,
   the gather of every rank's logits and the metrics), then ``graphdist score EX
   criteo:eval.tsv`` in a fresh process on the same machine (its ``throughput/samples_per_s``:
   batches and forward; and its whole wall time: start-up, model, Parquet);
5. once: ``graphdist score EX8`` (the int8 tables), for its AUC change and size.

Prints (and with ``--json`` writes) one JSON object: the medians, the ratios score / evaluation,
both AUCs (equal within 1e-6 for the float model) and the int8 figures.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import harness  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout (children too)


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--work", required=True)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--sharding", default="row_wise")
    ap.add_argument("--train-rows", type=int, default=100_000)
    ap.add_argument("--eval-rows", type=int, default=50_000)
    ap.add_argument("--scale", type=float, default=0.01)
    ap.add_argument("--num-embeddings", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--eval-batch-size", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    return ap


def _cfg(a, work: Path):
    from embeddings.config import DLRMTrainConfig
    from embeddings.model import ModelConfig
    return DLRMTrainConfig(spec=f"criteo:{work / 'train.tsv'}", eval_data=f"criteo:{work / 'eval.tsv'}",
                           sharding=a.sharding, batch_size=a.batch_size, eval_batch_size=a.eval_batch_size,
                           steps=a.steps, num_embeddings=a.num_embeddings, progress=False, print_plan=False,
                           device="cpu", checkpoint_dir=str(work / "ck"),
                           model=ModelConfig(embedding_dim=a.dim, dense_arch=[128, 64], over_arch=[128, 64]))


def _data(a, work: Path) -> None:
    from embeddings.synth import generate, write_tsv
    if (work / "eval.tsv").exists():
        return
    d = generate(rows=a.train_rows + a.eval_rows, scale=a.scale, seed=1)
    write_tsv(d.slice(0, a.train_rows), str(work / "train.tsv"))
    write_tsv(d.slice(a.train_rows, a.train_rows + a.eval_rows), str(work / "eval.tsv"))


def _train_rank(rank, world, cfg):
    from embeddings.job import quiet_torchrec
    from embeddings.trainer import train
    quiet_torchrec()
    rep = train(cfg)
    return {k: rep[k] for k in ("auc", "logloss", "ne", "eval_samples", "throughput/samples_per_s", "world_size")}


def _score(ex: Path, work: Path, out: str) -> tuple[dict, float]:
    js = work / f"{out}.json"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "graphdist", "score", str(ex), f"criteo:{work / 'eval.tsv'}",
                    "--out", str(work / out), "--overwrite", "--json", str(js)], check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads(js.read_text()), time.perf_counter() - t0


def _eval_rank(rank, world, args):
    """The training's evaluation, timed, alternating with ``graphdist score`` run by rank 0."""
    import torch

    from embeddings.build import build_sharded, load_splits
    from embeddings.job import quiet_torchrec
    from embeddings.trainer import evaluate
    from graphdist import comm
    from graphdist.checkpoint import Checkpointer
    cfg, work, rounds = args
    quiet_torchrec()
    train, ev = load_splits(cfg)
    sm = build_sharded(cfg, train, torch.device("cpu"))
    ck = Checkpointer(cfg.checkpoint_dir)
    state = {"model": sm.dmp.state_dict()}
    ck.load(ck.latest(), state)
    sm.dmp.load_state_dict(state["model"])
    out = {"eval_s": [], "score": [], "score_wall_s": []}
    for _ in range(rounds):
        comm.barrier()
        t0 = time.perf_counter()
        m = evaluate(sm.dmp, ev, cfg, torch.device("cpu"))
        comm.barrier()
        out["eval_s"].append(time.perf_counter() - t0)
        if rank == 0:
            rep, wall = _score(Path(work) / "ex", Path(work), "scored")
            out["score"].append(rep)
            out["score_wall_s"].append(wall)
        comm.barrier()
    out["eval_auc"], out["eval_rows"] = m["auc"], m["eval_samples"]
    return out


def main() -> None:
    a = build_parser().parse_args()
    from graphdist.testing import run_ranks
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("XDG_CACHE_HOME", str(work / "cache"))
    _data(a, work)
    cfg = _cfg(a, work)
    t0 = time.perf_counter()
    trained = run_ranks(_train_rank, a.nproc, (cfg,), timeout=7200)[0]
    train_s = time.perf_counter() - t0
    times = {}
    for name, extra in (("ex", []), ("ex8", ["--quantize", "int8"])):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "graphdist", "export", "--checkpoint-dir", cfg.checkpoint_dir,
                        "--out", str(work / name), "--overwrite", *extra], check=True)
        times[name] = time.perf_counter() - t0
    ev = run_ranks(_eval_rank, a.nproc, ((cfg, str(work), a.rounds),), timeout=7200)[0]
    q, q_wall = _score(work / "ex8", work, "scored8")
    f = ev["score"][-1]
    eval_s = statistics.median(ev["eval_s"])
    score_tput = statistics.median(r["throughput/samples_per_s"] for r in ev["score"])
    eval_tput = ev["eval_rows"] / eval_s
    spec = json.loads((work / "ex" / "model.json").read_text())
    spec8 = json.loads((work / "ex8" / "model.json").read_text())
    res = {"nproc": a.nproc, "sharding": a.sharding, "eval_rows": ev["eval_rows"], "train_s": round(train_s, 1),
           "train_auc": trained["auc"], "eval_auc_again": ev["eval_auc"], "score_auc": f["auc"],
           "auc_diff": abs(f["auc"] - trained["auc"]),
           "eval_s": [round(x, 3) for x in ev["eval_s"]],
           "eval_samples_per_s": round(eval_tput),
           "score_samples_per_s": [round(r["throughput/samples_per_s"]) for r in ev["score"]],
           "score_wall_s": [round(x, 2) for x in ev["score_wall_s"]],
           "score_total_s": [round(r["time/total_s"], 2) for r in ev["score"]],
           "ratio_score_vs_eval": round(score_tput / eval_tput, 3),
           "ratio_score_total_vs_eval": round(eval_s / statistics.median(r["time/total_s"] for r in ev["score"]), 3),
           "export_s": round(times["ex"], 1), "export_int8_s": round(times["ex8"], 1),
           "tables_bytes": spec["tables_bytes"], "int8_tables_bytes": spec8["tables_bytes"],
           "int8_size_ratio": round(spec8["tables_bytes"] / spec["tables_bytes"], 4),
           "int8_auc": q["auc"], "int8_auc_change": q["auc"] - f["auc"],
           "int8_samples_per_s": round(q["throughput/samples_per_s"]), "int8_wall_s": round(q_wall, 2)}
    print(json.dumps(res))
    if a.json:
        from graphdist.fileio import atomic_write_json
        atomic_write_json(a.json, res)


if __name__ == "__main__":
    main()
