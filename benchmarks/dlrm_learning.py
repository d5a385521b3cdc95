"""DLRM learning checks: synthetic AUC, shuffled labels, and an 80/20 split vs hashed logistic regression.

    python benchmarks/dlrm_learning.py --out out/dlrm_learning            # synthetic checks
    python benchmarks/dlrm_learning.py --criteo /data/criteo/train.txt --lines 200000  # + a real file

1. ``graphdist train-dlrm criteo-synth: --nproc 2``: one epoch at defaults, AUC on the held-out 20 %.
2. The same with ``shuffle_labels=1``: no signal, AUC should stay near 0.5.
3. A Criteo-format TSV (label, 13 ints, 26 hex ids) written from ``criteo-synth`` - SYNTHETIC data in
   the real file format - trained with ``graphdist train-dlrm criteo:FILE --eval-fraction 0.2``
   (first 80 % of lines, one epoch) and compared with a hashed logistic regression on the same
   split (26 categorical columns hashed into 2^20 weights + 13 log-dense weights, Adagrad, one
   epoch, same batch size).
4. The same with a 10k-line file (8k training rows: the small-data case where the old defaults,
   batch 512 and learning rates 0.05, lost to logistic regression).
5. 2D sparse parallelism at ``--nproc-2d`` ranks (default 4): ``--sharding row_wise`` 1D vs
   ``--sparse-groups 2`` (sync every step, and every 10 steps), row-wise AdaGrad vs the
   momentum-scaled variant, on criteo-synth and on the 100k-line Criteo-format file.
6. With ``--criteo PATH``: the first ``--lines`` lines of a real Criteo file, same comparison.

Prints one JSON object; the figures are recorded in BENCHMARKS.md.
"""
from __future__ import annotations

import json
import os
import subprocess
import time

import numpy as np
import torch

import harness


def run_cli(args: list[str], report: str) -> dict:
    cmd = harness.graphdist_cmd("train-dlrm", *args, "--report", report, "--no-progress")
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=harness.checkout_env())
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    with open(report) as fh:
        rep = json.load(fh)
    return {"command": "graphdist " + " ".join(cmd[3:]), "auc": rep["auc"], "logloss": rep["logloss"],
            "ne": rep["ne"], "steps": rep["steps"], "samples_per_s": rep["throughput/samples_per_s"],
            "wall_s": round(time.perf_counter() - t0, 1)}


