"""train-rec at scale on rec-synth: step time, evaluation time, per-rank peak RSS, and halo and
item all-to-all bytes per step, at k = 1, 2, 4, for a few graph sizes; growth exponents.

    OMP_NUM_THREADS=1 python benchmarks/rec_scale.py [--sizes 100000x20000x40,...] [--ks 1,2,4]
        [--steps 6] [--batch-size 131072] [--eval-users 2000] [--halo-rounds R] [--work DIR] [--json FILE]

Each size (USERSxITEMSxAVG_ITEMS, about USERS*AVG_ITEMS interactions) is generated once with
``rec-synth`` and written as a ``lightgcn:DIR`` (train/test as generated), partitioned once per k
with ``graphdist partition lightgcn:DIR --parts K --method metis`` (k = 1: one part), then trained
from the artifact (``train-rec --partition DIR --nproc K --steps N --eval-users E``): a fixed
number of steps at a large batch and a fixed sample of users, so a row costs minutes, not the
hours of a full epoch and a full ranking on a 2-core box. ``mem/peak_bytes_per_rank`` is each
worker's peak RSS (VmHWM). The growth exponent of a quantity q between two sizes is
``log(q2 / q1) / log(n2 / n1)`` with n the interactions (1 = linear).
"""
from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path

import numpy as np

import harness


def spec_of(size: str, work: str) -> tuple[str, int]:
    """``lightgcn:DIR`` holding ``rec-synth:users=U,items=I,avg_items=A,seed=0`` (train and test as
    generated), written once: generating costs users x items, so it is not repeated per k."""
    u, i, a = size.split("x")
    d = Path(work) / f"data-{size}"
    if not (d / "test.txt").exists():
        from graphdist.rec.synth import rec_synth
        t0 = time.perf_counter()
        r = rec_synth(users=int(u), items=int(i), avg_items=float(a), seed=0)
        d.mkdir(parents=True, exist_ok=True)
        for name, pairs in (("train.txt", r.train.numpy()), ("test.txt", r.test.numpy())):
            cut = np.flatnonzero(np.diff(pairs[:, 0])) + 1
            with open(d / name, "w") as f:
                for us, its in zip(np.split(pairs[:, 0], cut), np.split(pairs[:, 1], cut)):
                    f.write(f"{us[0]} " + " ".join(map(str, its.tolist())) + "\n")
        print(f"  generated {size} ({r.train.shape[0] + r.test.shape[0]:,} interactions) in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    return f"lightgcn:{d}", int(u) * int(float(a))


def cli(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run(harness.graphdist_cmd(*args), capture_output=True, text=True, env=env)


def run(size: str, k: int, a, env) -> dict:
    spec, n = spec_of(size, a.work)
    art = Path(a.work) / f"{size}-k{k}"
    if not (art / "meta.json").exists():
        t0 = time.perf_counter()
        r = cli("partition", spec, "--parts", str(k), "--method", "metis" if k > 1 else "random", "--out", str(art),
                env=env)
        if r.returncode:
            return {"size": size, "k": k, "error": r.stderr.strip().splitlines()[-1]}
        print(f"  partitioned {size} k={k} in {time.perf_counter() - t0:.0f} s", flush=True)
    rep = Path(a.work) / f"{size}-k{k}.json"
    t0 = time.perf_counter()
    r = cli("train-rec", "--partition", str(art), "--nproc", str(k), "--steps", str(a.steps), "--batch-size",
            str(a.batch_size), "--eval-users", str(a.eval_users), "--halo-rounds", str(a.halo_rounds), "--no-progress",
            "--report", str(rep), env=env)
    if r.returncode:
        return {"size": size, "k": k, "error": r.stderr.strip().splitlines()[-1]}
    d = json.loads(rep.read_text())
    return {"size": size, "k": k, "interactions": n, "wall_s": time.perf_counter() - t0, "steps": d["steps"],
            "step_s": d["time/step_s"], "eval_s": d["time/eval_s"], "eval_users": d["eval_users"],
            "peak_mib_per_rank": [p / 2 ** 20 for p in d["mem/peak_bytes_per_rank"]],
            "halo_mb_per_step": d["comm/halo_bytes_per_step"] / 1e6, "item_mb_per_step": d["comm/item_bytes_per_step"] / 1e6,
            "summary": r.stdout.strip().splitlines()[0]}


def exponents(rows: list[dict]) -> list[dict]:
    out = []
    for k in sorted({r["k"] for r in rows}):
        rs = sorted((r for r in rows if r["k"] == k and "error" not in r), key=lambda r: r["interactions"])
        for a, b in zip(rs, rs[1:]):
            g = lambda qa, qb: math.log(qb / qa) / math.log(b["interactions"] / a["interactions"])  # noqa: E731
            out.append({"k": k, "from": a["size"], "to": b["size"], "step_s": g(a["step_s"], b["step_s"]),
                        "eval_s": g(a["eval_s"], b["eval_s"]),
                        "peak": g(max(a["peak_mib_per_rank"]), max(b["peak_mib_per_rank"]))})
    return out


def build_parser():
    p = harness.parser(__doc__)
    p.add_argument("--sizes", default="25000x5000x20,100000x20000x40,200000x20000x40")
    p.add_argument("--ks", default="1,2,4")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=131072)
    p.add_argument("--eval-users", type=int, default=1000)
    p.add_argument("--halo-rounds", type=int, default=0)
    p.add_argument("--work", default="/tmp/rec_scale")
    return p


def main(argv=None) -> None:
    a = build_parser().parse_args(argv)
    Path(a.work).mkdir(parents=True, exist_ok=True)
    env = harness.checkout_env(OMP_NUM_THREADS="1")
    rows = []
    for size in harness.csv(a.sizes):
        for k in harness.csv(a.ks, int):
            r = run(size, k, a, env)
            rows.append(r)
            print(json.dumps(r), flush=True)
    print(harness.table(
        ["size (users x items x avg)", "interactions", "k", "step s", "eval s", "peak MiB/rank (max)", "halo MB/step",
         "item MB/step"],
        [[r["size"], None, r["k"], r["error"], None, None, None, None] if "error" in r else
         [r["size"], r["interactions"], r["k"], f"{r['step_s']:.2f}", f"{r['eval_s']:.2f}",
          round(max(r["peak_mib_per_rank"])), f"{r['halo_mb_per_step']:.1f}", f"{r['item_mb_per_step']:.1f}"]
         for r in rows]))
    ex = exponents(rows)
    for e in ex:
        print(f"growth k={e['k']} {e['from']} -> {e['to']}: step {e['step_s']:.2f}, eval {e['eval_s']:.2f}, "
              f"peak RSS {e['peak']:.2f}")
    harness.write_json(a.json, {"rows": rows, "growth": ex})


if __name__ == "__main__":
    main()
