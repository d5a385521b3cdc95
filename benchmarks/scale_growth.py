"""How cost grows with the graph: partition time and peak memory, epoch time and per-rank peak
memory, at k = 1 and k = 4, for one generator at several sizes; a table, a log-log plot and the
fitted exponents (cost ~ size^b: b <= 1.1 is linear), plus ``graphdist plan``'s predictions
against the measured figures where ``plan`` is available.

    python benchmarks/scale_growth.py [--nodes 306128,612257,1224514,2449029] [--avg-degree 50]
        [--features 100] [--classes 47] [--layers 2] [--hidden 64] [--epochs 3] [--ks 1,4]
        [--method metis] [--threads T] [--out runs/growth] [--plot docs/img/scale_growth.png] [--json FILE]
        [--merge EARLIER.json ...]

Every measurement is a separate command run the way a user runs it (``graphdist partition``,
``graphdist train-gcn --partition DIR --nproc K``), one at a time, with the peak RSS of the whole
process tree from ``/usr/bin/time -v`` (partition) and the report's ``mem/peak_bytes_per_rank``
(training). Sizes run smallest first; a size whose run fails (out of memory) is recorded as such
and the larger ones are skipped.
"""
from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import harness

ENV = harness.checkout_env()


def spec_for(nodes: int, args) -> str:
    return (f"sbm:nodes={nodes},classes={args.classes},avg_degree={args.avg_degree},homophily=0.9,"
            f"features={args.features},seed=0")


def _timed(cmd: list[str], log: Path) -> dict:
    """Run ``cmd`` under /usr/bin/time -v (its output into ``log``); wall seconds, peak RSS bytes
    and the exit code."""
    r = harness.time_v(cmd, None, env=ENV)
    log.write_text(r.stdout + r.stderr)
    return {"rc": r.rc, "wall_s": r.wall_s, "peak_rss_bytes": r.peak_rss_kib * 1024 if r.peak_rss_kib else None}


_graphdist = harness.graphdist_cmd


def measure(nodes: int, args, out: Path) -> dict:
    spec = spec_for(nodes, args)
    row = {"nodes": nodes, "spec": spec}
    for k in args.ks:
        art = out / f"n{nodes}_k{k}"
        shutil.rmtree(art, ignore_errors=True)
        method = "block" if k == 1 else args.method
        p = _timed(_graphdist("partition", spec, "--parts", str(k), "--method", method, "--out", str(art)),
                   out / f"partition_n{nodes}_k{k}.log")
        row[f"k{k}/partition"] = p
        if p["rc"] != 0:
            row[f"k{k}/failed"] = "partition"
            continue
        meta = json.loads((art / "meta.json").read_text())
        row["edges"] = meta["num_edges"]
        rep = out / f"train_n{nodes}_k{k}.json"
        flags = ["--layers", str(args.layers), "--hidden", str(args.hidden), "--epochs", str(args.epochs)]
        t = _timed(_graphdist("train-gcn", "--partition", str(art), "--nproc", str(k), *flags, "--no-progress",
                              "--report", str(rep)), out / f"train_n{nodes}_k{k}.log")
        row[f"k{k}/train"] = t
        if t["rc"] != 0 or not rep.exists():
            row[f"k{k}/failed"] = "train"
            continue
        r = json.loads(rep.read_text())
        row[f"k{k}/epoch_s"] = r["time/epoch_s"]
        row[f"k{k}/peak_bytes_per_rank"] = r["mem/peak_bytes_per_rank"]
        row[f"k{k}/halo_bytes_per_epoch"] = r["comm/halo_bytes_per_epoch"]
        pl = subprocess.run(_graphdist("plan", "--partition", str(art), *flags[:4], "--json"), cwd=harness.REPO,
                            capture_output=True, text=True, env=ENV)
        if pl.returncode == 0:
            pred = json.loads(pl.stdout)
            row[f"k{k}/plan"] = {key: pred.get(key) for key in ("mem/peak_bytes", "mem/peak_bytes_per_rank",
                                                                "comm/halo_bytes_per_epoch", "time/epoch_s")}
        shutil.rmtree(art, ignore_errors=True)
    return row


