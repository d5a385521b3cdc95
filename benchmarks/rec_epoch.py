"""train-rec epoch time and per-rank peak memory at k = 1, 2, 4 on one rec-synth graph.

    python benchmarks/rec_epoch.py [--spec SPEC] [--parts 1,2,4] [--epochs 2] [--halo mvc] [--threads 1] [--json FILE]

Each k runs ``graphdist train-rec SPEC --parts k --method metis --nproc k --halo H`` in a fresh
process (the paper's hyperparameters: 64 dims, 3 layers, batch 2048) and reads its report: median epoch
time, per-rank peak RSS, halo and item-row traffic. The default spec has about 1.25M
interactions (1M training pairs, 491 steps per epoch).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import harness

SPEC = "rec-synth:users=50000,items=20000,avg_items=25,seed=0"


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--parts", default="1,2,4")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--halo", choices=["plain", "mvc"], default="mvc", help="train-rec --halo")
    ap.add_argument("--threads", type=int, default=1,
                    help="OMP_NUM_THREADS of every process (0: the launcher's cores / k, torch's default at k=1)")
    ap.set_defaults(json=Path("runs/rec_epoch.json"))  # each k's report goes beside it
    return ap


def main(argv=None):
    a = build_parser().parse_args(argv)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for k in harness.csv(a.parts, int):
        rep = a.json.with_name(f"{a.json.stem}_k{k}.json")
        cmd = harness.graphdist_cmd("train-rec", a.spec, "--parts", str(k), "--method", "metis", "--nproc", str(k),
                                    "--epochs", str(a.epochs), "--halo", a.halo, "--no-progress", "--report", str(rep))
        env = harness.checkout_env()
        if a.threads:
            env["OMP_NUM_THREADS"] = str(a.threads)
        print("$", " ".join(cmd[1:]), flush=True)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode:
            sys.exit(f"k={k} failed ({r.returncode}): {r.stderr[-2000:]}")
        d = json.loads(rep.read_text())
        rows.append({"k": k, "epoch_s": d["time/epoch_s"],
                     "peak_mib_per_rank": [p / 2**20 for p in d["mem/peak_bytes_per_rank"]],
                     "halo_mb_per_epoch": d["comm/halo_bytes_per_epoch"] / 1e6,
                     "item_mb_per_epoch": d["comm/item_bytes_per_epoch"] / 1e6, "data": d["data"],
                     "recall@20": d["recall@20"], "losses": d["losses"]})
        print(f"k={k}: {d['time/epoch_s']:.1f} s/epoch, peak {max(rows[-1]['peak_mib_per_rank']):.0f} MiB/rank, "
              f"halo {rows[-1]['halo_mb_per_epoch']:.0f} MB/epoch, items {rows[-1]['item_mb_per_epoch']:.0f} MB/epoch, "
              f"losses {[round(x, 5) for x in d['losses']]}", flush=True)
    harness.write_json(a.json, {"spec": a.spec, "epochs": a.epochs, "halo": a.halo, "threads": a.threads,
                                "results": rows}, indent=2)
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
