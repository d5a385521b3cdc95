"""PyG's own node-classification scripts, ported to graphdist with only graphdist's lines, run at
k ranks against the unpatched scripts in one process (issue 35; docs/guides/pyg.md).

    python benchmarks/pyg_ports.py --pyg-src PYG [--k 2] [--runs 2] [--datasets Cora,CiteSeer]
        [--only gcn.py,citation/appnp.py] [--no-baseline]

PYG: a PyG git directory (``git clone --bare``, or the fetched mirror) or a checkout; the files are
taken at the commit in ``benchmarks/pyg_ports/PYG_COMMIT`` (the installed PyG's release). The ports
are unified diffs against PyG's files (``benchmarks/pyg_ports/<path>.patch``): the runner copies
PyG's ``examples/`` and ``benchmark/citation/`` into a temporary directory, applies the diffs there
(``patch``), puts the Planetoid raw files (``--data``, offline) where each script looks, and
runs each ported script under ``python -m graphdist.gnn.pyg.run --nproc-per-node K
--local-ranks-filter 0`` and the same script unpatched with ``python`` alone. Per script it
reports whether it ran (and why not), the lines of the diff (added / changed / removed; those
without a ``# graphdist`` mark are counted apart: they are not graphdist's lines) and the final
test accuracy of both runs (the last "Test" figure the script prints).
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import harness

ROOT = harness.REPO
PORTS = ROOT / "benchmarks" / "pyg_ports"
MARK = "# graphdist"

# script -> extra arguments (both runs); "{runs}" is --runs, "{dataset}" each of --datasets. PyG's citation
# benchmark runs from benchmark/citation with benchmark/ on the path (as its run.sh).
BENCH = "benchmark/citation/"
SCRIPTS = {
    "examples/gcn.py": [], "examples/gat.py": [], "examples/agnn.py": [], "examples/arma.py": [],
    "examples/tagcn.py": [], "examples/sgc.py": [], "examples/dna.py": [], "examples/mixhop.py": [],
    "examples/tensorboard_logging.py": [], "examples/super_gat.py": [], "examples/pmlp.py": [],
    "examples/gcn2_cora.py": [], "examples/cora.py": [],
    **{BENCH + f"{m}.py": ["--dataset", "{dataset}", "--runs", "{runs}"]
       for m in ("gcn", "gat", "cheb", "sgc", "arma", "appnp")},
}
# Scripts not ported, and why (they are still run unpatched when asked with --only).
NOT_PORTED = {
    "examples/cora.py": "SplineConv needs pyg-lib >= 0.6 (the script quits without it; pyg-lib is not on the "
                        "package registry: `pip download pyg-lib` finds no version) and T.TargetIndegree edge "
                        "attributes, which a part does not carry yet",
}


# ---------------------------------------------------------------------- diffs
@dataclass
class DiffCount:
    """Lines of a unified diff: ``added`` (a + with no - opposite), ``changed`` (a - / + pair in
    one block), ``removed``; ``*_other``: those among them without the ``# graphdist`` mark."""

    added: int = 0
    changed: int = 0
    removed: int = 0
    added_other: int = 0
    changed_other: int = 0

    @property
    def total(self) -> int:
        return self.added + self.changed + self.removed


def count_diff(text: str) -> DiffCount:
    """Count a unified diff's lines: in each block of consecutive ``-`` / ``+`` lines, min(-, +)
    lines are changed, the rest added or removed; a new line without ``# graphdist`` is other."""
    c = DiffCount()
    minus: list[str] = []
    plus: list[str] = []

    def flush():
        n = min(len(minus), len(plus))
        c.changed += n
        c.added += len(plus) - n
        c.removed += len(minus) - n
        c.changed_other += sum(MARK not in ln for ln in plus[:n])
        c.added_other += sum(MARK not in ln for ln in plus[n:])
        minus.clear()
        plus.clear()

    for ln in text.splitlines():
        if ln.startswith(("+++", "---", "@@")) or not ln.startswith(("+", "-")):
            flush()
        elif ln.startswith("+"):
            plus.append(ln[1:])
        else:
            minus.append(ln[1:])
    flush()
    return c


