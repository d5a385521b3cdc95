"""How the default batch size and learning rates of ``train-dlrm`` were chosen.

    python benchmarks/archive/dlrm_defaults.py --out out/dlrm_defaults

Criteo-format TSV files written from ``criteo-synth`` (SYNTHETIC data, 10k and 100k lines, three
seeds each) are read through ``criteo:FILE --eval-fraction 0.2``; each setting trains one epoch on
the first 80 % of the lines (one process: the losses do not depend on the world size) and is
scored on the rest, next to the hashed logistic regression of ``benchmarks/dlrm_learning.py`` on
the same split. Prints one JSON object (AUC per file and setting); BENCHMARKS.md has the table.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness, dlrm_learning
import harness  # noqa: E402

SETTINGS = {
    "old defaults: batch 512, emb lr 0.05, dense lr 0.05": dict(batch_size=512, embedding_lr=0.05, dense_lr=0.05),
    "batch 256, emb lr 0.05, dense lr 0.05": dict(batch_size=256, embedding_lr=0.05, dense_lr=0.05),
    "batch 512, emb lr 0.02, dense lr 0.01": dict(batch_size=512, embedding_lr=0.02, dense_lr=0.01),
    "batch 256, emb lr 0.05, dense lr 0.02": dict(batch_size=256, embedding_lr=0.05, dense_lr=0.02),
    "new defaults: batch 256, emb lr 0.02, dense lr 0.01": dict(batch_size=256, embedding_lr=0.02, dense_lr=0.01),
    "batch 128, emb lr 0.02, dense lr 0.01": dict(batch_size=128, embedding_lr=0.02, dense_lr=0.01),
}


def build_parser():
    p = harness.parser(__doc__)
    p.add_argument("--out", default="out/dlrm_defaults")
    p.add_argument("--rows", default="10000,100000")
    p.add_argument("--seeds", default="11,12,13")
    return p


def main(argv=None) -> dict:
    a = build_parser().parse_args(argv)
    import torch
    from dlrm_learning import hashed_logistic_regression

    from embeddings.config import DLRMTrainConfig
    from embeddings.job import quiet_torchrec
    from embeddings.synth import generate, write_tsv
    from embeddings.trainer import train
    from graphdist.procgroup import init_distributed
    quiet_torchrec()
    torch.set_num_threads(1)
    os.makedirs(a.out, exist_ok=True)
    init_distributed("cpu")
    res: dict = {}
    for rows in harness.csv(a.rows, int):
        for seed in harness.csv(a.seeds, int):
            tsv = os.path.join(a.out, f"synthetic_criteo_format_{rows}_{seed}.tsv")
            write_tsv(generate(rows=rows, seed=seed), tsv)
            row = {"hashed_lr": round(hashed_logistic_regression(tsv)["auc"], 4)}
            for name, kw in SETTINGS.items():
                cfg = DLRMTrainConfig(spec=f"criteo:{tsv}", eval_fraction=0.2, progress=False, print_plan=False, **kw)
                row[name] = round(train(cfg)["auc"], 4)
            res[f"{rows} lines, seed {seed}"] = row
            print(json.dumps({f"{rows} lines, seed {seed}": row}), flush=True)
    print(json.dumps(res, indent=1))
    harness.write_json(a.json, res)
    return res


if __name__ == "__main__":
    main()
