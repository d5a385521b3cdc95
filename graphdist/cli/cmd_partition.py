"""Partitioning commands (flags generated from the configs in :mod:`graphdist.partition.tools`).

    graphdist partition SPEC --parts K [--method M] [--imbalance 0.03] [--seed S]
                             [--balance nodes|edges|both] [--hosts H] --out DIR
    graphdist partition SPEC --assignment FILE [--parts K] --out DIR
    graphdist partition edgelist:FILE --assignment FILE --nproc K --out DIR   (K workers, none holds the graph)
    graphdist partition ratings:FILE|lightgcn:DIR|rec-synth:... --parts K --out DIR   (train-rec --partition DIR)
    graphdist quality DIR [--json] [--feature-dim F]
    graphdist compare SPEC --parts 4,16 --methods auto,metis,ldg [--json FILE] [--plot FILE.png]
"""
from __future__ import annotations

import json
import os
import sys

from graphdist import config
from graphdist.errors import ConfigError
from graphdist.fmt import fmt_bytes, text_table
from graphdist.partition.tools import CompareConfig, PartitionConfig, QualityConfig

_LABELS = [  # (key, header, format)
    ("comm_volume", "halo volume", "{:,}"),
    ("max_recv", "max recv", "{:,}"),
    ("max_send", "max send", "{:,}"),
    ("moved_rows", "moved rows", "{:,}"),
    ("moved_max_recv", "moved max", "{:,}"),
    ("edge_cut", "edge cut", "{:,}"),
    ("edge_cut_fraction", "cut frac", "{:.3f}"),
    ("node_imbalance", "node imb", "{:.1%}"),
    ("edge_imbalance", "edge imb", "{:.1%}"),
    ("replication_factor", "repl", "{:.3f}"),
]


def _print_quality(q: dict, extra: list[tuple[str, str]] = ()) -> None:
    rows = list(extra)
    for key, label, fmt in _LABELS:
        if key in q:
            rows.append((label, fmt.format(q[key])))
    if "bytes_per_layer" in q:
        rows.append(("bytes/layer", f"{fmt_bytes(q['bytes_per_layer'])} ({q['bytes_per_layer']:,})"))
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{w}}  {v}")


def _partition(args) -> int:
    from graphdist.partition.tools import partition_to_artifact
    from graphdist.launch import under_launcher
    from graphdist.rec.artifact import is_ratings_spec, partition_ratings
    cfg = config.from_namespace(PartitionConfig, args)
    if cfg.nproc is not None or cfg.nodes.max_nodes > 1 or (under_launcher() and int(os.environ["WORLD_SIZE"]) > 1):
        return _build(cfg)
    # interaction data: the user-item graph, with each part's interactions beside its part file
    r = partition_ratings(cfg) if is_ratings_spec(cfg.spec) else partition_to_artifact(cfg)
    g = r["graph"]
    how = (f"given by {cfg.assignment} (k={r['k']})" if cfg.assignment
           else f"{cfg.method} (k={r['k']}, imbalance<={cfg.imbalance:.0%}"
                + (f", {cfg.hosts} host groups of {r['k'] // cfg.hosts})" if cfg.hosts > 1 else ")"))
    head = [("graph", f"{cfg.spec} ({g.num_nodes:,} nodes, {g.num_edges:,} edges)"),
            ("method", how), ("time", f"{r['seconds']:.2f} s"), ("artifact", str(r["out"]))]
    if cfg.hosts > 1 and "assignment" in r:
        from partitioners.hostsplit import rows_between_hosts
        moved, plain = rows_between_hosts(g, r["assignment"], r["k"], cfg.hosts)
        head.append(("between hosts", f"{moved:,} rows moved (mvc), {plain:,} plain, per layer"))
    _print_quality(r["quality"], head)
    return 0


