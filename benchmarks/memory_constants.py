"""Measure the constants of graphdist's memory model (BENCHMARKS.md, "Memory model constants").

    nice -n 10 python benchmarks/memory_constants.py [--workdir DIR] [--json FILE]

Three figures, each in fresh processes started as a user starts them (``python -m graphdist ...``):

1. **The process footprint** (:data:`graphdist.memory.PROCESS_BYTES`): the peak resident set of
   each rank (``mem/peak_bytes_per_rank``, the worker's ``VmHWM``) of ``train-gcn`` and
   ``train-rec`` on a graph of a few hundred nodes, at k = 1 and 2: Python, torch, graphdist's
   imports and the process group, with almost no data.
2. **The activation slack** (:data:`graphdist.gnn.plan_memory.ALLOC_SLACK`): on graphs whose
   activations dominate, ``(measured peak - tiny run's peak - predicted arrays) / predicted
   activations``, the factor the allocator adds over the tensors ``plan`` replays.
3. **The stats-mode plan bytes** (``STATS_BYTES_PER_ROW * n + STATS_BYTES_PER_HALO_ROW * h`` in
   :func:`graphdist.gnn.stats.stats_parts`):
   the bytes of a part's arrays other than features and CSR (``PartStats.plan_bytes``) per owned
   row and per halo row, the largest over the parts of SBM and R-MAT artifacts at k = 2, 4, 8.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MiB = 2 ** 20
TINY_GCN = "sbm:nodes=400,classes=4,avg_degree=8,features=16,seed=0"
TINY_REC = "rec-synth:users=300,items=200,seed=0"
BIG = [  # (spec, k, train-gcn flags): activations and features well above the footprint
    ("sbm:nodes=40000,classes=8,avg_degree=16,features=512,seed=0", 1, ["--layers", "3", "--hidden", "256"]),
    ("sbm:nodes=40000,classes=8,avg_degree=16,features=512,seed=0", 2, ["--layers", "3", "--hidden", "256"]),
    ("sbm:nodes=80000,classes=16,avg_degree=10,features=64,seed=1", 2, ["--layers", "2", "--hidden", "512"]),
]


def run(cmd: list[str], report: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "graphdist", *cmd, "--report", str(report), "--no-progress"],
                       capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return json.loads(report.read_text())


def footprint(work: Path) -> dict:
    out = {}
    for k in (1, 2):
        nproc = ["--nproc", str(k)] if k > 1 else []
        g = run(["train-gcn", TINY_GCN, "--parts", str(k), "--method", "block", "--epochs", "2", *nproc],
                work / f"gcn{k}.json")
        r = run(["train-rec", TINY_REC, "--parts", str(k), "--method", "block", "--epochs", "1", *nproc],
                work / f"rec{k}.json")
        out[f"train-gcn k={k}"] = g["mem/peak_bytes_per_rank"]
        out[f"train-rec k={k}"] = r["mem/peak_bytes_per_rank"]
    return out


def slack(work: Path, tiny: dict) -> list[dict]:
    from graphdist.gnn.plan import PlanConfig, plan
    from graphdist.gnn.plan_memory import ALLOC_SLACK
    rows = []
    for i, (spec, k, flags) in enumerate(BIG):
        art = work / f"art{i}"
        subprocess.run([sys.executable, "-m", "graphdist", "partition", spec, "--parts", str(k), "--method",
                        "metis" if k > 1 else "block", "--out", str(art)], check=True, capture_output=True, cwd=ROOT)
        got = run(["train-gcn", "--partition", str(art), "--epochs", "2", *flags]
                  + (["--nproc", str(k)] if k > 1 else []), work / f"big{i}.json")
        fields = {"layers": int(flags[1]), "hidden": int(flags[3])}
        want = plan(PlanConfig(partition=str(art), spmm_rate=1e9, **fields))
        base = max(tiny[f"train-gcn k={k}"])
        for r, (row, m) in enumerate(zip(want["ranks"], got["mem/peak_bytes_per_rank"])):
            act = row["activation_bytes"] / ALLOC_SLACK  # as replayed, before the slack
            arrays = row["peak_bytes"] - row["runtime_bytes"] - row["activation_bytes"]
            rows.append({"graph": spec, "k": k, "rank": r, "flags": " ".join(flags), "measured_MiB": m / MiB,
                         "tiny_MiB": base / MiB, "arrays_MiB": arrays / MiB, "activations_MiB": act / MiB,
                         "slack": (m - base - arrays) / act,
                         "predicted_over_measured_above_tiny": (row["peak_bytes"] - row["runtime_bytes"])
                         / (m - base)})
    return rows


def plan_bytes(work: Path) -> list[dict]:
    import torch

    from graphdist.data import load_graph
    from graphdist.gnn.stats import part_stats
    from graphdist.partition.layout import build_layouts
    from partitioners import partition
    rows = []
    for spec in ("sbm:nodes=20000,classes=8,avg_degree=16,features=8,seed=0", "rmat:scale=14,edge_factor=8,seed=0"):
        g = load_graph(spec)
        for k in (2, 4, 8):
            a = torch.as_tensor(partition(g, k, method="metis", seed=0))
            for r, lg in enumerate(build_layouts(g, a, k)):
                ps = part_stats(lg, check_symmetry=False)
                rows.append({"graph": spec, "k": k, "rank": r, "n": ps.n, "h": ps.halo,
                             "plan_bytes": ps.plan_bytes})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="graphdist-memconst-"))
    work.mkdir(parents=True, exist_ok=True)
    tiny = footprint(work)
    print("1. process footprint: peak resident MiB per rank of a tiny run")
    for name, peaks in tiny.items():
        print(f"   {name:<16} " + "  ".join(f"{p / MiB:6.0f}" for p in peaks))
    biggest = max(max(p) for p in tiny.values())
    print(f"   largest {biggest / MiB:.0f} MiB")
    rows = slack(work, tiny)
    print("2. activation slack: (measured - tiny - arrays) / replayed activations")
    for r in rows:
        print(f"   {r['graph'][:40]:<40} k={r['k']} rank {r['rank']} {r['flags']:<22} measured {r['measured_MiB']:6.0f} "
              f"tiny {r['tiny_MiB']:4.0f} arrays {r['arrays_MiB']:5.0f} activations {r['activations_MiB']:5.0f} MiB: "
              f"slack {r['slack']:.3f}; predicted/measured above the footprint "
              f"{r['predicted_over_measured_above_tiny']:.3f}")
    from graphdist.gnn.stats import STATS_BYTES_PER_HALO_ROW as B_H
    from graphdist.gnn.stats import STATS_BYTES_PER_ROW as B_N
    pb = plan_bytes(work)
    per_n = max((r["plan_bytes"] - B_H * r["h"]) / r["n"] for r in pb)
    per_h = max((r["plan_bytes"] - B_N * r["n"]) / max(r["h"], 1) for r in pb)
    worst = max(r["plan_bytes"] / (B_N * r["n"] + B_H * r["h"]) for r in pb)
    print(f"3. plan bytes over {len(pb)} parts: at {B_H} B per halo row, at most {per_n:.1f} B per owned row; "
          f"at {B_N} B per owned row, at most {per_h:.1f} B per halo row; "
          f"measured / ({B_N} n + {B_H} h) at most {worst:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"footprint": tiny, "slack": rows, "plan_bytes": pb}, indent=1))


if __name__ == "__main__":
    main()
