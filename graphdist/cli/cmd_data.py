"""``graphdist data info SPEC [--json]``: what a dataset spec loads to."""
from __future__ import annotations

import json
import sys

from graphdist.data import DEFAULT_SBM, load_graph


def _info(args) -> int:
    from graphdist.runtime import Timer
    with Timer() as t:
        g = load_graph(args.spec)
    s = g.summary()
    s["load_s"] = round(t.seconds, 3)
    if args.json:
        json.dump(s, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    rows = [
        ("dataset", s["name"]),
        ("nodes", f"{s['nodes']:,}"),
        ("edges (directed)", f"{s['edges']:,}"),
        ("in-degree min/mean/max", f"{s['degree_min']} / {s['degree_mean']:.2f} / {s['degree_max']}"),
        ("self-loops", f"{s['self_loops']:,}"),
        ("features", f"{s['features']}"),
        ("classes", f"{s['classes']}"),
        ("split train/val/test", " / ".join("-" if s[k] is None else f"{s[k]:,}" for k in ("train", "val", "test"))),
        ("fingerprint", s["fingerprint"]),
        ("load time", f"{s['load_s']:.2f} s"),
    ]
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("data", help="inspect datasets")
    dsub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND", parser_class=type(p))
    dsub.required = True
    info = dsub.add_parser("info", help="load a dataset spec and print its size, degrees, splits, fingerprint")
    info.add_argument("spec", nargs="?", default=DEFAULT_SBM,
                      help=f"dataset spec KIND:ARGS (default: {DEFAULT_SBM})")
    info.add_argument("--json", action="store_true", help="print the summary as JSON")
    info.set_defaults(func=_info)
