"""``graphdist data info SPEC [--json] [--skip-bad-lines] [--cache-dir DIR]``: what a dataset spec
loads to (graph, click log or ratings). It writes nothing, except the binary cache a ``criteo:``
spec is read through (as ``train-dlrm`` writes and reuses it)."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from graphdist import config
from graphdist.data import DEFAULT_SBM


@dataclass
class DataInfoConfig:
    """``graphdist data info [SPEC] [--json]``."""

    spec: str = field(default=DEFAULT_SBM, metadata={"positional": True, "metavar": "SPEC"})
    """dataset spec KIND:ARGS (default: the demo's SBM graph)"""
    json: bool = False
    """print the summary as JSON"""
    skip_bad_lines: bool = False
    """criteo: specs only: skip (and count) malformed lines instead of stopping at the first one,
    as train-dlrm --skip-bad-lines"""
    cache_dir: str | None = field(default=None, metadata={"metavar": "DIR"})
    """criteo: specs only: where the binary cache the file is read through goes, as train-dlrm
    --cache-dir (default: $XDG_CACHE_HOME/graphdist/criteo, else ~/.cache/graphdist/criteo)"""


def dataset_info(spec: str, skip_bad_lines: bool = False,
                 cache_dir: str | None = None) -> tuple[dict, list[tuple[str, str]]]:
    """``(summary dict, printable rows)`` of any dataset spec, by its domain;
    ``skip_bad_lines`` (``criteo:`` and ``clicks:`` only) skips and counts malformed lines,
    ``cache_dir`` (those only) is where their binary cache goes."""
    from graphdist.errors import ConfigError
    from graphdist.timer import Timer
    from graphdist.specs import parse_spec
    kind = parse_spec(spec).kind
    for flag, given in (("--skip-bad-lines", skip_bad_lines), ("--cache-dir", cache_dir)):
        if given and kind.name not in ("criteo", "clicks"):
            raise ConfigError(f"{flag} applies to criteo: and clicks: specs only, not {kind.name}:")
    with Timer() as t:
        if kind.domain == "graph":
            from graphdist.data import load_graph
            s = load_graph(spec).summary()
        elif kind.domain == "ratings":
            from graphdist.rec.data import load_ratings
            s = load_ratings(spec).summary()
        else:
            from embeddings.data import load_click_data
            s = {"name": spec, **load_click_data(spec, skip_bad_lines=skip_bad_lines, cache_dir=cache_dir).summary()}
    s["load_s"] = round(t.seconds, 3)
    if kind.domain == "graph":
        rows = [
            ("dataset", s["name"]),
            ("nodes", f"{s['nodes']:,}"),
            ("edges (directed)", f"{s['edges']:,}"),
            ("in-degree min/mean/max", f"{s['degree_min']} / {s['degree_mean']:.2f} / {s['degree_max']}"),
            ("self-loops", f"{s['self_loops']:,}"),
            ("features", f"{s['features']}"),
            ("classes", f"{s['classes']}" + _names(s["class_names"])),
            ("split train/val/test", " / ".join("-" if s[k] is None else f"{s[k]:,}" for k in ("train", "val", "test"))),
            ("node ids", s["node_ids_range"]),
            ("fingerprint", s["fingerprint"]),
        ]
    elif kind.domain == "ratings":
        rows = [
            ("dataset", s["name"]),
            ("users", f"{s['users']:,}"),
            ("items", f"{s['items']:,}"),
            ("interactions", f"{s['interactions']:,}"),
            ("density", f"{s['density']:.4%}"),
            ("split train/test", f"{s['train']:,} / {s['test']:,} ({s['test_users']:,} test users)"),
            ("graph nodes/edges", f"{s['nodes']:,} / {s['edges']:,} (users then items, both directions)"),
            ("user ids", s["user_ids_range"]),
            ("item ids", s["item_ids_range"]),
            ("fingerprint", s["fingerprint"]),
        ]
    else:
        rows = [("dataset", s["name"]), ("rows", f"{s['rows']:,}"), ("click rate", f"{s['click_rate']:.3f}"),
                ("dense features", str(s["dense_features"])), ("sparse features", str(s["sparse_features"])),
                ("table rows min/max", f"{min(s['table_rows']):,} / {max(s['table_rows']):,}"),
                ("ids per sample", f"{s['ids_per_sample']:.2f}")]
        if s.get("columns"):
            dense, ids = s["columns"]["dense"], s["columns"]["sparse"]
            rows[3:5] = [("dense features", f"{len(dense)}: {', '.join(dense)}"),
                         ("sparse features", f"{len(ids)}: {', '.join(ids)}")]
        if kind.name in ("criteo", "clicks"):
            rows.append(("bad lines skipped", f"{s['bad_lines']:,}"))
    rows.append(("load time", f"{s['load_s']:.2f} s"))
    return s, rows


def _info(args) -> int:
    cfg = config.from_namespace(DataInfoConfig, args)
    s, rows = dataset_info(cfg.spec, cfg.skip_bad_lines, cfg.cache_dir)
    if cfg.json:
        json.dump(s, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("data", help="inspect datasets")
    dsub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND", parser_class=type(p))
    dsub.required = True
    import argparse

    from graphdist.specs import kinds_help
    info = dsub.add_parser("info", help="load a dataset spec and print its size, degrees, splits, fingerprint",
                           description="Load a dataset spec (a graph, a click log or a rating log) and print its "
                                       "size, degrees, splits and fingerprint. Nothing is written, except the "
                                       "binary cache a criteo: spec is read through (in the cache home, or "
                                       "--cache-dir; train-dlrm reuses it).",
                           epilog=kinds_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    config.add_arguments(info, DataInfoConfig)
    info.set_defaults(func=_info)


def _names(names) -> str:
    """`` named 'a', 'b', ..., 'z'`` (at most four, then the last) where the labels are names."""
    if not names:
        return ""
    cut = [n if len(n) <= 24 else n[:21] + "..." for n in names]
    shown = [repr(n) for n in cut] if len(cut) <= 5 else [*map(repr, cut[:4]), "...", repr(cut[-1])]
    return " named " + ", ".join(shown)
