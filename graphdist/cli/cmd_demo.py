"""``graphdist demo [--out DIR]``: the README quick start.

Both workloads, end to end on this machine: a 2-worker GCN on the default SBM graph
(:func:`graphdist.gnn.demo.run_gcn_demo`), then a 2-rank DLRM on ``criteo-synth`` with sharded
embedding tables (:func:`embeddings.demo.run_dlrm_demo`), then a two-line summary.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from graphdist import config


@dataclass
class DemoConfig:
    """``graphdist demo``."""

    out: str = "runs/demo"
    """where the reports go"""
    nproc: int = 2
    """workers (= GCN parts) per workload"""
    only: Literal["gcn", "dlrm"] | None = None
    """run one workload only"""
    progress: bool = True
    """progress bar"""


def _handler(args) -> int:
    from graphdist.fileio import check_output_dir
    cfg = config.from_namespace(DemoConfig, args)
    check_output_dir(cfg.out, "--out")
    out = Path(cfg.out)
    results = {}
    if cfg.only in (None, "gcn"):
        from graphdist.gnn.demo import run_gcn_demo
        results["gcn"] = run_gcn_demo(out, nproc=cfg.nproc, progress=cfg.progress)
    if cfg.only in (None, "dlrm"):
        from embeddings.demo import run_dlrm_demo
        print(flush=True)
        results["dlrm"] = run_dlrm_demo(str(out), nproc=cfg.nproc)
    print("\n== demo summary ==")
    if "gcn" in results:
        g = results["gcn"]
        print(f"GCN : test accuracy {g['test_acc']:.4f}, {g['epoch_s'] * 1e3:.1f} ms/epoch, "
              f"halo {g['halo_bytes_per_epoch'] / 1e6:.2f} MB/epoch -> {g['report']}")
    if "dlrm" in results:
        d = results["dlrm"]
        print(f"DLRM: AUC {d['auc']:.4f}, log loss {d['logloss']:.4f}, "
              f"{d['throughput/samples_per_s']:,.0f} samples/s on {d['world_size']} ranks -> {d['report']}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("demo", help="end-to-end demo: 2-worker GCN on the default SBM graph, then "
                                    "2-rank DLRM with sharded embedding tables on criteo-synth",
                       description="Run the two main workloads end to end on generated data, about a minute "
                                   "on 2 CPU cores: a 2-worker distributed GCN on the default SBM graph "
                                   "(METIS, 2 parts), then a 2-rank DLRM with sharded embedding tables on "
                                   "criteo-synth; prints a short summary and writes both reports under --out.")
    config.add_arguments(p, DemoConfig)
    p.set_defaults(func=_handler)
