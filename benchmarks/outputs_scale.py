"""After training at scale (issue 45): ``graphdist infer`` against a training epoch of the same run,
and ``graphdist recommend`` against faiss's exact ``IndexFlatIP`` in one process.

    python benchmarks/outputs_scale.py infer [--nodes 2449029] [--ks 1,4] [--configs 2x64,3x256]
        [--work DIR] [--json FILE]
    python benchmarks/outputs_scale.py recommend [--users 1000000] [--items 200000] [--avg-items 20]
        [--ks 1,4] [--sample-users 20000] [--top-k 20] [--work DIR] [--json FILE]

``infer``: the products-shaped SBM (``sbm:nodes=N,classes=47,avg_degree=50,homophily=0.9,
features=100,seed=0``), partitioned once per k (k = 1: ``block``, else METIS); per config LxH
one training epoch with a checkpoint (``train-gcn --partition DIR --nproc K --epochs 1``), then
``infer`` from it on the same ranks. Reported: the epoch's time and the inference's forward
time (their ratio; target <= 0.35), each command's peak per rank (the reports'
``mem/peak_bytes_per_rank``; target: inference <= training), and the output's write rate
beside ``dd`` writing as many bytes to the same disk (``oflag=direct``, ``conv=fsync``).

``recommend``: USERS x ITEMS with AVG_ITEMS interactions per user, drawn at random with a Zipf
popularity of the items (numpy, written as ``lightgcn:DIR`` train/test files; rec-synth's
planted model scores users x items and took 83 min at this size), partitioned per k (METIS),
trained one step with a checkpoint at the largest k, then ``recommend`` for a fixed sample of
users (``--users FILE``, the same at every k) and ``export`` of the vectors; faiss's exact
inner-product index (``IndexFlatIP``, one process) searches the same users' vectors against all
items, the training items removed from its top ``K + max training items`` afterwards. The
top-K sets are compared user by user. Every command runs alone, as a user runs it.
"""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import numpy as np

import harness


