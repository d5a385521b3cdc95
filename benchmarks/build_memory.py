"""Peak memory of building the artifact: one process (``partition FILE --assignment A``) against
k workers (``partition FILE --assignment A --nproc k``), from the same edge-list file and the
same assignment, on one box, one run at a time.

    python benchmarks/build_memory.py                                   # 1M nodes, avg degree 20, k = 2, 4
    python benchmarks/build_memory.py --nodes 2449029 --avg-degree 50 --nproc 4 --json runs/build.json

The edge list is an SBM (``--homophily``) written as text, one undirected edge per line; the
assignment is Fennel's (a streaming, O(N)-memory method) from ``partitioners.partition``. Each
command runs under ``/usr/bin/time -v``; its ``Maximum resident set size`` is the largest single
process of the command (the one process, or the largest worker or the launcher). The k-worker
build also prints its own per-worker peak (``VmHWM`` of each rank). After the runs the part files
and ``assignment.npy`` of both artifacts are compared byte for byte.
"""
from __future__ import annotations

import filecmp
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import harness


def write_inputs(d: Path, nodes: int, avg_degree: int, homophily: float, ks: list[int], seed: int):
    """``edges.txt`` (u < v, one per line) and ``fennel{k}.npy`` per k; returns the edge count."""
    from graphdist.data import load_graph
    from partitioners import partition
    spec = (f"sbm:nodes={nodes},classes=16,avg_degree={avg_degree},homophily={homophily},"
            f"features=0,seed={seed}")
    g = load_graph(spec)
    indptr, indices = g.indptr.numpy(), g.indices.numpy()
    dst = np.repeat(np.arange(nodes, dtype=np.int64), np.diff(indptr))
    keep = indices < dst  # each undirected edge once
    u, v = indices[keep].astype(np.int64), dst[keep]
    if np.unique(np.concatenate([u, v])).size != nodes:
        raise SystemExit("the SBM has isolated nodes; raise --avg-degree")
    with open(d / "edges.txt", "w") as f:
        for i in range(0, u.size, 1 << 22):
            np.savetxt(f, np.stack([u[i:i + (1 << 22)], v[i:i + (1 << 22)]], 1), fmt="%d", delimiter="\t")
    for k in sorted(set(ks)):
        np.save(d / f"fennel{k}.npy", partition(g, k, method="fennel", seed=seed).numpy())
    return int(u.size), spec


def run(cmd: list[str], timeout: int) -> dict:
    p = harness.time_v(harness.graphdist_cmd(*cmd), timeout, cwd=Path.cwd())
    if p.rc != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {p.rc}: {p.error_line()}")
    worker = re.search(r"peak RSS (\d+\.\d+) GiB per worker", p.stdout)
    return {"wall_s": p.wall_s, "peak_rss_gib": p.peak_rss_gib, "worker_peak_gib": float(worker.group(1)) if worker else None}


def same(a: Path, b: Path) -> bool:
    names = ["assignment.npy"] + sorted(p.name for p in a.glob("part_*.pt"))
    return all(filecmp.cmp(a / n, b / n, shallow=False) for n in names)


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--avg-degree", type=int, default=20)
    ap.add_argument("--homophily", type=float, default=0.9)
    ap.add_argument("--nproc", default="2,4", help="worker counts, comma-separated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=3600)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    ks = harness.csv(args.nproc, int)
    root = Path(tempfile.mkdtemp(prefix="graphdist-build-"))
    results = []
    try:
        t0 = time.perf_counter()
        m, spec = write_inputs(root, args.nodes, args.avg_degree, args.homophily, ks, args.seed)
        size = (root / "edges.txt").stat().st_size
        print(f"edge list: {args.nodes:,} nodes, {m:,} undirected edges, {size / 2**20:,.0f} MiB of text "
              f"({spec}; written in {time.perf_counter() - t0:.0f} s)", flush=True)
        for k in ks:
            a = root / f"fennel{k}.npy"
            base = ["partition", f"edgelist:{root / 'edges.txt'}", "--assignment", str(a)]
            one = run(base + ["--out", str(root / f"one{k}")], args.timeout)
            many = run(base + ["--nproc", str(k), "--out", str(root / f"many{k}")], args.timeout)
            r = {"k": k, "nodes": args.nodes, "undirected_edges": m, "one": one, "workers": many,
                 "ratio": round(many["peak_rss_gib"] / one["peak_rss_gib"], 3),
                 "identical": same(root / f"one{k}", root / f"many{k}")}
            results.append(r)
            print(f"k={k}  one process {one['wall_s']:6.1f} s peak {one['peak_rss_gib']:5.2f} GiB | "
                  f"{k} workers {many['wall_s']:6.1f} s peak {many['peak_rss_gib']:5.2f} GiB "
                  f"(per worker {many['worker_peak_gib']} GiB) | ratio {r['ratio']:.3f} | "
                  f"identical {r['identical']}", flush=True)
            for d in (f"one{k}", f"many{k}"):
                shutil.rmtree(root / d, ignore_errors=True)
            harness.write_json(args.json, results, indent=2)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
