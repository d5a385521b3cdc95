"""Where the memory of ``graphdist partition`` goes: resident memory sampled per phase.

    python benchmarks/partition_profile.py SPEC --parts 4 --method metis --out /tmp/p4

Runs exactly what ``graphdist partition`` runs (:func:`graphdist.partition.tools.partition_to_artifact`)
with a thread sampling this process' resident set (``/proc/self/statm``, every 10 ms) and the
library's main steps wrapped as named phases (generation, CSR build, symmetric CSR, the METIS /
KaMinPar call, quality, the halo cover, the plans, part writing, hashing). Prints one row per
phase call: seconds, RSS at entry, peak RSS inside, and the rise over the entry. Phases nest
(a row's peak includes its children). tracemalloc is not used: it does not see torch's
allocations. Linux only.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_PAGE = os.sysconf("SC_PAGE_SIZE")


class Sampler(threading.Thread):
    """Resident set size every ``period`` seconds; :meth:`peak` of a time window."""

    def __init__(self, period: float = 0.01):
        super().__init__(daemon=True)
        self.period, self.samples, self.stop_flag = period, [], False

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE

    def run(self):
        while not self.stop_flag:
            self.samples.append((time.perf_counter(), self.rss()))
            time.sleep(self.period)

    def peak(self, t0: float, t1: float) -> int:
        return max((r for t, r in self.samples if t0 <= t <= t1), default=0)


PHASES: list = []  # (depth, name, t0, t1, rss0)
_DEPTH = [0]

TARGETS = [  # (module, attribute, label); the attribute is replaced where it is looked up
    ("graphdist.data.synthetic", "sbm_graph", "generate sbm"),
    ("graphdist.data.synthetic", "rmat_graph", "generate rmat"),
    ("graphdist.data.graph", "csr_from_coo", "csr_from_coo"),
    ("partitioners.backends", "sym_csr", "sym_csr"),
    ("partitioners.backends", "metis_kway", "METIS call"),
    ("partitioners.backends", "_kaminpar_graph", "KaMinPar graph"),
    ("partitioners.backends", "_kaminpar_run", "KaMinPar call"),
    ("partitioners.api", "_run", "partition"),
    ("partitioners.quality", "_Cache", "quality cache"),
    ("partitioners.cover", "halo_cover", "halo_cover"),
    ("partitioners.cover", "matching_size", "matching_size"),
    ("graphdist.partition.layout", "SharedArrays", "layout shared"),
    ("graphdist.partition.layout", "build_layout", "build_layout"),
    ("graphdist.partition.layout", "validate_layouts", "validate_layouts"),
    ("graphdist.partition.parts", "build_layouts", "build_layouts"),
    ("graphdist.partition.parts", "validate_layouts", "validate_layouts"),
    ("graphdist.partition.parts", "save_part", "save part"),
    ("graphdist.partition.artifact", "file_sha256", "sha256"),
    ("graphdist.partition.artifact", "write_artifact", "write_artifact"),
    ("graphdist.partition.tools", "quality", "quality"),
    ("graphdist.partition.tools", "partition", "partition (api)"),
    ("graphdist.partition.tools", "load_graph", "load_graph"),
]


def _wrap(fn, label):
    @functools.wraps(fn)
    def inner(*a, **kw):
        rss0 = Sampler.rss()
        _DEPTH[0] += 1
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            _DEPTH[0] -= 1
            PHASES.append((_DEPTH[0], label, t0, time.perf_counter(), rss0))
    return inner


def install():
    for mod, attr, label in TARGETS:
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        if hasattr(m, attr):
            setattr(m, attr, _wrap(getattr(m, attr), label))
    # load_graph and the partitioner are imported inside partition_to_artifact's body
    import graphdist.data
    import partitioners
    graphdist.data.load_graph = _wrap(graphdist.data.load_graph, "load_graph")
    partitioners.partition = _wrap(partitioners.partition, "partition (api)")
    partitioners.quality = _wrap(partitioners.quality, "quality")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("--parts", type=int, required=True)
    ap.add_argument("--method", default="metis")
    ap.add_argument("--out", required=True)
    ap.add_argument("--min-seconds", type=float, default=0.5, help="hide phases shorter than this")
    args = ap.parse_args(argv)
    from graphdist.partition.tools import PartitionConfig, partition_to_artifact
    install()
    s = Sampler()
    s.start()
    t0 = time.perf_counter()
    partition_to_artifact(PartitionConfig(spec=args.spec, parts=args.parts, method=args.method, out=args.out))
    t1 = time.perf_counter()
    time.sleep(0.05)
    s.stop_flag = True
    s.join()
    gib = 2 ** 30
    print(f"{'phase':<34} {'s':>7} {'rss in GiB':>10} {'peak GiB':>9} {'rise GiB':>9}")
    for depth, name, a, b, rss0 in sorted(PHASES, key=lambda p: p[2]):
        if b - a < args.min_seconds:
            continue
        pk = max(s.peak(a, b), rss0)
        print(f"{'  ' * depth + name:<34} {b - a:7.1f} {rss0 / gib:10.2f} {pk / gib:9.2f} {(pk - rss0) / gib:9.2f}")
    from graphdist.runtime import peak_rss_bytes
    print(f"total {t1 - t0:.1f} s, peak RSS {peak_rss_bytes() / 2**30:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
