"""Check (or rewrite) the output blocks of the README and the docs pages against what their
commands print today, and run every command of the README as written.

    python scripts/readme_outputs.py            # run and check everything; exit 1 on a drift
    python scripts/readme_outputs.py --write    # run them and write what they print into the pages
    python scripts/readme_outputs.py --list     # the blocks, their commands, and what is not run (why)

The pages are README.md and every ``docs/**/*.md``. An output block is marked by an HTML comment
(invisible on the rendered page) on the line before its opening fence::

    <!-- output: the commands above -->        all that the commands of the fenced block above print
    <!-- output: the first command above -->   what its first command prints (the others exit 0)
    <!-- output: the last command above -->    what its last command prints (the others exit 0)
    <!-- output: the $ lines -->               one block: `$ ` lines are commands, each followed by its output
    <!-- output: not checked: WHY -->          an output block no command here can reproduce, and why

``; exit N`` before ``-->`` says the last command exits with N (the others, and every command of
the README, must exit 0); ``; after PATH`` runs first the commands of the last block above on
the page that writes ``--out PATH``. Every fenced block of a page that is neither commands nor
code carries one of these marks (``tests/test_readme_outputs.py``). Commands that install
packages or start the test suite are not run (``doc_blocks.NOT_RUN`` says why, ``--list`` shows them).

Each group of commands runs in its own copy of the repository as a fresh clone holds it (the
files git tracks or would add, none it ignores: ``datasets/`` is the data home as shipped), in
its root, under bash, one intra-op thread per process, the CPU kernels of MKL, ATen, fbgemm and
oneDNN held to one instruction set (``ONE_ISA``). ``$GRAPHDIST_DATA`` (the caller's) is set
only for a group whose data the shipped data home lacks; a group whose data no data home has is
skipped, saying which file is missing. Each command's exit code is checked, and its output
(stdout, then stderr; progress bars and progress lines dropped) must be the block's lines one for one: a line that
appears or disappears is a drift; their order may differ (ranks print concurrently). Within a
line, measured times and rates (``ms``, ``samples/s``, ``time ... s``, plan's ``(est.)`` and
``time s`` columns) and the machine's free memory (``fits in ... GiB``) are not compared; the
memory of a process (``peak mem``, ``peak RSS``, ``needs about``, ``may hold only``) must be
within ``MEMORY_TOLERANCE`` of the block's; every other figure (accuracies, losses, rows, bytes,
epochs, plans) must match exactly. A line ``...`` in a block stands for printed lines left out
there, never a warning or an error. Blocks with the same commands run once; a block whose
commands begin another group's is checked against that run.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_blocks import (REPO, Block, all_blocks, blocks, by_commands, not_run, pages)  # noqa: E402

TIMES = [(re.compile(r"\d[\d,]*(?:\.\d+)? ms\b"), "<t> ms"),
         (re.compile(r"\d[\d,]*(?:\.\d+)? samples/s"), "<r> samples/s"),
         (re.compile(r"^((?:load time|time|build)\s+)\d[\d.]* s\b"), r"\1<t> s"),
         (re.compile(r"\bfits in \d[\d.]* GiB"), "fits in <free> GiB")]
MEASURED_COLUMN = re.compile(r"(epoch s \(est\.\)|time s)\s*$")
"""a table whose last column is measured: its rows' last figure is not compared"""
ROW_FIGURE = re.compile(r"^(\s*\S.*?\s)(\d[\d,]*(?:\.\d+)?)(\s*(?:\(inexact\)|<- \S+)?)$")
MEMORY = re.compile(r"(peak mem(?:ory)?|peak RSS|peak|needs about|may hold only) (\d[\d,]*(?:\.\d+)?) (MiB|GiB)")
ROW_PEAK = re.compile(r"(\d[\d,]*(?:\.\d+)? (?:MiB|GiB))(\s+<est>)")
"""plan's per-rank peak, the column before its measured estimate: a process's memory (it counts
an in-process run's whole-graph load, measured as it loads)"""
MEMORY_TOLERANCE = 0.15
"""a process's memory differs between runs by a few percent and between machines (allocator,
libraries, thread pools) by up to about 10%: 15% passes that and fails a 25% change"""
WARNING = re.compile(r"(?i)\bwarn(ing)?\b|\berror\b:|traceback")
PROGRESS = re.compile(r"^[^|\n]*\d+%\|[^|]*\|[^\]]*\]")
LOG_PROGRESS = re.compile(r"^[\w-]+: [\w-]+ \d+/\d+ \(\d+%\)(, |$)")
"""A progress line written where stderr is not a terminal (``graphdist.progress.LogLines``:
``train-gcn: epoch 20/200 (10%), 15.3 epoch/s, 12s left, loss=1.7424``): at a terminal, where the
pages' commands are typed, it is the bar, so it is dropped as the bar is."""