def gd(*args, threads: int | None = None) -> dict:
    """``graphdist ARGS`` as a user runs it; wall seconds and the exit code (output on failure)."""
    env = harness.checkout_env(**({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    t0 = time.perf_counter()
    r = subprocess.run(harness.graphdist_cmd(*map(str, args)), cwd=harness.REPO, env=env,
                       capture_output=True, text=True)
    out = {"rc": r.returncode, "wall_s": time.perf_counter() - t0}
    print(f"  {' '.join(map(str, args))[:150]} -> rc {r.returncode}, {out['wall_s']:.0f} s", flush=True)
    if r.returncode:
        print(r.stdout[-2000:], r.stderr[-2000:], flush=True)
        raise SystemExit(f"failed: graphdist {' '.join(map(str, args))}")
    return out


def dd_rate(path: Path, nbytes: int) -> float:
    """MB/s of ``dd`` writing ``nbytes`` (at least 64 MiB) to ``path``, direct and synced."""
    count = max(4, -(-nbytes // (16 << 20)))
    r = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=16M", f"count={count}", "oflag=direct",
                        "conv=fsync"], capture_output=True, text=True)
    path.unlink(missing_ok=True)
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", r.stderr)
    return int(m.group(1)) / float(m.group(2)) / 1e6


def infer_runs(args) -> dict:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    spec = f"sbm:nodes={args.nodes},classes=47,avg_degree=50,homophily=0.9,features=100,seed=0"
    rows = []
    for k in args.ks:
        art = work / f"g{args.nodes}_k{k}"
        if not (art / "meta.json").exists():
            gd("partition", spec, "--parts", k, "--method", "block" if k == 1 else "metis", "--out", art)
        for conf in args.configs:
            layers, hidden = map(int, conf.split("x"))
            tag = f"k{k}_{conf}"
            ck, out = work / f"ck_{tag}", work / f"out_{tag}"
            threads = 1 if k > 1 else None
            t = gd("train-gcn", "--partition", art, "--nproc", k, "--layers", layers, "--hidden", hidden,
                   "--epochs", 1, "--checkpoint-dir", ck, "--no-progress", "--report", work / f"train_{tag}.json",
                   threads=threads)
            i = gd("infer", "--partition", art, "--nproc", k, "--checkpoint-dir", ck, "--out", out, "--overwrite",
                   "--report", work / f"infer_{tag}.json", threads=threads)
            tr = json.loads((work / f"train_{tag}.json").read_text())
            inf = json.loads((work / f"infer_{tag}.json").read_text())
            row = {"k": k, "config": conf, "epoch_s": tr["time/epoch_s"], "forward_s": inf["time/forward_s"],
                   "ratio": inf["time/forward_s"] / tr["time/epoch_s"], "load_s": inf["time/load_s"],
                   "write_s": inf["time/write_s"], "out_bytes": inf["bytes"],
                   "write_MB_s": inf["bytes"] / max(inf["time/write_s"], 1e-9) / 1e6,
                   "dd_MB_s": dd_rate(work / "dd.bin", inf["bytes"]),
                   "train_peak_MiB": [b / 2**20 for b in tr["mem/peak_bytes_per_rank"]],
                   "infer_peak_MiB": [b / 2**20 for b in inf["mem/peak_bytes_per_rank"]],
                   "train_wall_s": t["wall_s"], "infer_wall_s": i["wall_s"]}
            print(json.dumps(row), flush=True)
            rows.append(row)
            subprocess.run(["rm", "-rf", str(ck), str(out)])
    return {"spec": spec, "rows": rows}


def write_data(args, d: Path) -> None:
    """USERS x ITEMS, AVG_ITEMS interactions a user (Poisson), items by a Zipf(1.1) popularity;
    the last fifth of each user's items is the test set."""
    if (d / "test.txt").exists():
        return
    rng = np.random.default_rng(0)
    d.mkdir(parents=True, exist_ok=True)
    pop = 1.0 / np.arange(1, args.items + 1) ** 1.1
    cdf = np.cumsum(pop / pop.sum())
    with open(d / "train.txt", "w") as ftr, open(d / "test.txt", "w") as fte:
        for lo in range(0, args.users, 100_000):
            n = min(args.users, lo + 100_000) - lo
            cnt = np.maximum(rng.poisson(args.avg_items, n), 2)
            items = np.searchsorted(cdf, rng.random(int(cnt.sum())))
            for u, its in zip(range(lo, lo + n), np.split(items, np.cumsum(cnt)[:-1])):
                its = np.unique(its)
                cut = max(1, its.size * 4 // 5)
                ftr.write(f"{u} " + " ".join(map(str, its[:cut].tolist())) + "\n")
                if its.size > cut:
                    fte.write(f"{u} " + " ".join(map(str, its[cut:].tolist())) + "\n")


def rec_runs(args) -> dict:
    work = Path(args.work)
    d = work / f"data-{args.users}x{args.items}x{args.avg_items}"
    t0 = time.perf_counter()
    write_data(args, d)
    print(f"  data in {time.perf_counter() - t0:.0f} s", flush=True)
    spec = f"lightgcn:{d}"
    sample = np.random.default_rng(1).choice(args.users, args.sample_users, replace=False)
    users = work / "users.txt"
    users.write_text("".join(f"{u}\n" for u in np.sort(sample)))
    arts = {}
    for k in args.ks:
        arts[k] = work / f"rec_k{k}"
        if not (arts[k] / "meta.json").exists():
            gd("partition", spec, "--parts", k, "--method", "block" if k == 1 else "metis", "--out", arts[k])
    kmax = max(args.ks)
    ck = work / "rec_ck"
    if not (ck / "latest").exists():
        gd("train-rec", "--partition", arts[kmax], "--nproc", kmax, "--steps", 1, "--batch-size", 131072,
           "--eval-users", 100, "--checkpoint-dir", ck, "--no-progress", threads=1)
    rows = {}
    for k in args.ks:
        out = work / f"top_k{k}"
        w = gd("recommend", "--partition", arts[k], "--nproc", k, "--checkpoint-dir", ck, "--top-k", args.top_k,
               "--users", users, "--out", out, "--overwrite", "--report", work / f"rec_k{k}.json",
               threads=1 if k > 1 else None)
        rep = json.loads((work / f"rec_k{k}.json").read_text())
        rows[k] = {"rank_s": rep["time/rank_s"], "load_s": rep["time/load_s"], "wall_s": w["wall_s"],
                   "peak_MiB": [b / 2**20 for b in rep["mem/peak_bytes_per_rank"]],
                   "estimate_MiB": [b / 2**20 for b in rep.get("mem/estimate_bytes_per_rank") or []]}
        print(json.dumps({k: rows[k]}), flush=True)
    vec = work / "vectors"
    gd("export", "--partition", arts[kmax], "--nproc", kmax, "--checkpoint-dir", ck, "--out", vec, "--overwrite",
       threads=1)
    return {"spec": spec, "users_sampled": args.sample_users, "top_k": args.top_k, "recommend": rows,
            "faiss": faiss_side(args, d, vec, work / f"top_k{kmax}", sample)}


def faiss_side(args, d: Path, vec: Path, top: Path, sample: np.ndarray) -> dict:
    """faiss's exact IndexFlatIP over the exported vectors, one process; the same top-K sets?"""
    import faiss
    import pyarrow.parquet as pq
    from graphdist.rec.data import load_ratings
    r = load_ratings(f"lightgcn:{d}")
    u = pq.read_table(vec / "users.parquet")
    it = pq.read_table(vec / "items.parquet")
    U = np.stack(u.column("embedding").to_numpy(zero_copy_only=False))[np.argsort(u.column("user_id").to_numpy())]
    V = np.stack(it.column("embedding").to_numpy(zero_copy_only=False))[np.argsort(it.column("item_id").to_numpy())]
    train = r.train.numpy()
    seen = {}
    for a, b in train[np.isin(train[:, 0], sample)]:
        seen.setdefault(int(a), set()).add(int(b))
    extra = max(len(s) for s in seen.values()) if seen else 0
    q = np.ascontiguousarray(U[np.sort(sample)], dtype=np.float32)
    faiss.omp_set_num_threads(2)
    t0 = time.perf_counter()
    index = faiss.IndexFlatIP(V.shape[1])
    index.add(np.ascontiguousarray(V, dtype=np.float32))
    scores, ids = index.search(q, args.top_k + extra)
    fs = time.perf_counter() - t0
    got = pq.read_table(sorted(str(p) for p in top.glob("*.parquet"))).to_pandas()
    ours = got.groupby("user_id").item_id.apply(set).to_dict()
    same = 0
    for uu, row, sc in zip(np.sort(sample), ids, scores):
        keep = [i for i in row.tolist() if i not in seen.get(int(uu), ())][:args.top_k]
        same += set(keep) == ours.get(int(uu), set())
    return {"search_s": fs, "users": int(q.shape[0]), "same_sets": same, "threads": 2}


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("what", choices=["infer", "recommend"])
    ap.add_argument("--nodes", type=int, default=2449029)
    ap.add_argument("--ks", type=lambda s: harness.csv(s, int), default=[1, 4])
    ap.add_argument("--configs", type=harness.csv, default=["2x64", "3x256"])
    ap.add_argument("--users", type=int, default=1_000_000)
    ap.add_argument("--items", type=int, default=200_000)
    ap.add_argument("--avg-items", type=int, default=20)
    ap.add_argument("--sample-users", type=int, default=20_000)
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--work", default="runs/outputs_scale")
    return ap


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    res = infer_runs(args) if args.what == "infer" else rec_runs(args)
    print(json.dumps(res, indent=2))
    harness.write_json(args.json, res, indent=2)


if __name__ == "__main__":
    main()
