"""Soak the exit path: many short 2-rank jobs through both entry points; count the ones that fail.

    nice -n 10 python benchmarks/exit_soak.py --jobs 50                 # 50 jobs per entry point
    nice -n 10 python benchmarks/exit_soak.py --jobs 20 --entry torchrun --kinds gcn-resume

A finished worker that aborts while the interpreter tears down ("terminate called without an
active exception", SIGABRT) turns a finished job into a failed one. Each job here is tiny (a
2,000-node sbm for 3 epochs, a small rec-synth, 6 DLRM steps on 4,000 criteo-synth rows) and is
started as a user starts it:

* ``nproc``: ``graphdist train-* ... --nproc 2`` (torch's elastic agent inside graphdist);
* ``torchrun``: ``python -m torch.distributed.run --standalone --nproc-per-node 2 -m graphdist train-*``.

The kinds cycle through ``gcn``, ``gcn-resume``, ``rec``, ``rec-resume``, ``dlrm``, ``dlrm-resume``;
a ``*-resume`` job is two runs: one that writes a checkpoint every epoch (step), then one that
resumes from it and trains further. A run passes when it exits 0, prints no abort and leaves its
report. The script prints one line per failed run (its log is kept in ``--workdir``), then a table
of runs / passed / aborted / other failures per entry point and kind, and exits 1 when any run
failed. With ``--core-dumps`` the workers may leave core files in each job's directory (where
the kernel's ``core_pattern`` is a plain file name), for ``gdb python core``.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import harness

KINDS = ("gcn", "gcn-resume", "rec", "rec-resume", "dlrm", "dlrm-resume")
ENTRIES = ("nproc", "torchrun")
ABORT_MARKS = ("terminate called", "Aborted", "SIGABRT", "exit code -6", "exitcode  : -6",
               "core dumped", "Fatal Python error")

_ARGS = {  # command, data spec, flags of the first run, (flags of the resumed run)
    "gcn": ("train-gcn", "sbm:nodes=2000,classes=4", ["--epochs", "3", "--checkpoint-every", "1"],
            ["--epochs", "5"]),
    "rec": ("train-rec", "rec-synth:users=500,items=300", ["--epochs", "3", "--dim", "16",
                                                          "--checkpoint-every", "1"], ["--epochs", "5"]),
    "dlrm": ("train-dlrm", "criteo-synth:rows=4000", ["--steps", "6", "--batch-size", "256",
                                                      "--checkpoint-every", "3"], ["--steps", "9"]),
}


@dataclass
class Run:
    """One process tree started by the soak and what it left."""

    entry: str
    """nproc or torchrun"""
    kind: str
    """the job kind (gcn, gcn-resume, ...)"""
    step: str
    """first or resumed"""
    rc: int
    """exit code of the launching process"""
    seconds: float
    """wall-clock time of the run"""
    log: str = field(repr=False)
    """its stdout and stderr"""
    report_ok: bool = False
    """the report file was written and parses"""

    @property
    def aborted(self) -> bool:
        return any(m in self.log for m in ABORT_MARKS)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.report_ok and not self.aborted


def command(entry: str, kind: str, job_dir: Path, resumed: bool) -> list[str]:
    """The command line of one run of ``kind`` through ``entry``."""
    cmd, spec, first, more = _ARGS[kind.removesuffix("-resume")]
    flags = list(first) + ["--checkpoint-dir", str(job_dir / "ckpt"),
                           "--report", str(job_dir / ("resumed.json" if resumed else "first.json"))]
    if resumed:  # later values of a repeated flag win
        flags += list(more) + ["--resume"]
    if entry == "nproc":
        return harness.graphdist_cmd(cmd, spec, "--nproc", "2", *flags)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "-m", "graphdist", cmd, spec, *flags]


def _allow_cores():
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def run_one(entry: str, kind: str, job_dir: Path, resumed: bool, *, timeout: float = 300.0,
            core: bool = False, env: dict | None = None) -> Run:
    """Start one run and wait for it."""
    job_dir.mkdir(parents=True, exist_ok=True)
    e = harness.checkout_env(**(env or {}))
    t0 = time.monotonic()
    try:
        p = subprocess.run(command(entry, kind, job_dir, resumed), cwd=job_dir, env=e,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace", timeout=timeout, preexec_fn=_allow_cores if core else None)
        rc, log = p.returncode, p.stdout
    except subprocess.TimeoutExpired as ex:
        out = ex.stdout or ""
        rc, log = 124, (out.decode(errors="replace") if isinstance(out, bytes) else out) + "\n[soak: timed out]"
    r = Run(entry, kind, "resumed" if resumed else "first", rc, time.monotonic() - t0, log)
    rep = job_dir / ("resumed.json" if resumed else "first.json")
    try:
        json.loads(rep.read_text())
        r.report_ok = True
    except (OSError, ValueError):
        pass
    return r


def run_job(entry: str, kind: str, job_dir: Path, **kw) -> list[Run]:
    """A job: one run, or for ``*-resume`` a first run and the run that resumes from it."""
    runs = [run_one(entry, kind, job_dir, False, **kw)]
    if kind.endswith("-resume") and runs[0].ok:
        runs.append(run_one(entry, kind, job_dir, True, **kw))
    return runs


def soak(jobs: int, entries=ENTRIES, kinds=KINDS, workdir: Path | None = None, *, keep: bool = False,
         core: bool = False, timeout: float = 300.0, echo=print) -> list[Run]:
    """``jobs`` jobs per entry point, the kinds in turn, the entry points interleaved; returns
    every run. Job directories of passing runs are removed unless ``keep``."""
    own = workdir is None
    workdir = Path(workdir or tempfile.mkdtemp(prefix="graphdist-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    runs: list[Run] = []
    try:
        for i in range(jobs):
            for entry in entries:
                kind = kinds[i % len(kinds)]
                d = workdir / f"{entry}-{i:03d}-{kind}"
                got = run_job(entry, kind, d, timeout=timeout, core=core)
                runs += got
                bad = [r for r in got if not r.ok]
                for r in bad:
                    (d / f"{r.step}.log").write_text(r.log)
                    cores = sorted(p.name for p in d.glob("core*"))
                    echo(f"FAIL {entry} {kind} job {i} ({r.step} run): rc {r.rc}"
                         f"{', abort' if r.aborted else ''}{', no report' if not r.report_ok else ''}"
                         f"{', cores ' + ' '.join(cores) if cores else ''}; log {d / (r.step + '.log')}")
                echo(f"job {i} {entry} {kind}: " + ", ".join(f"{r.step} {'ok' if r.ok else 'FAILED'} "
                                                          f"{r.seconds:.1f}s" for r in got))
                if not bad and not keep:
                    shutil.rmtree(d, ignore_errors=True)
    finally:
        if own and not keep and all(r.ok for r in runs):
            shutil.rmtree(workdir, ignore_errors=True)
    return runs


def table(runs: list[Run]) -> str:
    rows = []
    keys = sorted({(r.entry, r.kind) for r in runs}, key=lambda k: (ENTRIES.index(k[0]), KINDS.index(k[1])))
    for e, k in keys + [("all", "all")]:
        rs = [r for r in runs if (e == "all" or r.entry == e) and (k == "all" or r.kind == k)]
        secs = sorted(r.seconds for r in rs)
        rows.append([e, k, len(rs), sum(r.ok for r in rs), sum(r.aborted for r in rs),
                     sum(not r.ok and not r.aborted for r in rs), f"{secs[len(secs) // 2]:.1f}"])
    return harness.table(["entry point", "kind", "runs", "passed", "aborted", "other failures", "s/run (median)"], rows)


def build_parser():
    ap = harness.parser(__doc__, json_out=False)
    ap.add_argument("--jobs", type=int, default=50, help="jobs per entry point (default 50)")
    ap.add_argument("--entry", default=",".join(ENTRIES), help="comma-separated: nproc,torchrun")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated, in turn: " + ",".join(KINDS))
    ap.add_argument("--workdir", type=Path, help="keep job directories (failed ones always) here")
    ap.add_argument("--keep", action="store_true", help="keep the directories of passing jobs too")
    ap.add_argument("--core-dumps", action="store_true", help="allow core files in each job directory")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run before it is killed")
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    entries, kinds = harness.csv(a.entry), harness.csv(a.kinds)
    for x in entries:
        if x not in ENTRIES:
            ap.error(f"--entry: {x!r} is not one of {', '.join(ENTRIES)}")
    for x in kinds:
        if x not in KINDS:
            ap.error(f"--kinds: {x!r} is not one of {', '.join(KINDS)}")
    t0 = time.monotonic()
    print(f"exit soak: {a.jobs} jobs x {entries}, kinds {kinds}, {time.strftime('%Y-%m-%d %H:%M')}, "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    runs = soak(a.jobs, entries, kinds, a.workdir, keep=a.keep, core=a.core_dumps, timeout=a.timeout,
                echo=lambda s: print(s, flush=True))
    print(table(runs))
    print(f"{len(runs)} runs in {time.monotonic() - t0:.0f} s, {sum(not r.ok for r in runs)} failed "
          f"({sum(r.aborted for r in runs)} aborted); load at the end {os.getloadavg()[0]:.2f}")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