ONE_ISA = {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
           "ONEDNN_MAX_CPU_ISA": "AVX2"}
"""Left to choose, these libraries pick their kernels by the machine's instruction sets and its
vendor, and a figure's last digit then differs between machines: the 2D run of
docs/guides/dlrm.md printed auc 0.8559, logloss 0.3981 on an AMD EPYC with MKL left to choose,
0.8560, 0.3979 on the box its block was written on, as the same EPYC does with MKL held to AVX2
or AVX512 (``MKL_CBWR``). AVX2 is what every x86-64 machine the check runs on has; held to it,
MKL's float32 product ran at 82 GFLOP/s on that EPYC against 80 left to choose (one thread)."""


@dataclass
class Ran:
    command: str
    rc: int | None
    """None: killed at the timeout"""
    lines: list[str]


def shapes(lines: list[str]) -> list[tuple[str, list[float]]]:
    """Each line with what a machine and its load change masked, and its process memory cut out
    (MiB): the ``(skeleton, memory)`` that two lines must share (memory within the tolerance)."""
    out, measured = [], False
    for line in lines:
        if measured and line[:1] in " 0123456789" and ROW_FIGURE.match(line):
            line = ROW_FIGURE.sub(r"\1<est>\3", line)
            line = ROW_PEAK.sub(r"peak \1\2", line)
        elif line.strip() != "..." and not re.fullmatch(r"[-\s]+", line):  # `...` and a rule keep the table
            measured = bool(MEASURED_COLUMN.search(line))
        for pat, rep in TIMES:
            line = pat.sub(rep, line)
        mems = [float(m.group(2).replace(",", "")) * (1024 if m.group(3) == "GiB" else 1)
                for m in MEMORY.finditer(line)]
        out.append((MEMORY.sub(r"\1 <m> \3", line).rstrip(), mems))
    return out


def same(want: tuple[str, list[float]], got: tuple[str, list[float]]) -> bool:
    return want[0] == got[0] and all(abs(g - w) <= MEMORY_TOLERANCE * w for w, g in zip(want[1], got[1]))


def align(want: list[str], got: list[str]) -> list[tuple[int | None, int | None]]:
    """The fewest unmatched lines: ``(i, j)`` for matched lines, ``(i, None)`` for a line of the
    block not printed, ``(None, j)`` for a printed line not in the block. A ``...`` of the block
    absorbs the printed lines that are not warnings or errors (``(i, j)`` with ``want[i] == '...'``):
    those in its place, and, since ranks and stderr print in another order, any others."""
    n, m = len(want), len(got)
    ws, gs = shapes(want), shapes(got)
    wild = [w.strip() == "..." for w in want]
    quiet = [not WARNING.search(g) for g in got]
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        for j in range(m + 1):
            opts = [cost[i - 1][j] + (0 if wild[i - 1] else 1)] if i else []
            if j:
                opts.append(cost[i][j - 1] + (0 if i and wild[i - 1] and quiet[j - 1] else 1))
            if i and j and not wild[i - 1] and same(ws[i - 1], gs[j - 1]):
                opts.append(cost[i - 1][j - 1])
            cost[i][j] = min(opts) if opts else 0
    path, i, j = [], n, m
    while i or j:
        if i and j and not wild[i - 1] and same(ws[i - 1], gs[j - 1]) and cost[i][j] == cost[i - 1][j - 1]:
            path.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i and wild[i - 1] and j and quiet[j - 1] and cost[i][j] == cost[i][j - 1]:
            path.append((i - 1, j - 1))
            j -= 1
        elif i and cost[i][j] == cost[i - 1][j] + (0 if wild[i - 1] else 1):
            if not wild[i - 1]:
                path.append((i - 1, None))
            i -= 1
        else:
            path.append((None, j - 1))
            j -= 1
    return _moved(path[::-1], ws, gs, wild, quiet)