def _build(cfg) -> int:
    """``--nproc K``: K workers build the artifact of a given partition together."""
    from graphdist.partition.build import build_worker, check_build_request
    from graphdist.partition.tools import check_request
    from graphdist.launch import run_job
    from graphdist.runtime import env_world
    check_build_request(cfg)  # first: its --assignment hint is the one a --nproc user needs
    check_request(cfg)
    cfg.nodes.validate()
    nproc = cfg.nproc if cfg.nproc is not None else 1
    if nproc < 1:
        raise ConfigError(f"--nproc must be >= 1, got {nproc}")
    r = run_job(build_worker, cfg, nproc, cfg.nodes)
    if r is None or env_world()[0] != 0:  # another node of the job, or a rank under torchrun
        return 0
    _print_quality(r["quality"], [("graph", f"{cfg.spec} ({r['nodes']:,} nodes, {r['edges']:,} edges)"),
                                  ("method", f"given by {cfg.assignment} (k={r['k']})"),
                                  ("build", f"{r['build_s']:.2f} s on {r['k']} workers, peak RSS "
                                            f"{max(r['mem/peak_rss_bytes_per_rank']) / 2**30:.2f} GiB per worker (max)"),
                                  ("artifact", str(r["out"]))])
    return 0


def _quality(args) -> int:
    from graphdist.partition.tools import artifact_quality
    cfg = config.from_namespace(QualityConfig, args)
    r = artifact_quality(cfg)
    meta, q = r["meta"], r["quality"]
    if cfg.json:
        json.dump(q, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    params = meta.get("params", {})
    _print_quality(q, [("artifact", str(cfg.dir)),
                       ("graph", f"{params.get('spec', meta.get('graph', ''))} ({meta['num_nodes']:,} nodes, "
                                 f"fingerprint {meta['fingerprint']})"),
                       ("method", f"{meta.get('method')} (k={meta['k']})"),
                       ("time", f"{meta.get('time', {}).get('partition_s', float('nan')):.2f} s")])
    parts = meta.get("parts") or {}
    if parts.get("owned_nodes") and parts.get("halo_rows"):
        n = len(parts["owned_nodes"])
        edges = parts.get("local_edges") or [None] * n
        moved = parts.get("moved_rows") or [None] * n
        fmt = lambda v: f"{v:,}" if v is not None else "-"  # noqa: E731
        rows = [[str(r), fmt(o), fmt(h), fmt(m), fmt(e)]
                for r, (o, h, m, e) in enumerate(zip(parts["owned_nodes"], parts["halo_rows"], moved, edges))]
        print()
        print(text_table(["part", "owned nodes", "halo rows", "moved rows", "local edges"], rows))
    return 0


def _compare(args) -> int:
    from graphdist.partition.tools import compare_table, run_compare
    cfg = config.from_namespace(CompareConfig, args)
    report = run_compare(cfg)
    print(f"{cfg.spec}: {report['nodes']:,} nodes, {report['edges']:,} directed edges; "
          f"imbalance limit {cfg.imbalance:.0%}")
    print(compare_table(report["results"]))
    for path in (cfg.json, cfg.plot):
        if path:
            print(f"wrote {path}")
    return 0


_DESCRIPTIONS = {
    "partition": "Partition a graph into K parts and write an artifact directory (meta.json, assignment.npy, one "
                 "part file per rank with its halo plans; for an interaction spec also each part's interactions) that "
                 "`graphdist train-gcn --partition DIR` (or `train-rec --partition DIR`) trains from; "
                 "each rank then reads only its own part.",
    "quality": "Print the quality of a partition artifact, as measured when it was written: halo volume, rows "
               "moved with pre/post aggregation, edge cut, node and edge balance, and per part its nodes, halo "
               "rows and edges. The files are checked against the hashes in meta.json first.",
    "compare": "Run several partitioners at several K on one graph and print their quality side by side "
               "(optionally as JSON and a PNG chart); nothing is written unless --json or --plot is given.",
}


def register(sub) -> None:
    import argparse
    import textwrap

    from graphdist.specs import kinds_help
    for name, cls, fn, help_ in (
            ("partition", PartitionConfig, _partition, "partition a graph into K parts and write an artifact directory"),
            ("quality", QualityConfig, _quality, "print the quality of a partition artifact"),
            ("compare", CompareConfig, _compare, "run several partitioners and compare them side by side")):
        p = sub.add_parser(name, help=help_, description=textwrap.fill(_DESCRIPTIONS[name], 79),
                           epilog=kinds_help("graph") if name != "quality" else None,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        config.add_arguments(p, cls, skip=("max_restarts",))  # a partition has no checkpoint to continue from
        p.set_defaults(func=fn)
