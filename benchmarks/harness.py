"""What every script in ``benchmarks/`` shares: arguments, timing side by side, tables, JSON out.

A script builds its parser with :func:`parser` in a function ``build_parser()`` (so ``--help``
works before anything heavy is imported, and ``tests/test_benchmarks.py`` can check that every
command ``BENCHMARKS.md`` quotes still parses), times what it compares with :func:`alternate`
(sides taking turns, so the load of a shared machine hits them alike) or :func:`median_s`,
prints with :func:`table` and writes ``--json`` with :func:`write_json` (atomic). Processes it
measures from outside go through :func:`child_json` (a fresh interpreter whose last stdout line
is JSON) or :func:`time_v` (``/usr/bin/time -v``: wall time and peak RSS). The one call into
graphdist's GCN trainer is :func:`train_gcn`.

Scripts import it as ``harness`` (``python benchmarks/X.py`` puts ``benchmarks/`` first on the
path, and processes started by ``graphdist.testing.run_ranks`` inherit that path).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a checkout: this checkout's graphdist, in children too
    sys.path.insert(1, str(REPO))


# --- arguments -----------------------------------------------------------------------------

def parser(doc: str | None, *, json_out: bool = True) -> argparse.ArgumentParser:
    """The script's parser: its module docstring as the description (kept as written), and
    ``--json FILE`` unless ``json_out`` is False."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if json_out:
        p.add_argument("--json", type=Path, default=None, metavar="FILE",
                       help="also write the results to FILE (atomically)")
    return p


def csv(text: str | None, kind: Callable[[str], Any] = str) -> list:
    """``"1,2,4"`` -> ``[1, 2, 4]`` with ``kind=int``; empty items (and an empty string) dropped."""
    return [kind(x.strip()) for x in (text or "").split(",") if x.strip()]


# --- timing --------------------------------------------------------------------------------

def timed(fn: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds of one call of ``fn`` by ``clock``."""
    t0 = clock()
    fn()
    return clock() - t0


def median_s(fn: Callable[[], Any], repeats: int = 7, *, warmup: int = 1,
             clock: Callable[[], float] = time.perf_counter) -> float:
    """Median seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn, clock) for _ in range(repeats))


@dataclass
class Times:
    """One side's timed calls: wall and process CPU seconds, in call order."""
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)


def alternate(sides: dict[str, Callable[[int], Any]], rounds: int, *, warmup: int = 0, rotate: bool = False,
              sync: Callable[[], Any] | None = None) -> dict[str, Times]:
    """Time the sides in turn: each round calls every side once (``fn(round)``), so whatever else
    runs on the machine hits them alike. ``warmup`` untimed rounds come first (their round
    numbers are ``0 .. warmup - 1``, the timed ones follow); ``rotate`` starts round ``r`` at side
    ``r mod n`` (no side always first); ``sync`` (a barrier across ranks) runs before each call,
    untimed, and after it: a call's wall time then runs until every rank is done, its CPU time
    is this process's own."""
    names = list(sides)
    out = {n: Times() for n in names}
    for r in range(warmup + rounds):
        order = names[r % len(names):] + names[:r % len(names)] if rotate else names
        for name in order:
            if sync:
                sync()
            t0, c0 = time.perf_counter(), time.process_time()
            sides[name](r)
            c1 = time.process_time()
            if sync:
                sync()
            if r >= warmup:
                out[name].wall.append(time.perf_counter() - t0)
                out[name].cpu.append(c1 - c0)
    return out