def _moved(path, ws, gs, wild, quiet):
    """Lines in another order: a line of the block printed elsewhere (by another rank, on stderr
    after stdout, or where a ``...`` stood) matches; with a ``...`` in the block, quiet printed
    lines anywhere are left out."""
    for x, (i, j) in enumerate(path):
        if i is not None and j is None and not wild[i]:
            y = next((y for y, (i2, j2) in enumerate(path) if j2 is not None and (i2 is None or wild[i2])
                      and same(ws[i], gs[j2])), None)
            if y is not None:
                path[x], path[y] = (i, path[y][1]), (None, None)
    path = [p for p in path if p != (None, None)]
    first = wild.index(True) if any(wild) else None
    return [(first, j) if i is None and first is not None and quiet[j] else (i, j) for i, j in path]


def drift(block: Block, ran: list[Ran]) -> list[str]:
    """What the commands did that the block does not say; empty when none."""
    out = []
    for k, r in enumerate(ran):
        want = block.exit if k == len(ran) - 1 else 0
        if r.rc != want:
            said = "was stopped at the timeout" if r.rc is None else f"exited {r.rc}"
            out.append(f"`{r.command}` {said}, the page says {want}" + "".join(f"\n    | {ln}" for ln in r.lines[-15:]))
    for (a, b), want in zip(block.segments, block.expected or []):
        got = [ln for r in ran[a:b] for ln in r.lines]
        want = [ln for ln in want if ln.strip()]
        path = align(want, got)
        out += [f"- {want[i]}   (not printed)" for i, j in path if j is None]
        out += [f"+ {got[j]}   (printed, not in the block)" for i, j in path if i is None]
    return out


def checkout(dest: Path) -> Path:
    """``dest`` made a copy of the repository as a fresh clone holds it (the files git tracks or
    would add, none that it ignores), with the byte code of its sources so no process compiles them."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    names += [str(p.relative_to(REPO)) for p in REPO.glob("*/**/__pycache__/*.pyc")]
    for name in filter(None, names):
        if (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    return dest


def missing_data(block: Block, homes: list[Path]) -> list[str]:
    """The block's data paths found in none of ``homes``."""
    return [d for d in block.data if not any((h / d).exists() for h in homes)]


def run(block: Block, cwd: Path, timeout: float = 600) -> list[Ran] | str:
    """The block's commands run in turn in ``cwd`` (a checkout); or why they cannot run there."""
    env = {**os.environ, "PYTHONPATH": str(cwd), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **ONE_ISA}
    caller = [Path(d) for d in env.pop("GRAPHDIST_DATA", "").split(os.pathsep) if d]
    if missing_data(block, [cwd / "datasets"]):
        miss = missing_data(block, caller)
        if miss:
            return f"not in the data homes: {', '.join(miss)}"
        env["GRAPHDIST_DATA"] = os.pathsep.join(map(str, caller))
    shims = Path(tempfile.mkdtemp(prefix="bin-", dir=cwd.parent))
    for name, argv in [("graphdist", "-m graphdist"), ("python", ""), ("python3", ""),
                       ("torchrun", "-m torch.distributed.run")]:
        (shims / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" {argv} "$@"\n')
        (shims / name).chmod(0o755)
    env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '')}"
    return [_one(cmd, cwd, env, timeout) for cmd in block.commands]


def _one(cmd: str, cwd: Path, env: dict, timeout: float) -> Ran:
    """One command line under bash: its exit code, stdout's lines, then stderr's without progress
    bars; at the timeout its whole process group is killed."""
    p = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, err = p.communicate()
        rc = None
    return Ran(cmd, rc, [ln for ln in out.splitlines() + _no_bars(err) if ln.strip()])


def _no_bars(text: str) -> list[str]:
    """stderr's lines without progress bars (redrawn in place with carriage returns)."""
    out = []
    for ln in text.split("\n"):
        if LOG_PROGRESS.match(ln):
            continue
        if "\r" in ln or PROGRESS.match(ln):
            out += [p for p in (PROGRESS.sub("", part) for part in ln.split("\r")) if p.strip()]
        else:
            out.append(ln)
    return out


