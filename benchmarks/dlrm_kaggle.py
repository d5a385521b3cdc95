"""Kaggle-size tables on one host (issue 49, items 2 and 3): ``criteo-synth:scale=1`` (26 tables,
33.8M rows) at W ranks, several layouts, embedding widths and embedding optimizers, one after
another.

    python benchmarks/dlrm_kaggle.py [--nproc 4] [--data criteo-synth:scale=1,rows=200000]
        [--runs "1:16:rowwise_adagrad,2:16:rowwise_adagrad,2:16:rowwise_adagrad_scaled,..."]
        [--steps 40] [--batch-size 4096] [--args "..."] [--json FILE] [--work DIR]

A run is ``G:D:OPTIMIZER`` (``--sparse-groups G`` (or ``auto``) ``--embedding-dim D
--embedding-optimizer OPTIMIZER``). Per run: the memory line the launcher printed before the
workers started (or the one line that refused the run), samples/s, the mean step, AUC, log loss
and NE after the same samples, peak memory per rank, and the replica sync's bytes per step
against the bound the rows a step touches set (every id of the global batch, 26 per sample,
with its row and optimizer state: ``B x 26 x (8 + 4 (D + 1))``) and against a whole-shard sync.
Workers run with OMP_NUM_THREADS=1; run it alone (the tables take GiBs).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import harness  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--data", default="criteo-synth:scale=1,rows=200000")
    ap.add_argument("--runs", default="1:16:rowwise_adagrad,2:16:rowwise_adagrad,2:16:rowwise_adagrad_scaled,"
                                      "4:16:rowwise_adagrad,4:16:rowwise_adagrad_scaled,auto:16:rowwise_adagrad,"
                                      "1:64:rowwise_adagrad,2:64:rowwise_adagrad,4:64:rowwise_adagrad")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--args", default="")
    ap.add_argument("--work", default="runs/dlrm_kaggle")
    return ap


def run(a, spec: str, out: Path) -> dict:
    g, d, opt = spec.split(":")
    cmd = [sys.executable, "-m", "graphdist", "train-dlrm", a.data, "--nproc", str(a.nproc), "--steps", str(a.steps),
           "--batch-size", str(a.batch_size), "--sparse-groups", g, "--embedding-dim", d, "--embedding-optimizer", opt,
           "--no-progress", "--report", str(out), *shlex.split(a.args)]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("OMP_NUM_THREADS", "1")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=7200)
    text = p.stdout + p.stderr
    said = [ln.strip() for ln in text.splitlines() if "memory per rank" in ln or "does NOT fit" in ln
            or ln.lstrip().startswith(("1D ", "2D "))]
    row = {"run": spec, "rc": p.returncode, "wall_s": time.perf_counter() - t0, "said_before": said,
           "load": os.getloadavg()[0]}
    if p.returncode != 0:
        err = [ln for ln in text.splitlines() if "graphdist: error:" in ln]
        if not err:
            raise SystemExit(f"{spec} failed:\n{text[-3000:]}")
        return {**row, "refused": err[-1].split("graphdist: error:", 1)[1].strip()}
    r = json.loads(out.read_text())
    bound = a.batch_size * 26 * (8 + 4 * (int(d) + 1))
    return {**row, "sparse_groups": r["sparse_groups"], "sparse_layout": r.get("sparse_layout"),
            "samples_per_s": r["throughput/samples_per_s"], "step_s": r["time/step_s"], "auc": r["auc"],
            "logloss": r["logloss"], "ne": r["ne"], "peak_bytes_per_rank": r["mem/peak_bytes_per_rank"],
            "replica_sync_bytes_per_step": r["comm/replica_sync_bytes_per_step"],
            "replica_sync_whole_bytes_per_step": r["comm/replica_sync_whole_bytes_per_step"],
            "touched_bound_bytes_per_step": bound, "sync_s_per_step": r.get("time/replica_sync_s_per_step"),
            "embedding_bytes_per_rank": [x["embedding_bytes"] for x in r["plan"]["ranks"]]}


def main() -> int:
    a = build_parser().parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in a.runs.split(","):
        rows.append(run(a, spec, work / (spec.replace(":", "_") + ".json")))
        print(json.dumps(rows[-1]), flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(rows, indent=1))
    print("\n| run (G:D:optimizer) | samples/s | step ms | AUC | NE | peak MiB/rank | emb+optim MiB/rank | sync KB/step "
          "(touched bound, whole shards) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "refused" in r:
            print(f"| {r['run']} | refused: {r['refused']} | | | | | | |")
            continue
        print(f"| {r['run']} | {r['samples_per_s']:,.0f} | {r['step_s'] * 1e3:.0f} | {r['auc']:.4f} | {r['ne']:.4f} | "
              f"{max(r['peak_bytes_per_rank']) / 2**20:,.0f} | {max(r['embedding_bytes_per_rank']) / 2**20:,.0f} | "
              f"{r['replica_sync_bytes_per_step'] / 1e3:,.0f} ({r['touched_bound_bytes_per_step'] / 1e3:,.0f}, "
              f"{r['replica_sync_whole_bytes_per_step'] / 1e3:,.0f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
