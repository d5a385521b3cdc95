"""``--sparse-groups auto`` against every layout it chooses from, on test-bed hosts (issue 49).

    python benchmarks/dlrm_auto.py [--topologies 2x2,4x1] [--gbps 1,0.1] [--data criteo-synth:]
        [--configs auto,1,2:hosts,2:torchrec,4] [--steps 60] [--batch-size 256] [--repeats 1]
        [--args "--embedding-dim 64 --memory-budget-gb 4.5"] [--json FILE] [--work DIR]

For every topology (``HxL``: H test-bed hosts of L ranks; ranks host-major) and link rate (each
host's link capped at that many Gbit/s, both directions; 0: uncapped), every configuration runs
``graphdist train-dlrm DATA --steps N --batch-size B --nnodes H --nproc L`` once per repeat,
configurations alternated (auto first, then 1D, then each 2D layout). A configuration is
``auto`` (``--sparse-groups auto``), ``1`` (1D, ``--sharding`` as given: the planner's) or
``G:LAYOUT`` (``--sparse-groups G --sparse-layout LAYOUT``; at G = W one layout, ``G``).

Per run: samples/s (the report's ``throughput/samples_per_s``), the median step
(``time/step_s``), bytes between hosts per step (the hosts' interface tx counters over the whole
run, start-up and evaluation included, divided by the steps; the auto run's also hold its
start-up probe), peak memory per rank, AUC after the same samples, the layout auto chose and,
for every layout, auto's estimate of its step (from the auto run of the same repeat) against
the measured median step. A run that the memory check refuses is recorded with its line.
Every worker runs with OMP_NUM_THREADS=1.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import harness  # noqa: E402

from graphdist.testbed import Testbed  # noqa: E402

GD = [sys.executable, "-m", "graphdist"]


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--topologies", default="2x2,4x1")
    ap.add_argument("--gbps", default="1,0.1")
    ap.add_argument("--data", default="criteo-synth:")
    ap.add_argument("--configs", default="auto,1,2:hosts,2:torchrec,4")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--args", default="", help="more train-dlrm flags, one string")
    ap.add_argument("--work", default="runs/dlrm_auto")
    return ap


def env() -> dict:
    e = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.setdefault("OMP_NUM_THREADS", "1")
    return e


def flags(config: str) -> list[str]:
    if config == "auto":
        return ["--sparse-groups", "auto"]
    g, _, kind = config.partition(":")
    return ["--sparse-groups", g] + (["--sparse-layout", kind] if kind else [])


def run(tb: Testbed, a, hosts: int, nproc: int, config: str, out: Path) -> dict:
    cmd = GD + ["train-dlrm", a.data, "--steps", str(a.steps), "--batch-size", str(a.batch_size),
                "--nnodes", str(hosts), "--nproc", str(nproc), "--rdzv-endpoint", "h0:29500", "--no-progress",
                *flags(config), *shlex.split(a.args)]
    before = [tb.link_bytes(i) for i in range(hosts)]
    t0 = time.perf_counter()
    res = tb.run_all([cmd + ["--report", str(out) + ("" if i == 0 else f".{i}")] for i in range(hosts)],
                     timeout=3600, env=env())
    wall = time.perf_counter() - t0
    row = {"config": config, "wall_s": wall, "load": os.getloadavg()[0]}
    if any(rc != 0 for rc, _ in res):
        text = next(t for rc, t in res if rc != 0)
        refused = [ln for ln in text.splitlines() if "graphdist: error:" in ln]
        if not refused:
            raise SystemExit(f"{config} failed:\n{text[-3000:]}")
        return {**row, "refused": refused[-1].split("graphdist: error:", 1)[1].strip()}
    after = [tb.link_bytes(i) for i in range(hosts)]
    r = json.loads(out.read_text())
    tx = sum(x[1] - y[1] for x, y in zip(after, before))
    auto = r.get("sparse_auto") or {}
    return {**row, "sparse_groups": r["sparse_groups"], "sparse_layout": r.get("sparse_layout"),
            "samples_per_s": r["throughput/samples_per_s"], "step_s": r["time/step_s"],
            "sync_s_per_step": r.get("time/replica_sync_s_per_step"), "sync_every": r["config"].get("sync_every"),
            "between_hosts_bytes_per_step": tx / a.steps, "auc": r["auc"],
            "peak_bytes_per_rank": r["mem/peak_bytes_per_rank"],
            "replica_sync_bytes_per_step": r.get("comm/replica_sync_bytes_per_step"),
            "candidates": auto.get("candidates"), "links": auto.get("links")}


def key(row: dict) -> tuple[int, str]:
    return row["sparse_groups"], row["sparse_layout"] if row["sparse_groups"] > 1 else "hosts"


def summarise(rows: list[dict]) -> None:
    """Fill each row's auto estimate (from the auto run of its repeat) and the cell's verdicts."""
    for r in rows:
        if "refused" in r:
            continue
        auto = next((x for x in rows if x["config"] == "auto" and x["repeat"] == r["repeat"]
                     and x["cell"] == r["cell"] and x.get("candidates")), None)
        if auto is None:
            continue
        for c in auto["candidates"]:
            if (c["sparse_groups"], c["sparse_layout"]) == key(r):
                r["estimate_step_s"] = c["estimate"]["step_s"]
                r["estimate_between_hosts_bytes_per_step"] = c["estimate"]["between_hosts_bytes_per_step"]
                r["estimate_over_measured"] = c["estimate"]["step_s"] / r["step_s"]
    for cell in sorted({r["cell"] for r in rows}):
        for rep in sorted({r["repeat"] for r in rows}):
            mine = [r for r in rows if r["cell"] == cell and r["repeat"] == rep and "refused" not in r]
            fixed = [r for r in mine if r["config"] != "auto"]
            auto = [r for r in mine if r["config"] == "auto"]
            if fixed and auto:
                best = max(fixed, key=lambda r: r["samples_per_s"])
                auto[0]["best_fixed"] = best["config"]
                auto[0]["auto_over_best"] = auto[0]["samples_per_s"] / best["samples_per_s"]


def main() -> int:
    a = build_parser().parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    rows, t0 = [], time.time()
    print(f"load: {os.getloadavg()}", flush=True)
    for topo in a.topologies.split(","):
        hosts, nproc = (int(x) for x in topo.split("x"))
        for gbps in (float(x) for x in a.gbps.split(",")):
            cell = f"{topo} {gbps:g} Gbit/s"
            with Testbed(hosts, gbps=gbps or None) as tb:
                for rep in range(a.repeats):
                    for c in a.configs.split(","):
                        name = f"{topo}_{gbps:g}_{c.replace(':', '')}_{rep}.json"
                        row = {"cell": cell, "repeat": rep, **run(tb, a, hosts, nproc, c, work / name)}
                        rows.append(row)
                        print(json.dumps({k: v for k, v in row.items() if k not in ("candidates",)}), flush=True)
                        if a.json:
                            Path(a.json).write_text(json.dumps(rows, indent=1))
    summarise(rows)
    print(f"done in {time.time() - t0:.0f} s; load {os.getloadavg()}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print("\n| cell | config | layout | samples/s | step ms | est. ms | est./meas. | MB between hosts/step "
          "(est.) | peak MiB/rank | AUC | load |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "refused" in r:
            print(f"| {r['cell']} | {r['config']} | refused: {r['refused']} | | | | | | | | |")
            continue
        lay = "1D" if r["sparse_groups"] == 1 else f"G={r['sparse_groups']} {r['sparse_layout']}"
        est = r.get("estimate_step_s")
        print(f"| {r['cell']} | {r['config']} | {lay} | {r['samples_per_s']:,.0f} | {r['step_s'] * 1e3:.0f} | "
              f"{est * 1e3 if est else float('nan'):.0f} | {r.get('estimate_over_measured', float('nan')):.2f} | "
              f"{r['between_hosts_bytes_per_step'] / 1e6:.2f} ({r.get('estimate_between_hosts_bytes_per_step', 0) / 1e6:.2f}) | "
              f"{max(r['peak_bytes_per_rank']) / 2**20:,.0f} | {r['auc']:.4f} | {r['load']:.1f} |")
    for r in rows:
        if "auto_over_best" in r:
            print(f"{r['cell']} repeat {r['repeat']}: auto chose G={r['sparse_groups']} {r['sparse_layout']}, "
                  f"{r['auto_over_best']:.2f}x the best fixed ({r['best_fixed']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