def child_cpu_s(argv: list[str], env: dict, cwd) -> float:
    """Run ``python ARGV`` to its end; the CPU seconds (user + system) it and its children used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def alternate_processes(sides: dict[str, tuple[list[str], dict]], rounds: int, cwd, *, warmup: int = 1) -> dict:
    """``{side: {"wall_s", "cpu_s"}}``: medians over ``rounds`` alternated runs (after ``warmup``
    untimed ones) of each side's ``python ARGV`` with its environment, the CPU of the process and
    its children (:func:`child_cpu_s`)."""
    cpu: dict[str, list[float]] = {name: [] for name in sides}

    def side(name):
        argv, env = sides[name]
        return lambda r: cpu[name].append(child_cpu_s(argv, env, cwd))
    times = alternate({name: side(name) for name in sides}, rounds, warmup=warmup, rotate=True)
    return {name: {"wall_s": round(t.median, 2), "cpu_s": round(statistics.median(cpu[name][warmup:]), 2)}
            for name, t in times.items()}


def ratios(num: list[float], den: list[float]) -> dict:
    """``num`` over ``den`` (equal-length lists of the same measure from one alternated run): the
    ratio of the medians and the median of the per-round ratios."""
    return {"median": statistics.median(num) / statistics.median(den),
            "median_of_pairs": statistics.median(a / b for a, b in zip(num, den))}


# --- tables and JSON -----------------------------------------------------------------------

def _cell(v, fmt: Callable[[Any], str] | None = None) -> str:
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return fmt(v) if fmt else f"{v:.4g}"
    return str(v)


def table_head(header: list[str], numeric: list[bool] | None = None) -> str:
    """A Markdown table's header and rule (``---:`` where ``numeric``), for tables printed a row
    at a time as their runs finish (:func:`table_row`)."""
    numeric = numeric or [False] * len(header)
    return "| " + " | ".join(header) + " |\n|" + "|".join("---:" if n else "---" for n in numeric) + "|"


def table_row(cells: list, *, fmt: Callable[[Any], str] | None = None) -> str:
    """One Markdown table row: ints with thousands separators, floats by ``fmt`` (default: 4
    significant digits), None as an empty cell."""
    return "| " + " | ".join(_cell(v, fmt) for v in cells) + " |"


def table(header: list[str], rows: list[list], *, fmt: Callable[[Any], str] | None = None) -> str:
    """A Markdown table; columns whose cells are all numbers right-aligned (:func:`table_row`)."""
    numeric = [bool(rows) and all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool)
                                  for r in rows if r[i] is not None) for i in range(len(header))]
    return "\n".join([table_head(header, numeric)] + [table_row(r, fmt=fmt) for r in rows])


def write_json(path, obj, *, indent: int = 1) -> None:
    """Write ``obj`` to ``path`` atomically (nothing when ``path`` is None)."""
    if path:
        from graphdist.fileio import atomic_write_json
        atomic_write_json(path, obj, indent=indent)


def emit(obj: dict, path=None) -> dict:
    """Print ``obj`` as one JSON line (the last line a parent reads) and write it to ``path``."""
    print(json.dumps(obj), flush=True)
    write_json(path, obj)
    return obj


# --- processes -----------------------------------------------------------------------------

def status_bytes(key: str = "VmHWM") -> int:
    """A ``/proc/self/status`` memory line in bytes: ``VmHWM`` (peak RSS), ``VmRSS`` ..."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def available_gib() -> float:
    """``MemAvailable`` in GiB."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return 0.0


def checkout_env(checkout: Path = REPO, **extra: str) -> dict:
    """The environment for a child that must import graphdist from ``checkout`` (first on its
    ``PYTHONPATH``, whatever else is there), with ``extra`` variables."""
    path = os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def child_json(argv: list[str], timeout: float, *, cwd: Path = REPO, env: dict | None = None) -> dict:
    """Run ``python ARGV`` in a fresh interpreter; the JSON object of its last stdout line, or
    ``{"error": ...}`` (its last stderr line, or the timeout)."""
    try:
        r = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout,
                           cwd=cwd, env=env or checkout_env())
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:g} s"}
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


@dataclass
class Run:
    """A command run under ``/usr/bin/time -v``."""
    rc: int
    wall_s: float
    peak_rss_kib: int | None
    stdout: str
    stderr: str

    @property
    def peak_rss_gib(self) -> float | None:
        return None if self.peak_rss_kib is None else round(self.peak_rss_kib / 2**20, 2)

    def error_line(self) -> str:
        """graphdist's own one-line error (``graphdist: ...``), if it printed one."""
        return ([ln for ln in self.stderr.splitlines() if ln.startswith("graphdist:")] or [""])[-1]


