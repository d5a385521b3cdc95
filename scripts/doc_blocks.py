"""The commands and output blocks of README.md and the docs pages, as ``scripts/readme_outputs.py``
runs and checks them (its docstring has the marks' grammar)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
MARK = re.compile(r"^<!-- output: (the commands above|the first command above|the last command above|the \$ lines"
                  r"|not checked: (.+?))(?:; exit (\d+))?(?:; after (\S+))? -->$")
PROGRAMS = ("graphdist", "torchrun", "python", "python3", "bash", "pip", "mkdocs", "mkdir", "head", "printf",
            "git", "cd", "export", "tensorboard", "echo", "(ulimit", "GRAPHDIST_GPU=1")
NOT_RUN = {  # commands (by how they begin) that no check runs, and why
    "bash scripts/install.sh": "installs packages into the environment the check runs in",
    "GRAPHDIST_GPU=1 bash scripts/install.sh": "needs a CUDA torch (tests/test_readme_paths.py checks its one-line "
                                               "refusal without one)",
    "python3 -m pytest": "the test suite itself",
    "pip install": "installs packages into the environment the check runs in",
    "mkdocs serve": "a server that runs until stopped",
    "mkdocs build --strict": "tests/test_docs.py builds the site so",
    "git clone": "reaches the network",
}
NOT_COMMANDS = {"graphdist train-gcn --model"}
"""code spans of the README that name a flag in prose (a span of one or two words names a program
or a command: `torchrun`, `graphdist plan`)"""
PLACEHOLDER = re.compile(r"(?<![A-Za-z])[A-Z][A-Z_]*(?![a-z])")
SPEC = re.compile(r"(?:^|\s)(?:planetoid|edgelist|ratings|criteo|lightgcn|ogb|npz):([^/\s]\S*)")


@dataclass
class Block:
    line: int
    """1-based line of the output block's opening fence (of the commands, for a README command)"""
    commands: list[str]
    """each command as a shell line, joined across backslash continuations"""
    expected: list[list[str]] | None = None
    """per segment, the lines the block shows (``None``: the commands must only exit 0)"""
    segments: list[tuple[int, int]] = field(default_factory=list)
    """per segment, the commands ``[a, b)`` whose output it shows"""
    prefixes: list[list[str]] = field(default_factory=list)
    """per segment, the block's ``$ `` lines before its output (kept by --write)"""
    start: int = 0
    end: int = 0
    """0-based indices of the first and one past the last line of the block's body"""
    exit: int = 0
    """the last command's exit code"""
    why: str = ""
    """why an output block is not checked (then it runs nothing)"""
    doc: Path = README

    @property
    def where(self) -> str:
        """``page:line`` relative to the repository, for messages and test ids"""
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    @property
    def data(self) -> list[str]:
        """relative data paths the commands read (``KIND:PATH`` specs), looked up in the data homes;
        not those an earlier command of the block names (it writes them: ``printf ... > bad.txt``)"""
        out = []
        for k, c in enumerate(self.commands):
            paths = [m.group(1).split(",")[0] for m in SPEC.finditer(c)]
            out += [d for d in paths if not any(d in e for e in self.commands[:k])]
        return out


def pages() -> list[Path]:
    """README.md and every Markdown page of the docs site, in a fixed order; not the benchmark
    pages (``benchmarks-details.md``, ``benchmarks-history.md``), which, as BENCHMARKS.md, record
    what a measurement printed on its date and machine, with the command that made it."""
    skip = {"benchmarks-details.md", "benchmarks-history.md"}
    return [README, *sorted(p for p in DOCS.rglob("*.md")
                            if "hooks" not in p.relative_to(DOCS).parts and p.name not in skip)]


def fences(lines: list[str]) -> list[tuple[int, int]]:
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


def join_lines(text_lines: list[str]) -> list[str]:
    """Shell lines joined across backslash continuations; blank and comment lines dropped."""
    joined, cur = [], ""
    for ln in text_lines:
        cont = ln.rstrip().endswith("\\")
        cur += (ln.rstrip()[:-1].strip() + " ") if cont else ln.strip()
        if not cont:
            if cur.strip() and not cur.startswith("#"):
                joined.append(cur.strip())
            cur = ""
    return joined


def runnable(cmd: str) -> str | None:
    """The part of a command line a check runs: its ``&&`` steps not in NOT_RUN (None: none)."""
    keep = [s.strip() for s in cmd.split(" && ") if not any(s.strip().startswith(p) for p in NOT_RUN)]
    return " && ".join(keep) or None


def is_commands(body: list[str]) -> bool:
    """A fenced block of shell commands: every line a command, a comment or a continuation."""
    prev = ""
    for ln in body:
        s = ln.strip()
        if s and not (s.startswith("#") or prev.endswith("\\") or s.split()[0] in PROGRAMS):
            return False
        prev = ln.rstrip()
    return bool(body)


def _commands(lines: list[str], a: int, b: int) -> list[str]:
    return [c for c in map(runnable, join_lines(lines[a + 1:b])) if c]


def blocks(lines: list[str], doc: Path = README) -> list[Block]:
    """The marked output blocks of a page."""
    fs, out = fences(lines), []
    for n, (a, b) in enumerate(fs):
        m = MARK.match(lines[a - 1]) if a else None
        if not m:
            continue
        body, what, after = lines[a + 1:b], m.group(1), m.group(4)
        blk = Block(a + 1, [], start=a + 1, end=b, exit=int(m.group(3) or 0), why=m.group(2) or "", doc=doc)
        if blk.why:
            out.append(blk)
            continue
        if what == "the $ lines":
            _dollar(blk, body)
        else:
            if n == 0:
                raise SystemExit(f"readme_outputs: {blk.where}: '{what}' without a fenced block of commands above")
            blk.commands = _commands(lines, *fs[n - 1])
            first = {"the commands above": 0, "the first command above": 0,
                     "the last command above": len(blk.commands) - 1}[what]
            stop = 1 if what == "the first command above" else len(blk.commands)
            blk.expected, blk.segments, blk.prefixes = [body], [(first, stop)], [[]]
        if after:
            _after(blk, after, lines, fs[:n - 1])
        if not blk.commands:
            raise SystemExit(f"readme_outputs: {blk.where}: a marked block without commands")
        out.append(blk)
    return out