def make_patch(orig: Path, new: Path, rel: str) -> str:
    """The unified diff of ``orig`` -> ``new`` with PyG's path ``rel`` on both sides (a/ b/)."""
    out = subprocess.run(["diff", "-u", "--label", f"a/{rel}", "--label", f"b/{rel}", str(orig), str(new)],
                         capture_output=True, text=True, check=False)
    if out.returncode not in (0, 1):
        raise SystemExit(f"diff {orig} {new}: {out.stderr.strip()}")
    return out.stdout


def apply_patches(tree: Path, ports: Path = PORTS) -> dict[str, str]:
    """Apply every ``<path>.patch`` under ``ports`` to ``tree`` (``patch -p1``, no fuzz);
    returns {PyG path: patch text}."""
    done = {}
    for p in sorted(ports.rglob("*.patch")):
        rel = p.relative_to(ports).as_posix()[: -len(".patch")]
        out = subprocess.run(["patch", "-p1", "-F0", "--forward", "--no-backup-if-mismatch", "-s", "-i", str(p)],
                             cwd=tree, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"{p}: does not apply to {tree / rel}: {out.stderr.strip()}")
        done[rel] = p.read_text()
    return done


# ---------------------------------------------------------------------- PyG's files, data
def pyg_commit() -> str:
    return (PORTS / "PYG_COMMIT").read_text().split()[0]


def copy_pyg(src: Path, dest: Path, commit: str) -> None:
    """PyG's examples/ and benchmark/citation/ at ``commit`` into ``dest``."""
    git = ["git", "--git-dir", str(src / ".git" if (src / ".git").exists() else src)]
    arch = subprocess.run(git + ["archive", commit, "examples", "benchmark/citation"], capture_output=True,
                          check=False)
    if arch.returncode != 0:
        raise SystemExit(f"--pyg-src {src}: cannot read PyG at {commit}: {arch.stderr.decode().strip()}")
    subprocess.run(["tar", "x", "-C", str(dest)], input=arch.stdout, check=True)


def place_data(tree: Path, data_dirs: list[Path]) -> list[str]:
    """Copy each Planetoid raw folder found (``<dir>/<Name>/raw``) to where PyG's scripts look
    (``data/Planetoid/Name``, ``data/Name/Name``, ``benchmark/data/Name/Name``) and process it
    there once (so the ranks do not race to write ``processed/``). Returns the names placed."""
    from torch_geometric.datasets import Planetoid
    names = []
    for name in ("Cora", "CiteSeer"):
        raw = next((d / name / "raw" for d in data_dirs if (d / name / "raw").is_dir()), None)
        if raw is None:
            continue
        for root in (tree / "data" / "Planetoid", tree / "data" / name, tree / "benchmark" / "data" / name):
            shutil.copytree(raw, root / name / "raw")
            with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
                Planetoid(str(root), name)
        names.append(name)
    return names


# ---------------------------------------------------------------------- runs
ACC = re.compile(r"Test(?: Accuracy)?: ([0-9.]+)")


def run_script(tree: Path, rel: str, args: list[str], k: int | None, timeout: float) -> tuple[str, float | None, str]:
    """Run ``tree/rel`` (under graphdist's launcher at k ranks, or alone when k is None):
    (status, last test accuracy printed, tail of the output)."""
    cwd = tree / Path(rel).parent
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(tree / "benchmark"), os.environ.get("PYTHONPATH", "")]))
    if rel.startswith(BENCH):  # its statistics.py would shadow the standard library's (torch imports that):
        env["PYTHONSAFEPATH"] = "1"  # no script folder on sys.path; `citation` comes from benchmark/ above
    cmd = [sys.executable, Path(rel).name, *args] if k is None else \
        [sys.executable, "-m", "graphdist.gnn.pyg.run", "--nproc-per-node", str(k), "--local-ranks-filter", "0",
         Path(rel).name, *args]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return f"no: over {timeout:.0f} s", None, ""
    text = out.stdout + out.stderr
    accs = ACC.findall(out.stdout)
    acc = float(accs[-1]) if accs else None
    secs = time.perf_counter() - t0
    if out.returncode != 0:  # the cause: the first error line that is not the launcher's summary
        errs = [m.group(1) for m in re.finditer(r"^(?:\[rank\d+\]: )?((?:\w+(?:Error|Exception)|graphdist: error): .*)$",
                                                text, re.M) if "failed with exit code" not in m.group(1)]
        last = errs or [ln for ln in text.strip().splitlines() if ln.strip()][-1:]
        return f"no (exit {out.returncode}): {last[0] if last else ''}", acc, text[-3000:]
    if acc is None:
        return f"yes, {secs:.0f} s, no test accuracy printed", None, text[-3000:]
    return f"yes, {secs:.0f} s", acc, text[-3000:]


