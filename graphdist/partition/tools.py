"""Library side of ``graphdist partition``, ``quality`` and ``compare``: typed configs and the
functions the CLI calls (the CLI only prints).

    partition_to_artifact(PartitionConfig(spec=..., parts=4, out="runs/p4"))   -> summary dict
    artifact_quality(QualityConfig(dir="runs/p4"))                             -> meta + quality
    run_compare(CompareConfig(spec=..., parts=[4, 16], methods="metis,auto"))  -> report dict
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from graphdist.config import check_choices
from graphdist.errors import ConfigError
from graphdist.fmt import text_table
from graphdist.partition.assignment import check_parts, check_readable, read_assignment
from graphdist.launch import Nodes
from partitioners import BALANCES, METHODS

__all__ = ["PartitionConfig", "QualityConfig", "CompareConfig", "partition_to_artifact",
           "artifact_quality", "run_compare", "compare_table", "plot_compare"]


@dataclass
class PartitionConfig:
    """``graphdist partition SPEC --parts K --out DIR`` (or ``--assignment FILE``)."""

    spec: str = field(default="", metadata={"positional": True, "metavar": "SPEC"})
    """dataset spec KIND:ARGS (e.g. rmat:scale=14,edge_factor=8)"""
    parts: int | None = None
    """number of parts K (required unless --assignment is given; then default max id + 1)"""
    method: Literal[METHODS] = "auto"
    """partitioning method"""
    imbalance: float = 0.03
    """allowed max/mean - 1 per balanced quantity"""
    seed: int = 0
    """random seed (same seed, same assignment)"""
    balance: Literal[BALANCES] | None = None
    """what to balance (default: both for auto, nodes otherwise)"""
    hosts: int = 1
    """host-aware partition for a job on H hosts (ranks host-major, as torchrun numbers them): split
    into H host groups first, then each group into K/H parts so that the rows crossing hosts reach
    as few of the other hosts' ranks as possible"""
    out: str = field(default="", metadata={"required": True, "metavar": "DIR"})
    """artifact directory to write (atomically)"""
    assignment: str | None = field(default=None, metadata={"metavar": "FILE"})
    """build the artifact from this partition instead of partitioning: .npy or text, one part
    id per node in the loader's node order (e.g. from dKaMinPar or ParMETIS run elsewhere)"""
    nproc: int | None = None
    """build the artifact of an edgelist: SPEC with N local workers together (needs --assignment;
    world size = k): each reads a shard of the file and writes its own part, none holds the graph
    whole (the artifact is the one one process writes); ignored under torchrun"""
    nodes: Nodes = field(default_factory=Nodes)
    """multi-node builds (--out on a file system every node mounts)"""


@dataclass
class QualityConfig:
    """``graphdist quality DIR``."""

    dir: str = field(default="", metadata={"positional": True, "metavar": "DIR"})
    """artifact directory written by `graphdist partition`"""
    json: bool = False
    """print the quality keys as JSON"""
    feature_dim: int | None = None
    """feature width F for bytes_per_layer"""


@dataclass
class CompareConfig:
    """``graphdist compare SPEC --parts 4,16 --methods auto,metis,ldg``."""

    spec: str = field(default="", metadata={"positional": True, "metavar": "SPEC"})
    """dataset spec KIND:ARGS"""
    parts: list[int] = field(default_factory=list, metadata={"required": True})
    """part counts, comma separated (e.g. 4,16)"""
    methods: str = "random,ldg,fennel,metis,auto"
    """methods, comma separated"""
    imbalance: float = 0.03
    """allowed max/mean - 1"""
    seed: int = 0
    """random seed"""
    feature_dim: int | None = None
    """add bytes_per_layer at this feature width"""
    json: str | None = field(default=None, metadata={"metavar": "FILE"})
    """write all results as JSON"""
    plot: str | None = field(default=None, metadata={"metavar": "FILE.png"})
    """write a bar chart PNG"""
    progress: bool = True
    """progress bar on stderr"""


def _methods(text: str) -> list[str]:
    ms = [m.strip() for m in str(text).split(",") if m.strip()]
    for m in ms:
        if m not in METHODS:
            raise ConfigError(f"unknown partition method '{m}' (choose from {', '.join(METHODS)})")
    if not ms:
        raise ConfigError("--methods is empty")
    return ms


