"""Check (or rewrite) the output blocks of the README and the docs pages against what their
commands print today.

    python scripts/readme_outputs.py            # check every marked block; exit 1 on a drift
    python scripts/readme_outputs.py --write    # run them and write what they print into the pages
    python scripts/readme_outputs.py --list     # the marked blocks and their commands

The pages are README.md and every ``docs/**/*.md``. A block is marked by an HTML comment
(invisible on the rendered page) on the line before its opening fence::

    ```
    graphdist partition ... --out runs/parts          <- the commands: the fenced block above
    graphdist train-gcn --partition runs/parts ...
    ```
    <!-- output: the commands above -->
    ```
    test_acc 0.9306 (best val ...), ...               <- what they print (checked)
    ```

or ``<!-- output: the $ lines -->`` before a block that holds both: lines starting with ``$ `` are
commands, the others their output. The commands of one block run in turn in one fresh working
directory (a later one may read what an earlier one wrote, e.g. ``runs/parts``), with
``$GRAPHDIST_DATA`` as the caller's (real data in the data homes). Every line of the output block
must be printed by them, in order, after figures that depend on the machine and its load are
masked (milliseconds, seconds, MiB of memory, samples per second): accuracies, losses, rows,
bytes and epochs must match exactly. A block whose real data is not in the data homes is skipped,
saying which file is missing. Blocks with the same commands (an example the README repeats from
a guide) run once and are checked each against that one run.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
MARK = re.compile(r"^<!-- output: (the commands above|the \$ lines) -->$")
VOLATILE = [  # (pattern, stands for): what a machine and its load change, masked on both sides
    (re.compile(r"\d[\d,]*(\.\d+)? ms"), "<t> ms"),
    (re.compile(r"peak mem(ory)? \d[\d,]* MiB"), r"peak mem\1 <m> MiB"),
    (re.compile(r"\d[\d,]* samples/s"), "<r> samples/s"),
    (re.compile(r"^(load time|time)(\s+)\d[\d.]* s$"), r"\1\2<t> s"),
]


@dataclass
class Block:
    line: int
    """1-based line of the output block's opening fence in the README"""
    commands: list[str]
    """shell words of each command, joined across backslash continuations"""
    expected: list[str]
    """the block's lines (without the `$ ` command lines)"""
    start: int = 0
    end: int = 0
    """0-based indices of the first and one past the last line of the block's body"""
    data: list[str] = field(default_factory=list)
    """relative data paths the commands read (``KIND:PATH`` specs), looked up in the data homes"""
    doc: Path = README
    """the page the block is on"""

    @property
    def where(self) -> str:
        """``page:line`` relative to the repository, for messages and test ids"""
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def _fences(lines: list[str]) -> list[tuple[int, int]]:
    """``(opening fence, closing fence)`` indices of every fenced block."""
    out, open_at = [], None
    for i, ln in enumerate(lines):
        if ln.startswith("```"):
            if open_at is None:
                open_at = i
            else:
                out.append((open_at, i))
                open_at = None
    return out


def _commands(text_lines: list[str]) -> list[str]:
    joined, cur = [], ""
    for ln in text_lines:
        cur += ln.rstrip("\\").strip() + " " if ln.rstrip().endswith("\\") else ln.strip()
        if not ln.rstrip().endswith("\\"):
            if cur.strip():
                joined.append(cur.strip())
            cur = ""
    return [c for c in joined if c.startswith("graphdist ")]


def pages() -> list[Path]:
    """README.md and every Markdown page of the docs site, in a fixed order."""
    return [README, *sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)]


def blocks(lines: list[str], doc: Path = README) -> list[Block]:
    fences = _fences(lines)
    out = []
    for n, (a, b) in enumerate(fences):
        m = MARK.match(lines[a - 1]) if a else None
        if not m:
            continue
        body = lines[a + 1:b]
        if m.group(1) == "the $ lines":
            cmds = _commands([ln[2:] for ln in body if ln.startswith("$ ")])
            expected = [ln for ln in body if not ln.startswith("$ ")]
        else:
            pa, pb = fences[n - 1]
            cmds, expected = _commands(lines[pa + 1:pb]), body
        if not cmds:
            raise SystemExit(f"readme_outputs: {doc.relative_to(REPO)}:{a + 1}: a marked block without commands above it")
        data = [w.split(":", 1)[1].split(",")[0] for c in cmds for w in shlex.split(c)
                if re.match(r"^(planetoid|edgelist|ratings|criteo|lightgcn|ogb|npz):[^/]", w)]
        out.append(Block(a + 1, cmds, expected, a + 1, b, data, doc))
    return out