def build_parser():
    p = harness.parser(__doc__)
    p.add_argument("--pyg-src", required=True, type=Path, help="PyG's git directory or checkout")
    p.add_argument("--data", type=Path, action="append",
                   help="folder holding Planetoid <Name>/raw/ (repeatable; default ../shared/datasets/planetoid)")
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--runs", type=int, default=2, help="--runs of the citation benchmark scripts (PyG: 100)")
    p.add_argument("--datasets", default="Cora", help="comma-separated --dataset values for the citation benchmark")
    p.add_argument("--only", default="", help="comma-separated script names (gcn.py, citation/appnp.py, ...)")
    p.add_argument("--no-baseline", action="store_true", help="skip the unpatched one-process runs")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    p.add_argument("--keep", type=Path, help="keep the patched tree here (a new folder)")
    p.add_argument("--verbose", action="store_true", help="print each failed run's output")
    return p


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    data = a.data or [ROOT.parent / "shared" / "datasets" / "planetoid"]
    commit = pyg_commit()
    work = Path(tempfile.mkdtemp(prefix="pyg_ports_")) if a.keep is None else a.keep
    clean, ported = work / "pyg", work / "ported"
    try:
        for d in (clean, ported):
            d.mkdir(parents=True)
            copy_pyg(a.pyg_src, d, commit)
        patches = apply_patches(ported)
        names = [place_data(d, data) for d in (clean, ported)][0]
        print(f"PyG {commit[:12]} from {a.pyg_src}; Planetoid data: {', '.join(names) or 'none'}; k = {a.k}; "
              f"citation benchmark --runs {a.runs}", flush=True)
        print(harness.table_head(["script", "lines: added / changed (not graphdist's)", f"ran at k = {a.k}",
                                  f"test acc. k = {a.k}", "one process", "ran alone"]), flush=True)
        only, rows = set(harness.csv(a.only)), []
        jobs = [(rel, args, ds) for rel, args in SCRIPTS.items()
                for ds in (harness.csv(a.datasets) if "{dataset}" in args else [None])]
        for rel, args, ds in jobs:
            short = rel.replace("benchmark/", "").replace("examples/", "")
            if only and short not in only and rel not in only:
                continue
            args = [s.replace("{runs}", str(a.runs)).replace("{dataset}", ds or "") for s in args]
            short += f" ({ds})" if ds else ""
            if rel in patches:
                c = count_diff(patches[rel])
                if rel.startswith(BENCH):  # the benchmark's scripts share train_eval.py's lines
                    c = count_diff(patches.get(BENCH + "train_eval.py", "") + patches[rel])
                other = c.added_other + c.changed_other
                lines = f"{c.added} / {c.changed}" + (f" ({other} not)" if other else "")
                st, acc, tail = run_script(ported, rel, args, a.k, a.timeout)
            elif rel.startswith(BENCH):
                c = count_diff(patches.get(BENCH + "train_eval.py", ""))
                lines = f"{c.added} / {c.changed} (train_eval.py)"
                st, acc, tail = run_script(ported, rel, args, a.k, a.timeout)
            else:
                lines, st, acc, tail = "not ported", f"no: {NOT_PORTED.get(rel, 'no port')}", None, ""
            if a.verbose and st.startswith("no") and tail:
                print(tail, file=sys.stderr)
            base_st, base = "", None
            if not a.no_baseline and rel not in NOT_PORTED:
                base_st, base, btail = run_script(clean, rel, args, None, a.timeout)
                if a.verbose and base_st.startswith("no") and btail:
                    print(btail, file=sys.stderr)
            fmt = lambda v: "" if v is None else f"{100 * v:.1f}%"  # noqa: E731
            print(harness.table_row([short, lines, st, fmt(acc), fmt(base), base_st]), flush=True)
            rows.append({"script": short, "lines": lines, "ported": st, "test_acc": acc, "one_process": base,
                         "one_process_status": base_st})
        harness.write_json(a.json, {"pyg_commit": commit, "k": a.k, "rows": rows})
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