def time_v(argv: list[str], timeout: float, *, cwd: Path = REPO, env: dict | None = None) -> Run:
    """Run ``argv`` under ``/usr/bin/time -v``: exit code (124 on timeout), wall seconds, the
    largest single process's peak RSS, and the output."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True, timeout=timeout,
                           cwd=cwd, env=env or checkout_env())
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, "", e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    return Run(rc, round(time.perf_counter() - t0, 1), int(rss.group(1)) if rss else None, out, err)


def graphdist_cmd(*args: str) -> list[str]:
    """``python -m graphdist ARGS`` with this interpreter."""
    return [sys.executable, "-m", "graphdist", *args]


def partition_once(spec: str | None, out: Path, *flags: str, env: dict | None = None) -> Path:
    """``graphdist partition SPEC --out OUT FLAGS`` unless ``OUT`` already holds an artifact."""
    if not (Path(out) / "meta.json").exists():
        subprocess.run(graphdist_cmd("partition", *([spec] if spec else []), "--out", str(out), *flags), check=True,
                       env=env or checkout_env(), stdout=subprocess.DEVNULL)
    return Path(out)


# --- the test bed (graphdist.testbed: hosts as network namespaces) --------------------------

def testbed_env() -> dict:
    """The environment of a command on a test-bed host: this checkout first, one thread a worker
    unless ``OMP_NUM_THREADS`` says otherwise."""
    e = checkout_env()
    e.setdefault("OMP_NUM_THREADS", "1")
    return e


def on_hosts(tb, argv: list[str], report: Path, *, timeout: float = 1800) -> tuple[dict, list[int]]:
    """Run ``argv --report REPORT`` on every host of ``tb`` at once (host ``i > 0`` writes
    ``REPORT.i``); host 0's report and the bytes each host's interface sent during the run. A
    host that fails ends the script with its output's tail."""
    hosts = len(tb.ns)
    before = [tb.link_bytes(i)[1] for i in range(hosts)]
    res = tb.run_all([argv + ["--report", str(report) + ("" if i == 0 else f".{i}")] for i in range(hosts)],
                     timeout=timeout, env=testbed_env())
    for i, (rc, text) in enumerate(res):
        if rc != 0:
            raise SystemExit(f"host {i}: {' '.join(argv[2:5])} ... failed ({rc}):\n{text[-3000:]}")
    return json.loads(Path(report).read_text()), [tb.link_bytes(i)[1] - b for i, b in enumerate(before)]


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


# --- graphdist -----------------------------------------------------------------------------

KIPF = dict(model="gcn", layers=2, hidden=16, dropout=0.5, lr=0.01, weight_decay=5e-4)
"""Kipf & Welling's GCN settings (2 layers of 16, dropout 0.5, Adam 0.01, weight decay 5e-4 on the
first layer), as ``GCNConfig`` fields."""


def planetoid_dir(dataset: str, root: str | None = None) -> Path:
    """A Planetoid dataset's folder: under ``root``, else under the first of
    ``../shared/datasets/planetoid`` and this checkout's ``datasets/planetoid`` (where
    ``scripts/fetch_planetoid.py`` writes) that holds ``DATASET/raw/``."""
    roots = [Path(root)] if root else [REPO.parent / "shared" / "datasets" / "planetoid",
                                       REPO / "datasets" / "planetoid"]
    return next((r for r in roots if (r / dataset / "raw").is_dir()), roots[0]) / dataset


def planetoid(dataset: str, root: str | None = None) -> str:
    """The ``planetoid:`` spec of :func:`planetoid_dir`."""
    return f"planetoid:{planetoid_dir(dataset, root)}"


def rank_part(spec: str, method: str, rank: int, world: int, seed: int = 0):
    """``(graph, this rank's LocalGraph)``: ``spec`` loaded and partitioned in this process
    (every rank computes the same assignment), as the trainer's in-process path does."""
    from graphdist.data import load_graph
    from graphdist.partition.layout import build_layout
    from graphdist.partition.setup import partition_in_process
    g = load_graph(spec)
    return g, build_layout(g, partition_in_process(g, world, method, seed), rank, world)


def process_group(device: str = "cpu"):
    """Join this rank's process group (environment set by ``run_ranks`` or a launcher); the
    trainer's context (world size, rank, device)."""
    from graphdist.procgroup import init_distributed
    return init_distributed(device)


def malloc_mmap_mb(mb: int) -> None:
    """glibc's mmap threshold for this process, as ``train-gcn --malloc-mmap-mb`` sets it."""
    from graphdist.memory import set_mmap_threshold
    set_mmap_threshold(mb)


def train_gcn(cfg, part, info: dict | None = None, ctx=None, callbacks=()) -> dict:
    """graphdist's GCN trainer on this rank's part (a ``LocalGraph``, or a one-element list the
    trainer empties); the report. The process group is joined here unless ``ctx`` is given."""
    from graphdist.gnn.trainer import fit
    return fit(cfg, part, info or {}, ctx or process_group(), callbacks=callbacks)
