"""The benchmark scripts and the pages that quote them: every script parses its arguments
(``build_parser()``, as ``--help`` does), every ``python benchmarks/X.py ...`` command that
BENCHMARKS.md quotes names a script that exists and parses with that script's parser, the scripts
have no undefined names (pyflakes), and the shared harness (``benchmarks/harness.py``) times,
tabulates and writes what its docstrings say. Nothing here runs a benchmark."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

BENCH = REPO / "benchmarks"
if str(BENCH) not in sys.path:  # the scripts' `import harness`, as `python benchmarks/X.py` finds it
    sys.path.insert(0, str(BENCH))
import harness  # noqa: E402

SCRIPTS = sorted(p for p in [*BENCH.glob("*.py"), *(BENCH / "archive").glob("*.py")] if p.name != "harness.py")
PAGES = [REPO / "BENCHMARKS.md", REPO / "docs" / "benchmarks-history.md"]


def _module(path: Path):
    name = "bench_" + "_".join(path.relative_to(BENCH).with_suffix("").parts)
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # (dataclasses look their module up)
        spec.loader.exec_module(mod)
    return sys.modules[name]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(BENCH)))
def test_every_script_builds_its_parser(path):
    """Importing a script runs nothing heavy, and its parser is the harness's (description = the
    module docstring, so ``--help`` shows the usage the docstring gives)."""
    mod = _module(path)
    p = mod.build_parser()
    assert mod.__doc__ and p.description == mod.__doc__, path
    assert p.format_help().startswith("usage:"), path


def _commands(text: str) -> list[str]:
    """Every ``python benchmarks/...py ...`` command in the page's code blocks and inline code,
    line continuations joined."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    inline = re.findall(r"`([^`\n]*python[^`\n]*benchmarks/[^`\n]*)`", re.sub(r"^```.*?^```", "", text,
                                                                             flags=re.S | re.M))
    lines = [ln for b in blocks for ln in b.replace("\\\n", " ").splitlines()] + inline
    return [ln for ln in lines if re.search(r"\bbenchmarks/\S+\.py", ln)]


def _invocations(line: str) -> list[tuple[str, list[str]]]:
    """``(script, args)`` of each ``python benchmarks/X.py ARGS`` in a shell line (environment
    assignments, ``nice``, ``sudo``, ``/usr/bin/time``, ``for ...; do ...; done`` around it)."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lex.whitespace_split, lex.commenters = True, "#"
    words, out = list(lex), []
    for i, w in enumerate(words):
        if re.fullmatch(r"benchmarks/\S+\.py", w) and i and words[i - 1].startswith("python"):
            args = []
            for a in words[i + 1:]:
                if a in (";", "&&", "||", "|", "done"):
                    break
                args.append(a)
            out.append((w, args))
    return out


def test_the_pages_quote_commands():
    assert len(_invocations("OMP_NUM_THREADS=1 nice -n 10 python benchmarks/a.py --x 1 'b c' # no")) == 1
    assert _invocations("for h in a b; do X=1 python benchmarks/a.py --h $h; done")[0] == (
        "benchmarks/a.py", ["--h", "$h"])
    assert len(_commands((REPO / "BENCHMARKS.md").read_text())) > 20


@pytest.mark.parametrize("page", [PAGES[0], REPO / "docs" / "benchmarks-details.md"], ids=lambda p: p.name)
def test_every_quoted_command_parses(page):
    """What a reader copies from BENCHMARKS.md runs: the script is there and takes those flags."""
    bad = []
    for line in _commands(page.read_text()):
        for script, args in _invocations(line):
            path = REPO / script
            if not path.exists():
                bad.append(f"{script}: no such script ({line.strip()[:80]})")
                continue
            try:
                _module(path).build_parser().parse_args(args)
            except SystemExit:
                bad.append(f"{script}: its parser refuses {' '.join(args)!r}")
    assert not bad, "\n".join(bad)


FILL = {"SPEC": "sbm:", "K": "2", "N": "2", "L": "2", "H": "16", "R": "1", "G": "1", "RATE": "1", "C": "0.1", "T": "1000",
        "B": "8", "DIR": "d", "FILE": "f", "MODE": "mvc", "M": "metis", "CK": "ck", "OUT": "o", "R.json": "r.json",
        "HOST:PORT": "h:1"}
"""Placeholders the pages write in commands, and a value of the right kind for each."""


def _graphdist_commands(text: str) -> list[list[str]]:
    """The arguments of every ``graphdist ...`` command in the page's code blocks (``$VAR`` filled
    from a ``VAR="..."`` line of the same block) and in its inline code (4 words or more)."""
    out = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        env = {m[0]: m[1] or m[2] for m in re.findall(r'^(?:export )?([A-Z]\w*)=(?:"([^"]*)"|(\S+))$', block, flags=re.M)}
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r'"?\$([A-Z]\w*)"?', lambda m: env.get(m.group(1), m.group(0)), line)
            out += _after("graphdist", line.removeprefix("$ "))
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for span in re.findall(r"`(graphdist [^`\n]+)`", prose):
        if len(span.split()) >= 4:
            out += _after("graphdist", span)
    return [[FILL.get(w, w) for w in args] for args in out  # a synopsis ([--flag], <flags>, ...) is no command
            if not any(w == "..." or w.startswith(("[", "<")) for w in args)]


def _after(program: str, line: str) -> list[list[str]]:
    """The arguments after each ``program`` word of a shell line (none for a line that is not
    shell: output with an apostrophe, say)."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lex.whitespace_split, lex.commenters = True, "#"
    try:
        words, out = list(lex), []
    except ValueError:
        return []
    for i, w in enumerate(words):
        if w == program and (i == 0 or not words[i - 1].startswith("-")):
            args = []
            for a in words[i + 1:]:
                if a in (";", "&&", "||", "|", ")", "done"):
                    break
                args.append(a)
            out.append(args)
    return out


@pytest.mark.parametrize("page", [REPO / "BENCHMARKS.md", REPO / "docs" / "benchmarks-details.md"],
                         ids=lambda p: p.name)
def test_every_graphdist_command_of_the_benchmark_pages_parses(page):
    """The ``graphdist`` commands behind the current figures still parse with the CLI (the other
    docs pages' commands are tests/test_cli_help.py's)."""
    from graphdist.cli import build_parser
    cmds = _graphdist_commands(page.read_text())
    assert len(cmds) > 5, page
    bad, parser = [], build_parser()
    for args in cmds:
        try:
            parser.parse_args(args)
        except SystemExit as e:
            if e.code:
                bad.append("graphdist " + " ".join(args))
    assert not bad, "\n".join(bad)


def test_the_history_names_scripts_that_exist():
    """Superseded figures keep their commands; the scripts they name are still here (closed
    investigations' scripts under benchmarks/archive/)."""
    for page in PAGES:
        for script in set(re.findall(r"\bbenchmarks/[\w/]+\.py\b", page.read_text())):
            assert (REPO / script).exists(), f"{page.name}: {script}"


def _slug(heading: str) -> str:
    """The anchor of a heading, as GitHub and the docs site (pymdownx's slugify) make it."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "")).strip().lower().replace(" ", "-")


def _sections(text: str) -> dict[str, str]:
    """Each heading's anchor and its text up to the next heading of the same or a higher level."""
    heads = [(m.start(), len(m.group(1)), _slug(m.group(2))) for m in re.finditer(r"^(#{1,6}) (.+)$", text, re.M)]
    out = {}
    for i, (at, level, slug) in enumerate(heads):
        end = next((a for a, lv, _ in heads[i + 1:] if lv <= level), len(text))
        out[slug] = text[at:end]
    return out


def test_slug_by_hand():
    assert _slug("Accuracy: Cora with Kipf & Welling's settings") == "accuracy-cora-with-kipf--wellings-settings"
    assert _slug("`--halo auto` against the fixed choices (mode and widths per layer)") == (
        "--halo-auto-against-the-fixed-choices-mode-and-widths-per-layer")
    assert _slug("Scale: 1M-node SBM, k=4 vs one process") == "scale-1m-node-sbm-k4-vs-one-process"


def test_benchmarks_md_is_a_page_a_reader_can_use():
    """Issue 46: at most ~900 lines, the summary first, every summary row linking to a section of
    this page that holds the command behind its figure."""
    text = (REPO / "BENCHMARKS.md").read_text()
    assert len(text.splitlines()) <= 900, f"BENCHMARKS.md has {len(text.splitlines())} lines (at most 900)"
    sections = _sections(text)
    summary = sections["summary"]
    assert list(sections)[:2] == ["benchmarks", "summary"], "the summary comes first"
    rows = [r for r in summary.splitlines() if r.startswith("| ") and not r.startswith(("| claim", "| ---"))]
    assert len(rows) > 20, len(rows)
    for row in rows:
        anchors = re.findall(r"\]\(#([^)]+)\)", row.rsplit(" | ", 1)[-1])
        assert anchors, f"a summary row without a link to its section: {row[:80]}"
        for a in anchors:
            assert a in sections, f"the summary links to #{a}, which is no heading of BENCHMARKS.md"
            body = sections[a]
            has_command = "```" in body or re.search(r"`(\S+=\S+ )*(python benchmarks/|graphdist )[^`]+`", body)
            assert has_command, f"section #{a} (linked from the summary) quotes no command"


def test_no_undefined_names():
    pyflakes = pytest.importorskip("pyflakes.api")
    from pyflakes.reporter import Reporter

    class Collect(Reporter):
        def __init__(self):
            self.out = []

        def flake(self, m):
            self.out.append(str(m))

        def syntaxError(self, filename, msg, lineno, offset, text):
            self.out.append(f"{filename}:{lineno}: {msg}")

        def unexpectedError(self, filename, msg):
            self.out.append(f"{filename}: {msg}")
    r = Collect()
    for path in [BENCH / "harness.py", *SCRIPTS]:
        pyflakes.checkPath(str(path), r)
    assert not r.out, "\n".join(r.out)


# --- the harness -------------------------------------------------------------------------------

def test_alternate_takes_turns_and_drops_the_warmup():
    calls = []
    t = harness.alternate({"a": lambda r: calls.append(("a", r)), "b": lambda r: calls.append(("b", r)),
                           "c": lambda r: calls.append(("c", r))}, 3, warmup=1, rotate=True,
                          sync=lambda: calls.append("sync"))
    sides = [c for c in calls if c != "sync"]
    # round 0 is the warm-up; round r starts at side r mod 3
    assert sides == [("a", 0), ("b", 0), ("c", 0), ("b", 1), ("c", 1), ("a", 1), ("c", 2), ("a", 2), ("b", 2),
                     ("a", 3), ("b", 3), ("c", 3)]
    assert calls.count("sync") == 2 * len(sides)  # before and after every call
    assert [len(t[k].wall) for k in "abc"] == [3, 3, 3] and [len(t[k].cpu) for k in "abc"] == [3, 3, 3]


def test_alternate_times_each_side():
    t = harness.alternate({"fast": lambda r: None, "slow": lambda r: time.sleep(0.02)}, 3)
    assert min(t["slow"].wall) >= 0.02 > t["fast"].median
    assert t["slow"].cpu_median < 0.02  # sleeping is wall time, not CPU time


def test_ratios_by_hand():
    r = harness.ratios([2.0, 4.0, 9.0], [1.0, 4.0, 3.0])
    assert r["median"] == 4.0 / 3.0 and r["median_of_pairs"] == 2.0  # pairs 2, 1, 3


def test_median_s_counts_the_calls():
    n = []
    assert harness.median_s(lambda: n.append(1), 5, warmup=2) >= 0
    assert len(n) == 7


def test_csv():
    assert harness.csv("1, 2,,4", int) == [1, 2, 4]
    assert harness.csv("") == [] and harness.csv(None) == []
    assert harness.csv("0.1,1", float) == [0.1, 1.0]


def test_table():
    got = harness.table(["k", "method", "rows", "ratio"], [[4, "metis", 24479, 0.7126], [8, "auto", None, 1.5]])
    assert got.splitlines() == ["| k | method | rows | ratio |", "|---:|---|---:|---:|",
                                "| 4 | metis | 24,479 | 0.7126 |", "| 8 | auto |  | 1.5 |"]
    assert harness.table_row(["a", 1234567, 0.5], fmt=lambda v: f"{v:.2f}") == "| a | 1,234,567 | 0.50 |"


def test_write_json_is_atomic_and_optional(tmp_path):
    harness.write_json(None, {"x": 1})  # no --json: nothing
    p = tmp_path / "sub" / "out.json"
    harness.write_json(p, {"x": [1, 2]})
    assert json.loads(p.read_text()) == {"x": [1, 2]}
    assert [f.name for f in p.parent.iterdir()] == ["out.json"]  # no temporary left


def test_child_json_reads_the_last_line_or_the_error(tmp_path):
    ok = harness.child_json(["-c", "print('noise'); print('{\"a\": 3}')"], 60, cwd=tmp_path)
    assert ok == {"a": 3}
    bad = harness.child_json(["-c", "import sys; sys.exit('graphdist: error: no such graph')"], 60, cwd=tmp_path)
    assert bad == {"error": "graphdist: error: no such graph"}
    assert harness.child_json(["-c", "import time; time.sleep(5)"], 0.5, cwd=tmp_path) == {"error": "timeout after 0.5 s"}


def test_time_v_reports_peak_memory_and_exit_code(tmp_path):
    if not Path("/usr/bin/time").exists():
        pytest.skip("no /usr/bin/time")
    r = harness.time_v([sys.executable, "-c", "b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096])"], 60,
                       cwd=tmp_path)
    assert r.rc == 0 and r.peak_rss_kib > 200 << 10  # the 200 MiB it touched, in KiB
    r = harness.time_v([sys.executable, "-c", "import sys; print('graphdist: error: bad', file=sys.stderr); "
                                              "sys.exit(2)"], 60, cwd=tmp_path)
    assert r.rc == 2 and r.error_line() == "graphdist: error: bad"


def test_checkout_env_puts_the_checkout_first(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    e = harness.checkout_env(tmp_path, OMP_NUM_THREADS="1")
    assert e["PYTHONPATH"].split(":") == [str(tmp_path), "/elsewhere"] and e["OMP_NUM_THREADS"] == "1"


def test_alternate_processes_runs_each_side_rounds_plus_warmup_times_and_counts_its_children(tmp_path):
    """Each side's interpreter runs ``warmup + rounds`` times; its CPU includes the children it
    waits for (a grandchild that spins for 0.3 s of CPU shows up in its parent's figure)."""
    log = tmp_path / "ran.txt"
    spin = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass")
    sides = {"a": (["-c", f"open({str(log)!r}, 'a').write('a')"], dict(os.environ)),
             "b": (["-c", f"import subprocess, sys; open({str(log)!r}, 'a').write('b'); "
                          f"subprocess.run([sys.executable, '-c', {spin!r}], check=True)"], dict(os.environ))}
    got = harness.alternate_processes(sides, 2, tmp_path, warmup=1)
    assert sorted(log.read_text()) == list("aaabbb")
    assert set(got) == {"a", "b"} and all(set(v) == {"wall_s", "cpu_s"} for v in got.values())
    assert got["b"]["cpu_s"] >= 0.3 > got["a"]["cpu_s"] - 0.3  # the grandchild's spin is counted
    with pytest.raises(SystemExit, match="exited 3"):
        harness.child_cpu_s(["-c", "import sys; sys.exit(3)"], dict(os.environ), tmp_path)