def hashed_logistic_regression(path: str, eval_fraction: float = 0.2, batch: int = 512,
                               buckets: int = 2 ** 20, lr: float = 0.05, seed: int = 0,
                               skip_bad_lines: bool = False) -> dict:
    """One epoch of hashed LR on the first (1 - f) of the lines; AUC etc. on the rest."""
    from embeddings.criteo import load_criteo
    from embeddings.data import split_eval
    from embeddings.metrics import click_metrics
    torch.manual_seed(seed)
    train, ev = split_eval(load_criteo(path, skip_bad_lines=skip_bad_lines), eval_fraction)
    salt = (np.arange(26, dtype=np.int64) * 0x9E3779B1)[None, :]

    def feats(d, a, b):
        ids = (np.asarray(d.cat[a:b, :, 0], dtype=np.int64) ^ salt) % buckets
        return torch.from_numpy(np.asarray(d.dense[a:b], dtype=np.float32)), torch.from_numpy(ids)

    emb = torch.nn.EmbeddingBag(buckets, 1, mode="sum")
    torch.nn.init.zeros_(emb.weight)
    lin = torch.nn.Linear(13, 1)
    opt = torch.optim.Adagrad([*emb.parameters(), *lin.parameters()], lr=lr)
    t0 = time.perf_counter()
    for s in range(0, len(train) - batch + 1, batch):
        x, ids = feats(train, s, s + batch)
        y = torch.from_numpy(np.asarray(train.labels[s:s + batch], dtype=np.float32))
        logit = emb(ids).squeeze(-1) + lin(x).squeeze(-1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        x, ids = feats(ev, 0, len(ev))
        logit = (emb(ids).squeeze(-1) + lin(x).squeeze(-1)).numpy()
    m = click_metrics(np.asarray(ev.labels, dtype=np.float64), logit)
    return {"auc": m["auc"], "logloss": m["logloss"], "ne": m["ne"], "train_s": round(time.perf_counter() - t0, 1),
            "train_rows": len(train), "eval_rows": len(ev)}


def compare_2d(a, tsv: str) -> dict:
    """1D row_wise vs 2D (2 replicas) with row-wise AdaGrad and its momentum-scaled variant."""
    n = ["--nproc", str(a.nproc_2d), "--sharding", "row_wise"]
    runs = {"1d rowwise_adagrad": [],
            "1d rowwise_adagrad_scaled (= rowwise_adagrad at G=1)": ["--embedding-optimizer", "rowwise_adagrad_scaled"],
            "2d rowwise_adagrad": ["--sparse-groups", "2"],
            "2d rowwise_adagrad_scaled": ["--sparse-groups", "2", "--embedding-optimizer", "rowwise_adagrad_scaled"],
            "2d rowwise_adagrad, sync every 10": ["--sparse-groups", "2", "--sync-every", "10"],
            "2d rowwise_adagrad_scaled, sync every 10": ["--sparse-groups", "2", "--sync-every", "10",
                                                         "--embedding-optimizer", "rowwise_adagrad_scaled"]}
    out = {}
    for data, spec in (("criteo-synth", ["criteo-synth:"]),
                       ("synthetic Criteo-format TSV", [f"criteo:{tsv}", "--eval-fraction", "0.2"])):
        out[data] = {k: run_cli([*spec, *n, *extra], os.path.join(a.out, f"2d_{len(out)}_{i}.json"))
                     for i, (k, extra) in enumerate(runs.items())}
    return out


def head(src: str, dst: str, lines: int) -> None:
    with open(src, "rb") as fi, open(dst + ".tmp", "wb") as fo:
        for i, ln in enumerate(fi):
            if i >= lines:
                break
            fo.write(ln)
    os.replace(dst + ".tmp", dst)


def build_parser():
    p = harness.parser(__doc__)
    p.add_argument("--out", default="out/dlrm_learning")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--tsv-rows", type=int, default=100_000, help="rows of the synthetic Criteo-format TSV")
    p.add_argument("--criteo", default=None, help="a real Criteo TSV (Kaggle train.txt or a day_* file)")
    p.add_argument("--lines", type=int, default=200_000, help="lines of --criteo to use")
    p.add_argument("--skip", default="", help="comma list of parts to skip: synth,shuffled,tsv,tsv10k,2d")
    p.add_argument("--nproc-2d", type=int, default=4, help="ranks of the 2D vs 1D comparison")
    return p


def main(argv=None) -> dict:
    a = build_parser().parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    skip = set(harness.csv(a.skip))
    res: dict = {}
    n = ["--nproc", str(a.nproc)]
    if "synth" not in skip:
        res["synth_defaults"] = run_cli(["criteo-synth:", *n], os.path.join(a.out, "synth.json"))
    if "shuffled" not in skip:
        res["synth_shuffled_labels"] = run_cli(["criteo-synth:shuffle_labels=1", *n],
                                               os.path.join(a.out, "shuffled.json"))
    from embeddings.synth import generate, write_tsv
    tsv = os.path.join(a.out, "synthetic_criteo_format.tsv")
    if skip & {"tsv", "2d"} != {"tsv", "2d"}:
        write_tsv(generate(rows=a.tsv_rows, seed=11), tsv)
    if "tsv" not in skip:
        res["synthetic_criteo_format_tsv"] = {
            "note": "SYNTHETIC data (criteo-synth) written in the Criteo TSV format; not real Criteo",
            "dlrm": run_cli([f"criteo:{tsv}", "--eval-fraction", "0.2", *n], os.path.join(a.out, "tsv.json")),
            "hashed_lr": hashed_logistic_regression(tsv)}
    if "tsv10k" not in skip:
        small = {}
        for seed in (11, 12, 13):
            f = os.path.join(a.out, f"synthetic_criteo_format_10k_{seed}.tsv")
            write_tsv(generate(rows=10_000, seed=seed), f)
            small[f"seed {seed}"] = {
                "dlrm": run_cli([f"criteo:{f}", "--eval-fraction", "0.2", *n], os.path.join(a.out, f"tsv10k_{seed}.json")),
                "hashed_lr": hashed_logistic_regression(f)}
        res["synthetic_criteo_format_10k"] = small
    if "2d" not in skip:
        res["2d_vs_1d"] = compare_2d(a, tsv)
    if a.criteo:
        f = os.path.join(a.out, "criteo_head.tsv")
        head(a.criteo, f, a.lines)
        res["real_criteo"] = {"source": a.criteo, "lines": a.lines,
                              "dlrm": run_cli([f"criteo:{f}", "--eval-fraction", "0.2", "--skip-bad-lines", *n],
                                              os.path.join(a.out, "criteo.json")),
                              "hashed_lr": hashed_logistic_regression(f, skip_bad_lines=True)}
    print(json.dumps(res, indent=1))
    harness.write_json(a.json, res)
    return res


if __name__ == "__main__":
    main()
