"""Partitioning commands.

    graphdist partition SPEC --parts K [--method M] [--imbalance 0.03] [--seed S]
                             [--balance nodes|edges|both] --out DIR
    graphdist quality DIR [--json] [--feature-dim F]
    graphdist compare SPEC --parts 4,16 --methods auto,metis,ldg [--json FILE] [--plot FILE.png]
"""
from __future__ import annotations

import json
import sys
import time

from graphdist.errors import ConfigError

_LABELS = [  # (key, header, format)
    ("comm_volume", "halo volume", "{:,}"),
    ("max_recv", "max recv", "{:,}"),
    ("max_send", "max send", "{:,}"),
    ("edge_cut", "edge cut", "{:,}"),
    ("edge_cut_fraction", "cut frac", "{:.3f}"),
    ("node_imbalance", "node imb", "{:.1%}"),
    ("edge_imbalance", "edge imb", "{:.1%}"),
    ("replication_factor", "repl", "{:.3f}"),
]


def _ints(text: str, flag: str) -> list[int]:
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag} expects integers separated by commas, got '{text}'") from None
    if not vals:
        raise ConfigError(f"{flag} is empty")
    return vals


def _methods(text: str) -> list[str]:
    from partitioners import METHODS
    ms = [m.strip() for m in str(text).split(",") if m.strip()]
    for m in ms:
        if m not in METHODS:
            raise ConfigError(f"unknown partition method '{m}' (choose from {', '.join(METHODS)})")
    if not ms:
        raise ConfigError("--methods is empty")
    return ms


def _check_k(k: int, n: int) -> None:
    if k < 1 or k > n:
        raise ConfigError(f"--parts {k} must be between 1 and the number of nodes N={n}")


def _fmt_bytes(b: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if b < 1024 or unit == "TiB":
            return f"{b:.1f} {unit}" if unit != "B" else f"{int(b)} B"
        b /= 1024


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _print_quality(q: dict, extra: list[tuple[str, str]] = ()) -> None:
    rows = list(extra)
    for key, label, fmt in _LABELS:
        if key in q:
            rows.append((label, fmt.format(q[key])))
    if "bytes_per_layer" in q:
        rows.append(("bytes/layer", f"{_fmt_bytes(q['bytes_per_layer'])} ({q['bytes_per_layer']:,})"))
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{w}}  {v}")


# ---------------------------------------------------------------------- partition
def _partition(args) -> int:
    from graphdist.artifact import write_artifact
    from graphdist.data import load_graph
    from partitioners import partition, quality
    _methods(args.method)
    g = load_graph(args.spec)
    _check_k(args.parts, g.num_nodes)
    t0 = time.perf_counter()
    a = partition(g, args.parts, method=args.method, imbalance=args.imbalance, seed=args.seed,
                  balance=args.balance)
    seconds = time.perf_counter() - t0
    q = quality(g, a, k=args.parts)
    params = {"k": args.parts, "imbalance": args.imbalance, "seed": args.seed,
              "balance": args.balance or ("both" if args.method == "auto" else "nodes"), "spec": args.spec}
    out = write_artifact(args.out, g, a, method=args.method, params=params, quality=q,
                         seconds=seconds, k=args.parts)
    _print_quality(q, [("graph", f"{args.spec} ({g.num_nodes:,} nodes, {g.num_edges:,} edges)"),
                       ("method", f"{args.method} (k={args.parts}, imbalance<={args.imbalance:.0%})"),
                       ("time", f"{seconds:.2f} s"), ("artifact", str(out))])
    return 0