def run_in_checkout(block: Block, folder: Path, timeout: float = 600) -> list[Ran] | str:
    """:func:`run` in a fresh checkout made under ``folder``."""
    (folder / "repo").mkdir(parents=True, exist_ok=True)
    return run(block, checkout(folder / "repo"), timeout)


def rewrite(lines: list[str], block: Block, ran: list[Ran]) -> None:
    """Put into a block that drifted what its commands print now (one run's lines, figures and
    times alike): each line printed with the same words in its place, a line no longer printed
    gone, a new one after the line printed before it; `$ ` lines, blank lines and ``...`` stay.
    A block that has not drifted is left as it is."""
    if not drift(block, ran):
        return
    new = []
    for (a, b), body, pre in zip(block.segments, block.expected, block.prefixes):
        got = [ln for r in ran[a:b] for ln in r.lines]
        want = [ln for ln in body if ln.strip()]
        path = align(want, got)
        matched = {i: j for i, j in path if i is not None and j is not None and want[i].strip() != "..."}
        keep = {i: got[j] for i, j in matched.items()}
        loose = [j for i, j in path if j is not None and (i is None or want[i].strip() == "...")]
        for i, j in path:  # a line printed with other figures: the same words
            if i is not None and j is None:
                k = next((k for k in loose if _words(got[k]) == _words(want[i])), None)
                if k is None:  # reworded (a unit changed, say): the most alike line a `...` took
                    k = max(loose, key=lambda k: _alike(got[k], want[i]), default=None)
                    k = k if k is not None and _alike(got[k], want[i]) >= 0.6 else None
                if k is not None:
                    keep[i], matched[i] = got[k], k
                    loose.remove(k)
        after: dict[int, list[str]] = {}
        for j in (j for i, j in path if i is None and j in loose):
            after.setdefault(max((i for i, jj in matched.items() if jj < j), default=-1), []).append(got[j])
        new += pre + after.get(-1, [])
        i = 0
        for ln in body:
            if not ln.strip():
                new.append(ln)
                continue
            new += ([keep[i]] if i in keep else [ln] if ln.strip() == "..." else []) + after.get(i, [])
            i += 1
    lines[block.start:block.end] = new


def _alike(a: str, b: str) -> float:
    """How alike two lines' words are (difflib's ratio over their words, 0..1)."""
    import difflib
    return difflib.SequenceMatcher(None, a.split(), b.split()).ratio()


def _words(line: str) -> str:
    return " ".join(re.sub(r"\d[\d,.]*", "#", line).split())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write what the commands print into the pages")
    ap.add_argument("--list", action="store_true", help="list the blocks, their commands, and what is not run")
    ap.add_argument("where", nargs="*", help="only the groups with a block on these pages (PAGE or PAGE:LINE)")
    args = ap.parse_args(argv)
    found, bad = all_blocks(), 0
    groups = {k: g for k, g in by_commands(found).items()
              if not args.where or any(b.where == w or b.where.split(":")[0] == w for b in g for w in args.where)}
    if args.list:
        for b in found:
            print(f"{b.where}: " + (f"not checked: {b.why}" if b.why else " && ".join(b.commands)))
        for cmd, why in not_run():
            print(f"README.md: not run: {cmd}: {why}")
        return 0
    printed: dict[tuple[str, ...], list[Ran]] = {}
    for cmds, group in groups.items():
        with tempfile.TemporaryDirectory(prefix="graphdist-readme-") as tmp:
            got = run_in_checkout(Block(0, list(cmds)), Path(tmp))
        if isinstance(got, str):
            print(f"{group[0].where}: skipped, {got}")
            continue
        printed[cmds] = got
        for b in group:
            d = drift(b, got[:len(b.commands)])
            bad += bool(d)
            print(f"{b.where}: " + ("ok" if not d else "drifted:\n  " + "\n  ".join(d)), flush=True)
    if args.write:
        for page in pages():
            lines = page.read_text().splitlines()
            mine = [(b, k) for b in blocks(lines, page) for k, g in groups.items() if b in g and k in printed]
            for b, k in reversed(mine):  # bottom up: a rewritten block may change the lines below it
                rewrite(lines, b, printed[k][:len(b.commands)])
                print(f"{b.where}: written")
            if mine:
                page.write_text("\n".join(lines) + "\n")
        return 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
