"""The DLRM part of ``graphdist demo``: a short 2-rank run on ``criteo-synth``.

    from embeddings.demo import run_dlrm_demo
    summary = run_dlrm_demo("out/demo")   # prints the sharding plan, AUC and samples/s

Trains DLRM for one epoch on 40k synthetic Criteo-shaped rows (tables row-wise sharded over
2 gloo ranks on CPU, or NCCL GPUs when present) and evaluates on 10k held-out rows.
"""
from __future__ import annotations

import json
import os

DEMO_SPEC = "criteo-synth:rows=50000,seed=0"
DEMO_ARGS = ["--sharding", "row_wise", "--batch-size", "512", "--epochs", "1", "--eval-fraction", "0.2",
             "--no-progress"]


def run_dlrm_demo(out_dir: str, nproc: int = 2) -> dict:
    """Run the demo; returns ``{auc, logloss, ne, throughput/samples_per_s, steps, world_size,
    sharding_plan, report}`` (``report`` is the path of the full JSON report)."""
    from graphdist.cli import main
    from graphdist.errors import DistributedError
    os.makedirs(out_dir, exist_ok=True)
    report = os.path.join(out_dir, "dlrm_report.json")
    print(f"== DLRM: {nproc} ranks, {DEMO_SPEC}, embedding tables sharded row_wise ==", flush=True)
    rc = main(["train-dlrm", DEMO_SPEC, "--nproc", str(nproc), *DEMO_ARGS, "--report", report])
    if rc != 0:
        raise DistributedError(f"DLRM demo failed with exit code {rc}")
    with open(report) as fh:
        r = json.load(fh)
    keys = ("auc", "logloss", "ne", "throughput/samples_per_s", "steps", "world_size", "sharding_plan")
    return {**{k: r[k] for k in keys}, "report": report}