def check_request(cfg: PartitionConfig) -> None:
    """What ``graphdist partition`` checks before it loads anything: the choices, ``--out``,
    ``--parts`` or a readable ``--assignment``."""
    check_choices(cfg)
    _check_artifact_out(cfg.out)
    if cfg.assignment is None and cfg.parts is None:
        raise ConfigError("--parts K is required (or give --assignment FILE)")
    if cfg.assignment is not None:
        check_readable(cfg.assignment)
    if cfg.hosts < 1:
        raise ConfigError(f"--hosts must be >= 1, got {cfg.hosts}")
    if cfg.hosts > 1 and cfg.assignment is not None:
        raise ConfigError("--hosts partitions the graph; it cannot be combined with --assignment FILE")
    if cfg.hosts > 1 and cfg.parts % cfg.hosts:
        raise ConfigError(f"--parts {cfg.parts} is not a multiple of --hosts {cfg.hosts} "
                          f"(each host runs K/H ranks)")


def partition_to_artifact(cfg: PartitionConfig) -> dict:
    """Load, partition (or read ``cfg.assignment``), measure and write the artifact; returns
    ``{graph, quality, seconds, out, k, method, assignment}``. Before partitioning, the memory the
    run needs is checked against what is available (:mod:`graphdist.partition.budget`)."""
    from graphdist.data import load_graph
    from graphdist.partition.artifact import write_artifact
    from graphdist.partition.budget import check_fits
    from partitioners import partition, quality
    check_request(cfg)
    g = load_graph(cfg.spec)
    if cfg.assignment is not None:
        a, k = read_assignment(cfg.assignment, g.num_nodes, cfg.parts)
        method, seconds = "given", 0.0
        check_fits(g, method, k)
    else:
        k, method = int(cfg.parts), cfg.method
        check_parts(k, g.num_nodes)
        check_fits(g, method, k)
        with features_on_disk(g, Path(cfg.out).parent):
            t0 = time.perf_counter()
            a = partition(g, k, method=method, imbalance=cfg.imbalance, seed=cfg.seed, balance=cfg.balance,
                          hosts=cfg.hosts)
            seconds = time.perf_counter() - t0
    q = quality(g, a, k=k)
    params = {"k": k, "imbalance": cfg.imbalance, "seed": cfg.seed,
              "balance": cfg.balance or ("both" if method == "auto" else "nodes"), "spec": cfg.spec,
              "hosts": cfg.hosts}
    if cfg.assignment is not None:
        params = {"k": k, "spec": cfg.spec, "assignment": str(cfg.assignment)}
    out = write_artifact(cfg.out, g, a, method=method, params=params, quality=q, seconds=seconds, k=k)
    return {"graph": g, "quality": q, "seconds": seconds, "out": out, "k": k, "method": method, "assignment": a}


@contextmanager
def features_on_disk(g, near: Path):
    """While a partitioner runs, ``g.x`` (when above :data:`graphdist.partition.budget.SPILL_BYTES`) waits in a temporary
    file beside ``near`` and ``g`` holds a copy-on-write mapping of it: the partitioner's working
    set, the peak of ``graphdist partition``, no longer sits on top of the features (0.9 GiB of a
    products-sized graph). The mapping stays for what follows (quality, the part files), which
    reads the pages back as it needs them; the file is unlinked at once (the mapping keeps it)."""
    import tempfile

    import numpy as np
    import torch

    from graphdist.partition import budget
    x = g.x
    if x is None or x.numel() * x.element_size() <= budget.SPILL_BYTES or x.device.type != "cpu":
        yield
        return
    mapped = None
    try:  # an optimisation only: a full disk leaves the features in memory
        fd, name = tempfile.mkstemp(prefix=".graphdist-features-", suffix=".npy", dir=near)
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, x.numpy(), allow_pickle=False)
            mapped = np.load(name, mmap_mode="c", allow_pickle=False)
        finally:
            os.unlink(name)
    except OSError:
        pass
    if mapped is not None:
        del x
        g.x = torch.from_numpy(mapped)
    yield


def _check_artifact_out(out: str) -> None:
    """Refuse, before any work, an ``--out`` that cannot become an artifact directory."""
    from graphdist.fileio import check_output_dir
    from graphdist.partition.artifact import META
    p = Path(out)
    check_output_dir(p.parent if str(p.parent) else ".", "--out", shown=out)
    if p.exists() and (not p.is_dir() or (any(p.iterdir()) and not (p / META).exists())):
        raise ConfigError(f"--out {out}: exists and is not a partition artifact (no {META}); "
                          "choose another --out or remove it")