def all_blocks() -> list[Block]:
    """The marked blocks of every page (README.md first)."""
    return [b for p in pages() for b in blocks(p.read_text().splitlines(), p)]


def by_commands(found: list[Block]) -> dict[tuple[str, ...], list[Block]]:
    """The blocks grouped by their commands, in order of first appearance: each group runs once."""
    out: dict[tuple[str, ...], list[Block]] = {}
    for b in found:
        out.setdefault(tuple(b.commands), []).append(b)
    return out


def mask(line: str) -> str:
    for pat, rep in VOLATILE:
        line = pat.sub(rep, line)
    return line.rstrip()


def missing_data(block: Block) -> list[str]:
    """The block's data paths found in no data home (they are relative to one)."""
    sys.path.insert(0, str(REPO))
    from graphdist.specs import data_homes
    return [d for d in block.data if not any((h / d).exists() for h in data_homes())]


def run(block: Block, timeout: float = 600) -> list[str]:
    """The lines the block's commands print (stdout and stderr, in turn), run in a fresh folder."""
    got = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with tempfile.TemporaryDirectory(prefix="graphdist-readme-") as cwd:
        for cmd in block.commands:
            r = subprocess.run([sys.executable, "-m", "graphdist", *shlex.split(cmd)[1:]],
                               cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
            got += r.stdout.splitlines() + r.stderr.splitlines()
    return got


def drift(block: Block, got: list[str]) -> list[str]:
    """Lines of the block that the commands did not print (in order), masked; empty when none."""
    want = [mask(ln) for ln in block.expected if ln.strip()]
    have = [mask(ln) for ln in got]
    missing, i = [], 0
    for w in want:
        j = next((k for k in range(i, len(have)) if have[k] == w), None)
        if j is None:
            missing.append(w)
        else:
            i = j + 1
    return missing


def rewrite(lines: list[str], block: Block, got: list[str]) -> None:
    """Put into the block the printed lines that correspond to its lines (same masked shape: the
    first printed line whose words before the first figure match), keeping the `$ ` lines."""
    def key(s: str) -> str:
        return re.split(r"\d", mask(s), maxsplit=1)[0]
    body, i, new = lines[block.start:block.end], 0, []
    for ln in body:
        if ln.startswith("$ ") or not ln.strip():
            new.append(ln)
            continue
        j = next((k for k in range(i, len(got)) if key(got[k]) == key(ln)), None)
        new.append(got[j] if j is not None else ln)
        i = j + 1 if j is not None else i
    lines[block.start:block.end] = new


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write what the commands print into the pages")
    ap.add_argument("--list", action="store_true", help="list the marked blocks and their commands")
    args = ap.parse_args(argv)
    found, bad = all_blocks(), 0
    if args.list:
        for b in found:
            print(f"{b.where}: " + " && ".join(b.commands))
        return 0
    printed: dict[tuple[str, ...], list[str]] = {}
    for cmds, group in by_commands(found).items():
        miss = missing_data(group[0])
        if miss:
            print(f"{group[0].where}: skipped, not in the data homes: {', '.join(miss)}")
            continue
        printed[cmds] = run(group[0])
        for b in group:
            if not args.write:
                d = drift(b, printed[cmds])
                bad += bool(d)
                print(f"{b.where}: " + ("ok" if not d else "drifted; not printed now:\n  " + "\n  ".join(d)))
    if args.write:
        for page in pages():
            lines = page.read_text().splitlines()
            mine = [b for b in blocks(lines, page) if tuple(b.commands) in printed]
            for b in reversed(mine):  # bottom up: a rewritten block may change the lines below it
                rewrite(lines, b, printed[tuple(b.commands)])
                print(f"{b.where}: written")
            if mine:
                page.write_text("\n".join(lines) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