# ---------------------------------------------------------------------- quality
def _quality(args) -> int:
    from graphdist.artifact import read_artifact
    art = read_artifact(args.dir)
    meta = art.meta
    q = dict(meta.get("quality", {}))
    if args.feature_dim is not None:
        if args.feature_dim < 1:
            raise ConfigError(f"--feature-dim must be >= 1, got {args.feature_dim}")
        q["bytes_per_layer"] = int(q.get("comm_volume", 0)) * args.feature_dim * 4
    if args.json:
        json.dump(q, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    params = meta.get("params", {})
    _print_quality(q, [("artifact", str(args.dir)),
                       ("graph", f"{params.get('spec', meta.get('graph', ''))} ({meta['num_nodes']:,} nodes, "
                                 f"fingerprint {meta['fingerprint']})"),
                       ("method", f"{meta.get('method')} (k={meta['k']})"),
                       ("time", f"{meta.get('time', {}).get('partition_s', float('nan')):.2f} s")])
    parts = meta.get("parts") or {}
    if parts.get("owned_nodes") and parts.get("halo_rows"):
        rows = [[str(r), f"{o:,}", f"{h:,}", f"{e:,}" if e is not None else "-"]
                for r, (o, h, e) in enumerate(zip(parts["owned_nodes"], parts["halo_rows"],
                                                  parts.get("local_edges") or [None] * len(parts["owned_nodes"])))]
        print()
        print(_table(["part", "owned nodes", "halo rows", "local edges"], rows))
    return 0


# ---------------------------------------------------------------------- compare
def _compare(args) -> int:
    from tqdm import tqdm

    from graphdist.data import load_graph
    from partitioners import MissingBackendError, partition, quality
    ks = _ints(args.parts, "--parts")
    methods = _methods(args.methods)
    g = load_graph(args.spec)
    for k in ks:
        _check_k(k, g.num_nodes)
    results = []
    jobs = [(k, m) for k in ks for m in methods]
    bar = tqdm(jobs, desc="compare", unit="run", file=sys.stderr, disable=args.no_progress or None)
    for k, m in bar:
        bar.set_postfix_str(f"k={k} {m}")
        t0 = time.perf_counter()
        try:
            a = partition(g, k, method=m, imbalance=args.imbalance, seed=args.seed)
        except MissingBackendError as e:
            results.append({"k": k, "method": m, "error": str(e)})
            continue
        sec = time.perf_counter() - t0
        results.append({"k": k, "method": m, "time_s": sec, **quality(g, a, args.feature_dim, k=k)})
    bar.close()
    report = {"graph": args.spec, "nodes": g.num_nodes, "edges": g.num_edges,
              "fingerprint": g.fingerprint, "imbalance": args.imbalance, "seed": args.seed,
              "results": results}
    print(f"{args.spec}: {g.num_nodes:,} nodes, {g.num_edges:,} directed edges; "
          f"imbalance limit {args.imbalance:.0%}")
    print(compare_table(results))
    if args.json:
        from graphdist.fileio import atomic_write_json
        atomic_write_json(args.json, report)
        print(f"wrote {args.json}")
    if args.plot:
        plot_compare(report, args.plot)
        print(f"wrote {args.plot}")
    return 0


def compare_table(results: list[dict]) -> str:
    """Side-by-side table of :func:`_compare` results (one row per k and method)."""
    header = ["k", "method", "halo volume", "vs best", "max recv", "edge cut", "node imb", "edge imb", "time s"]
    best = {}
    for r in results:
        if "error" not in r:
            best[r["k"]] = min(best.get(r["k"], r["comm_volume"]), r["comm_volume"])
    rows = []
    for r in results:
        if "error" in r:
            rows.append([str(r["k"]), r["method"], "not installed", "", "", "", "", "", ""])
            continue
        rows.append([str(r["k"]), r["method"], f"{r['comm_volume']:,}",
                     f"{r['comm_volume'] / max(best[r['k']], 1):.2f}x", f"{r['max_recv']:,}",
                     f"{r['edge_cut']:,}", f"{r['node_imbalance']:.1%}", f"{r['edge_imbalance']:.1%}",
                     f"{r['time_s']:.2f}"])
    return _table(header, rows)




def plot_compare(report: dict, path) -> None:
    """PNG, one row per k: halo volume, worst of node/edge imbalance (limit dashed) and time.

    Bars of runs that break the imbalance limit are hatched, so the best *valid* bar is easy
    to spot."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    res = [r for r in report["results"] if "error" not in r]
    ks = sorted({r["k"] for r in res})
    methods = list(dict.fromkeys(r["method"] for r in res))
    colors = dict(zip(methods, plt.get_cmap("tab10").colors))
    lim = float(report.get("imbalance", 0.03))
    fig, axes = plt.subplots(len(ks), 3, figsize=(13, 3.2 * len(ks) + 0.8), squeeze=False)
    for row, k in zip(axes, ks):
        rk = {r["method"]: r for r in res if r["k"] == k}
        ms = [m for m in methods if m in rk]
        x = range(len(ms))
        imb = [max(rk[m]["node_imbalance"], rk[m]["edge_imbalance"]) for m in ms]
        bad = [v > lim + 1e-9 for v in imb]
        panels = [(row[0], [rk[m]["comm_volume"] for m in ms], "halo volume (rows/layer)", False),
                  (row[1], [100 * v for v in imb], "max(node, edge) imbalance %", False),
                  (row[2], [rk[m]["time_s"] for m in ms], "time s (log)", True)]
        for ax, vals, title, log in panels:
            bars = ax.bar(x, vals, color=[colors[m] for m in ms], edgecolor="black", linewidth=0.5)
            for b_, is_bad in zip(bars, bad):
                if is_bad:
                    b_.set_hatch("//")
            ax.set_xticks(list(x), ms, rotation=30, ha="right")
            ax.set_title(f"k={k}: {title}", fontsize=10)
            if log:
                ax.set_yscale("log")
            ax.grid(axis="y", alpha=0.3)
        vols = [rk[m]["comm_volume"] for m in ms]
        for i, v in enumerate(vols):
            row[0].annotate(f"{v:,}", (i, v), ha="center", va="bottom", fontsize=7)
        row[1].axhline(100 * lim, color="red", linestyle="--", linewidth=1)
        row[1].set_yscale("symlog", linthresh=10)
    fig.suptitle(f"{report['graph']}  ({report['nodes']:,} nodes, {report['edges']:,} edges)  "
                 f"hatched = over the {lim:.0%} imbalance limit", fontsize=11)
    fig.tight_layout()
    from pathlib import Path
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def register(sub) -> None:
    from partitioners import BALANCES, METHODS
    p = sub.add_parser("partition", help="partition a graph into K parts and write an artifact directory")
    p.add_argument("spec", help="dataset spec KIND:ARGS (e.g. rmat:scale=14,edge_factor=8)")
    p.add_argument("--parts", type=int, required=True, help="number of parts K")
    p.add_argument("--method", default="auto", help=f"one of {', '.join(METHODS)} (default auto)")
    p.add_argument("--imbalance", type=float, default=0.03, help="allowed max/mean - 1 per balanced quantity")
    p.add_argument("--seed", type=int, default=0, help="random seed (same seed, same assignment)")
    p.add_argument("--balance", choices=BALANCES, default=None,
                   help="what to balance (default: both for auto, nodes otherwise)")
    p.add_argument("--out", required=True, help="artifact directory to write (atomically)")
    p.set_defaults(func=_partition)

    q = sub.add_parser("quality", help="print the quality of a partition artifact")
    q.add_argument("dir", help="artifact directory written by `graphdist partition`")
    q.add_argument("--json", action="store_true", help="print the quality keys as JSON")
    q.add_argument("--feature-dim", type=int, default=None, help="feature width F for bytes_per_layer")
    q.set_defaults(func=_quality)

    c = sub.add_parser("compare", help="run several partitioners and compare them side by side")
    c.add_argument("spec", help="dataset spec KIND:ARGS")
    c.add_argument("--parts", required=True, help="part counts, comma separated (e.g. 4,16)")
    c.add_argument("--methods", default="random,ldg,fennel,metis,auto",
                   help="methods, comma separated (default random,ldg,fennel,metis,auto)")
    c.add_argument("--imbalance", type=float, default=0.03, help="allowed max/mean - 1")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--feature-dim", type=int, default=None, help="add bytes_per_layer at this width")
    c.add_argument("--json", default=None, metavar="FILE", help="write all results as JSON")
    c.add_argument("--plot", default=None, metavar="FILE.png", help="write a bar chart PNG")
    c.add_argument("--no-progress", action="store_true", help="no progress bar")
    c.set_defaults(func=_compare)