def artifact_quality(cfg: QualityConfig) -> dict:
    """``{meta, quality}`` of an artifact (``bytes_per_layer`` added with ``feature_dim``). The
    figures are the ones measured at partition time; the assignment and every part file are
    checked against the hashes recorded then, so they describe the files on disk."""
    from graphdist.partition.artifact import check_hash, read_artifact
    art = read_artifact(cfg.dir)
    for name in (art.meta.get("parts") or {}).get("files", []):
        check_hash(art.meta, cfg.dir, name)
    q = dict(art.meta.get("quality", {}))
    if cfg.feature_dim is not None:
        if cfg.feature_dim < 1:
            raise ConfigError(f"--feature-dim must be >= 1, got {cfg.feature_dim}")
        q["bytes_per_layer"] = int(q.get("comm_volume", 0)) * cfg.feature_dim * 4
    return {"meta": art.meta, "quality": q}


def run_compare(cfg: CompareConfig) -> dict:
    """Every method at every k on one graph: ``{graph, nodes, edges, ..., results: [...]}``;
    writes ``cfg.json`` / ``cfg.plot`` when set."""
    from tqdm import tqdm

    from graphdist.data import load_graph
    from partitioners import MissingBackendError, partition, quality
    ks = list(cfg.parts)
    if not ks:
        raise ConfigError("--parts is empty")
    from graphdist.fileio import check_output_file
    for path, flag in ((cfg.json, "--json"), (cfg.plot, "--plot")):
        if path:
            check_output_file(path, flag)
    methods = _methods(cfg.methods)
    g = load_graph(cfg.spec)
    for k in ks:
        check_parts(k, g.num_nodes)
    results = []
    jobs = [(k, m) for k in ks for m in methods]
    bar = tqdm(jobs, desc="compare", unit="run", file=sys.stderr, disable=not cfg.progress or None)
    for k, m in bar:
        bar.set_postfix_str(f"k={k} {m}")
        t0 = time.perf_counter()
        try:
            a = partition(g, k, method=m, imbalance=cfg.imbalance, seed=cfg.seed)
        except MissingBackendError as e:
            results.append({"k": k, "method": m, "error": str(e)})
            continue
        sec = time.perf_counter() - t0
        results.append({"k": k, "method": m, "time_s": sec, **quality(g, a, cfg.feature_dim, k=k)})
    bar.close()
    report = {"graph": cfg.spec, "nodes": g.num_nodes, "edges": g.num_edges,
              "fingerprint": g.fingerprint, "imbalance": cfg.imbalance, "seed": cfg.seed,
              "results": results}
    if cfg.json:
        from graphdist.fileio import atomic_write_json
        atomic_write_json(cfg.json, report)
    if cfg.plot:
        plot_compare(report, cfg.plot)
    return report


def compare_table(results: list[dict]) -> str:
    """Side-by-side table of :func:`run_compare` results (one row per k and method)."""
    header = ["k", "method", "halo volume", "vs best", "max recv", "moved rows", "moved max", "edge cut",
              "node imb", "edge imb", "time s"]
    best = {}
    for r in results:
        if "error" not in r:
            best[r["k"]] = min(best.get(r["k"], r["comm_volume"]), r["comm_volume"])
    rows = []
    for r in results:
        if "error" in r:
            rows.append([str(r["k"]), r["method"], "not installed"] + [""] * 8)
            continue
        rows.append([str(r["k"]), r["method"], f"{r['comm_volume']:,}",
                     f"{r['comm_volume'] / max(best[r['k']], 1):.2f}x", f"{r['max_recv']:,}",
                     f"{r['moved_rows']:,}", f"{r['moved_max_recv']:,}",
                     f"{r['edge_cut']:,}", f"{r['node_imbalance']:.1%}", f"{r['edge_imbalance']:.1%}",
                     f"{r['time_s']:.2f}"])
    return text_table(header, rows)


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
        panels = [(row[0], [rk[m]["comm_volume"] for m in ms], "halo rows/layer: plain (bar), mvc (black)",
                   False),
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
        moved = [rk[m].get("moved_rows", 0) for m in ms]
        row[0].bar(x, moved, width=0.35, color="black", alpha=0.75)
        for i, (v, mv) in enumerate(zip(vols, moved)):
            row[0].annotate(f"{v:,}\n{mv:,}", (i, v), ha="center", va="bottom", fontsize=6)
        row[1].axhline(100 * lim, color="red", linestyle="--", linewidth=1)
        row[1].set_yscale("symlog", linthresh=10)
    fig.suptitle(f"{report['graph']}  ({report['nodes']:,} nodes, {report['edges']:,} edges)  "
                 f"hatched = over the {lim:.0%} imbalance limit", fontsize=11)
    fig.tight_layout()
    from graphdist.fileio import atomic_savefig
    atomic_savefig(fig, path)
