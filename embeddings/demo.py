"""The DLRM part of ``graphdist demo``: a short 2-rank run on ``criteo-synth``.

    from embeddings.demo import run_dlrm_demo
    summary = run_dlrm_demo("out/demo")   # prints the sharding plan, AUC and samples/s

Trains DLRM for one epoch on 40k synthetic Criteo-shaped rows (tables row-wise sharded over
2 gloo ranks on CPU, or NCCL GPUs when present) and evaluates on 10k held-out rows. It calls the
library (:func:`embeddings.run`), not the CLI.
"""
from __future__ import annotations

import dataclasses
import os

from embeddings.config import DLRMTrainConfig

DEMO = DLRMTrainConfig(spec="criteo-synth:rows=50000,seed=0", sharding="row_wise", batch_size=512,
                       epochs=1, eval_fraction=0.2, progress=False)
"""What the demo trains."""


def run_dlrm_demo(out_dir: str, nproc: int = 2) -> dict:
    """Run the demo; returns ``{auc, logloss, ne, throughput/samples_per_s, steps, world_size,
    sharding_plan, report}`` (``report`` is the path of the full JSON report)."""
    from embeddings.job import run
    os.makedirs(out_dir, exist_ok=True)
    report = os.path.join(out_dir, "dlrm_report.json")
    cfg = dataclasses.replace(DEMO, nproc=nproc, report=report)
    print(f"== DLRM: {nproc} ranks, {cfg.spec}, embedding tables sharded {cfg.sharding} ==", flush=True)
    r = run(cfg)
    keys = ("auc", "logloss", "ne", "throughput/samples_per_s", "steps", "world_size", "sharding_plan")
    return {**{k: r[k] for k in keys}, "report": report}