def exponent(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log y on log x."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x and y]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx else None


def retime(rows: list[dict], ks, folder: Path) -> None:
    """Epoch times from separate timing runs (see ``--timing``): the fastest median per row and k,
    with every run's median under ``k{K}/epoch_s_runs``."""
    for r in rows:
        for k in ks:
            runs = [json.loads(f.read_text())["time/epoch_s"] for f in sorted(folder.glob(f"n{r['nodes']}_k{k}_*.json"))]
            if runs and f"k{k}/epoch_s" in r:
                r[f"k{k}/epoch_s_first"] = r[f"k{k}/epoch_s"]
                r[f"k{k}/epoch_s_runs"] = runs
                r[f"k{k}/epoch_s"] = min(runs)


def series(rows: list[dict], ks) -> dict:
    out = {}
    for k in ks:
        ok = [r for r in rows if f"k{k}/epoch_s" in r]
        x = [r["edges"] for r in ok]
        out[f"k{k}"] = {
            "edges": x,
            "partition_s": [r[f"k{k}/partition"]["wall_s"] for r in ok],
            "partition_peak_bytes": [r[f"k{k}/partition"]["peak_rss_bytes"] for r in ok],
            "epoch_s": [r[f"k{k}/epoch_s"] for r in ok],
            "peak_bytes_per_rank": [max(r[f"k{k}/peak_bytes_per_rank"]) for r in ok],
        }
        out[f"k{k}"]["exponents"] = {m: exponent(x, v) for m, v in out[f"k{k}"].items() if m != "edges"}
    return out


def table(rows: list[dict], ks) -> str:
    cells = []
    for r in rows:
        for k in ks:
            p = r.get(f"k{k}/partition", {})
            if f"k{k}/failed" in r:
                cells.append([r["nodes"], r.get("edges", 0), k, f"{p.get('wall_s', 0):.0f}",
                              f"{(p.get('peak_rss_bytes') or 0) / 2**30:.2f}", f"failed ({r[f'k{k}/failed']})",
                              None, None, None, None])
                continue
            if f"k{k}/epoch_s" not in r:
                continue
            peak = max(r[f"k{k}/peak_bytes_per_rank"])
            halo = r[f"k{k}/halo_bytes_per_epoch"]
            pl = r.get(f"k{k}/plan") or {}
            pp, ph = pl.get("mem/peak_bytes"), pl.get("comm/halo_bytes_per_epoch")
            pcell = f"{pp / 2**30:.2f} ({pp / peak - 1:+.1%})" if pp else "-"
            hcell = f"{ph / 1e6:.1f} ({ph / halo - 1:+.1%})" if ph and halo else ("0" if halo == 0 else "-")
            cells.append([r["nodes"], r["edges"], k, f"{p['wall_s']:.0f}", f"{p['peak_rss_bytes'] / 2**30:.2f}",
                          f"{r[f'k{k}/epoch_s']:.2f}", f"{peak / 2**30:.2f}", pcell, f"{halo / 1e6:.1f}", hcell])
    return harness.table(["nodes", "edges", "k", "partition s", "partition peak GiB", "epoch s", "peak GiB/rank (max)",
                          "plan peak GiB (error)", "halo MB/epoch", "plan halo MB (error)"], cells)


def plot(ser: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    metrics = [("partition_s", "partition s"), ("partition_peak_bytes", "partition peak bytes"),
               ("epoch_s", "epoch s"), ("peak_bytes_per_rank", "training peak bytes / rank")]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    for ax, (m, label) in zip(axes, metrics):
        for k, s in ser.items():
            if s["edges"]:
                b = s["exponents"][m]
                ax.loglog(s["edges"], s[m], "o-", label=f"{k} (slope {b:.2f})" if b is not None else k)
        ax.set_xlabel("directed edges")
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    from graphdist.fileio import atomic_savefig
    atomic_savefig(fig, path)  # (closes the figure)


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--nodes", default="306128,612257,1224514,2449029")
    ap.add_argument("--avg-degree", type=float, default=50.0)
    ap.add_argument("--features", type=int, default=100)
    ap.add_argument("--classes", type=int, default=47)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--ks", default="1,4")
    ap.add_argument("--method", default="metis")
    ap.add_argument("--threads", type=int, default=None,
                    help="OMP_NUM_THREADS of every process (each of k workers gets it as is); default: torch's "
                         "own choice for one process (all cores, which spins far slower on a loaded machine) "
                         "and cores // k for k workers")
    ap.add_argument("--out", type=Path, default=harness.REPO / "runs" / "growth")
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument("--timing", type=Path, default=None,
                    help="a folder of separate timing runs' train-gcn reports named n{NODES}_k{K}_*.json (e.g. "
                         "several runs of 5 epochs on the artifacts): each row's epoch time becomes the fastest "
                         "of their medians, and every run's median is kept")
    ap.add_argument("--merge", type=Path, action="append", default=[],
                    help="add the rows of an earlier run's JSON (sizes measured before, e.g. one at a time); "
                         "with --nodes '' nothing new is measured")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.ks = harness.csv(args.ks, int)
    if args.threads:
        ENV["OMP_NUM_THREADS"] = str(args.threads)  # the launcher passes a set value to every worker
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [r for f in args.merge for r in json.loads(f.read_text())["rows"]]
    for n in sorted(harness.csv(args.nodes, int)):
        print(f"== {n:,} nodes", flush=True)
        r = measure(n, args, args.out)
        rows.append(r)
        print(table([r], args.ks), flush=True)
        if any(f"k{k}/failed" in r for k in args.ks):
            print("a run failed; larger sizes skipped", flush=True)
            break
    rows.sort(key=lambda r: r["nodes"])
    if args.timing:
        retime(rows, args.ks, args.timing)
    ser = series(rows, args.ks)
    print(table(rows, args.ks))
    for k, s in ser.items():
        print(k, "exponents:", {m: (round(b, 3) if b is not None else None) for m, b in s["exponents"].items()})
    if args.plot:
        plot(ser, args.plot)
    result = {"rows": rows, "series": ser, "args": {k: str(v) for k, v in vars(args).items()}}
    path = args.json or args.out / "growth.json"
    harness.write_json(path, result)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
