"""Epoch time of two checkouts side by side, in one run: ``train-gcn --partition DIR --nproc K``
from checkout A (e.g. a ``git worktree`` of an older commit) and from checkout B (this one),
alternating A, B, A, B ... on the same artifacts, one at a time, one thread per rank. Prints
per run the median epoch, halo bytes per epoch, peak memory and the losses (to the printed
digits), and per K the ratio B / A of the median epochs.

    python benchmarks/epoch_ab.py --a /tmp/base --b . --runs K1DIR:1,K4DIR:4 [--epochs 3]
        [--pairs 1] [--b-flags "--reorder community"] [--a-flags ""] [--out DIR] [--json FILE]

Every run is its own process tree (``python -m graphdist train-gcn``, ``PYTHONPATH`` set to its
checkout), so the two checkouts never share an import.
"""
from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import harness


def run_one(checkout: Path, art: str, k: int, epochs: int, flags: list[str], report: Path, log: Path) -> dict:
    env = harness.checkout_env(checkout.resolve(), OMP_NUM_THREADS="1")
    cmd = harness.graphdist_cmd("train-gcn", "--partition", art, "--nproc", str(k), "--layers", "2", "--hidden", "64",
                                "--epochs", str(epochs), "--no-progress", "--report", str(report), *flags)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=checkout, env=env).returncode
    wall = time.perf_counter() - t0
    if rc != 0 or not report.exists():
        return {"rc": rc, "wall_s": wall, "cmd": shlex.join(cmd)}
    r = json.loads(report.read_text())
    return {"rc": rc, "wall_s": wall, "cmd": shlex.join(cmd), "epoch_s": r["time/epoch_s"],
            "losses": [f"{v:.4f}" for v in r["losses"]], "halo_bytes": r["comm/halo_bytes_per_epoch"],
            "peak_gib": r["mem/peak_bytes"] / 2**30, "input_halo": r.get("comm/input_halo")}


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--a", type=Path, required=True, help="checkout A (the baseline)")
    ap.add_argument("--b", type=Path, default=Path("."), help="checkout B")
    ap.add_argument("--runs", required=True, help="DIR:K[,DIR:K...]")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--a-flags", default="")
    ap.add_argument("--b-flags", default="")
    ap.add_argument("--out", type=Path, default=Path("runs/epoch_ab"))
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in harness.csv(args.runs):
        art, k = spec.rsplit(":", 1)
        k = int(k)
        res = {"A": [], "B": []}
        for p in range(args.pairs):
            for side, co, fl in (("A", args.a, args.a_flags), ("B", args.b, args.b_flags)):
                tag = f"{Path(art).name}_k{k}_{side}{p}"
                r = run_one(co, art, k, args.epochs, shlex.split(fl), args.out / f"{tag}.json", args.out / f"{tag}.log")
                res[side].append(r)
                print(f"{tag}: " + json.dumps({x: r.get(x) for x in ("rc", "epoch_s", "halo_bytes", "peak_gib",
                                                                      "input_halo", "losses", "wall_s")}), flush=True)
        ea = [r["epoch_s"] for r in res["A"] if "epoch_s" in r]
        eb = [r["epoch_s"] for r in res["B"] if "epoch_s" in r]
        row = {"artifact": art, "k": k, "A": res["A"], "B": res["B"]}
        if ea and eb:
            row["ratio_b_over_a"] = statistics.median(eb) / statistics.median(ea)
            row["same_losses"] = all(ra["losses"] == rb["losses"] for ra, rb in zip(res["A"], res["B"]))
            print(f"k={k}: A {statistics.median(ea):.2f} s, B {statistics.median(eb):.2f} s per epoch: "
                  f"B/A {row['ratio_b_over_a']:.3f}; same losses: {row['same_losses']}", flush=True)
        rows.append(row)
    harness.write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