def _after(blk: Block, path: str, lines: list[str], earlier: list[tuple[int, int]]) -> None:
    """Run first the commands of the last earlier block of the page that writes ``--out PATH``."""
    pre = next((_commands(lines, a, b) for a, b in reversed(earlier)
                if any(f"--out {path}" in c for c in _commands(lines, a, b))), None)
    if pre is None:
        raise SystemExit(f"readme_outputs: {blk.where}: 'after {path}': no block above writes --out {path}")
    blk.commands = pre + blk.commands
    blk.segments = [(a + len(pre), b + len(pre)) for a, b in blk.segments]


def _dollar(blk: Block, body: list[str]) -> None:
    """Split a `$ lines` block into one segment per command."""
    blk.expected, blk.segments, blk.prefixes = [], [], []
    i = 0
    while i < len(body):
        if not body[i].startswith("$ "):
            raise SystemExit(f"readme_outputs: {blk.where}: output before the first `$ ` line")
        pre = [body[i]]
        while pre[-1].rstrip().endswith("\\") and i + 1 < len(body):
            i += 1
            pre.append(body[i])
        i += 1
        got = []
        while i < len(body) and not body[i].startswith("$ "):
            got.append(body[i])
            i += 1
        cmd = runnable(join_lines([pre[0][2:], *pre[1:]])[0])
        if cmd is None:
            raise SystemExit(f"readme_outputs: {blk.where}: `{pre[0]}` is not run: mark the block not checked")
        blk.commands.append(cmd)
        blk.expected.append(got)
        blk.segments.append((len(blk.commands) - 1, len(blk.commands)))
        blk.prefixes.append(pre)


def unmarked_outputs(lines: list[str]) -> list[int]:
    """1-based lines of the fenced blocks that are neither code, nor commands, nor marked."""
    return [a + 1 for a, b in fences(lines) if lines[a] == "```" and not (a and MARK.match(lines[a - 1]))
            and not is_commands(lines[a + 1:b])]


def placeholder(cmd: str) -> bool:
    """A pattern, not a command: a word in capitals stands for what to put there (``CMD``, ``R.json``)."""
    return any(PLACEHOLDER.search(w) for w in cmd.split() if not re.match(r"^[A-Z_]+=", w))


def inline_commands(text: str) -> list[tuple[int, str]]:
    """``(line, command)`` of the commands in code spans outside fenced blocks (a span may wrap)."""
    keep, inside = [], False
    for ln in text.splitlines():
        inside ^= ln.startswith("```")
        keep.append("" if inside or ln.startswith("```") else ln)
    text = "\n".join(keep)
    spans = [(text.count("\n", 0, m.start()) + 1, " ".join(m.group(1).split()))
             for m in re.finditer(r"`([^`]+)`", text)]
    return [(n, s) for n, s in spans if s.split()[0] in PROGRAMS and len(s.split()) > 2 and s not in NOT_COMMANDS
            and not placeholder(s)]


def readme_commands() -> list[Block]:
    """Every command of the README, as a block whose commands must exit 0: the fenced command
    blocks (an output block's commands are checked with it too) and the commands in code spans."""
    lines = README.read_text().splitlines()
    out = [Block(a + 1, cmds, doc=README) for a, b in fences(lines)
           if lines[a] in ("```", "```bash") and is_commands(lines[a + 1:b]) and (cmds := _commands(lines, a, b))]
    seen = {tuple(b.commands) for b in out}
    for n, s in inline_commands("\n".join(lines)):
        if runnable(s) and (runnable(s),) not in seen:
            seen.add((runnable(s),))
            out.append(Block(n, [runnable(s)], doc=README))
    return out


def not_run() -> list[tuple[str, str]]:
    """``(command, why)`` for every command of the README that no check runs."""
    lines = README.read_text().splitlines()
    cmds = [c for a, b in fences(lines) if is_commands(lines[a + 1:b]) for c in join_lines(lines[a + 1:b])]
    cmds += [s for _, s in inline_commands("\n".join(lines))]
    out = {}
    for s in (s.strip() for c in cmds for s in c.split(" && ")):
        for p in sorted((p for p in NOT_RUN if s.startswith(p)), key=len)[-1:]:  # the longest that fits
            out.setdefault(s, NOT_RUN[p])
    return list(out.items())


def all_blocks() -> list[Block]:
    """The marked blocks of every page (README.md first), then the README's commands."""
    return [b for p in pages() for b in blocks(p.read_text().splitlines(), p)] + readme_commands()


def by_commands(found: list[Block]) -> dict[tuple[str, ...], list[Block]]:
    """The checked blocks grouped by the commands that run for them, in order of first
    appearance: each group runs once; a block whose commands begin a longer group's joins it."""
    keys = list(dict.fromkeys(tuple(b.commands) for b in found if not b.why))
    runs = [k for k in keys if not any(o != k and o[:len(k)] == k for o in keys)]
    out: dict[tuple[str, ...], list[Block]] = {}
    for b in found:
        if not b.why:
            out.setdefault(next(r for r in runs if r[:len(b.commands)] == tuple(b.commands)), []).append(b)
    return out
