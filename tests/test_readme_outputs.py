"""Every output block of README.md and the docs pages (``docs/**/*.md``) is marked, and every marked
one is what its commands print today; every command of the README runs as written on a copy of
the repository as a fresh clone holds it, with the data home as shipped
(``scripts/readme_outputs.py``: its docstring says what is compared and how; ``--write``
rewrites the blocks after a change that moves a figure). The checker itself is tested on
doctored outputs: a changed exit code, a line that appears or disappears, memory 25% off."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import sys

import pytest

from tests.conftest import REPO, SHARED_DATA, once_per_run

_spec = importlib.util.spec_from_file_location("readme_outputs", REPO / "scripts" / "readme_outputs.py")
ro = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("readme_outputs", ro)  # its dataclasses look their module up
_spec.loader.exec_module(ro)
db = sys.modules["doc_blocks"]

BLOCKS = ro.all_blocks()
GROUPS = ro.by_commands(BLOCKS)
LINE = ("test_acc 0.9306 (best val 0.9150 at epoch 26), final loss 0.6668, 13.4 ms/epoch, halo 4,638 rows "
        "= 0.07 MB/epoch (mvc, 32 bit), peak mem 339 MiB/rank, world size 2")
WARN = ("warning: one epoch is only 31 steps (8000 training rows / --batch-size 256); the model will barely "
        "train: use --batch-size 160 or smaller for >= 50 steps per epoch (50 at 160)")


def _block(lines, exit=0, commands=("graphdist a",)):
    return db.Block(1, list(commands), [list(lines)], [(0, len(commands))], [[]], exit=exit)


def _ran(*outputs, rc=0):
    return [ro.Ran(f"graphdist {i}", rc if i == len(outputs) - 1 else 0, list(out)) for i, out in enumerate(outputs)]


def test_a_changed_exit_code_is_a_drift():
    assert ro.drift(_block([LINE]), _ran([LINE])) == []
    d = ro.drift(_block([LINE]), _ran([LINE], rc=1))
    assert len(d) == 1 and d[0].startswith("`graphdist 0` exited 1, the page says 0"), d
    refusal = "graphdist: error: --report /proc/gcn.json: cannot write there (No such file or directory)"
    assert ro.drift(_block([refusal], exit=2), _ran([refusal], rc=2)) == []
    assert "exited 0, the page says 2" in ro.drift(_block([refusal], exit=2), _ran([refusal]))[0]
    # every command of a block exits 0 but the last, whose code the mark may give
    two = _block([LINE], exit=2, commands=("graphdist a", "graphdist b"))
    assert ro.drift(two, [ro.Ran("graphdist a", 1, []), ro.Ran("graphdist b", 2, [LINE])])[0].startswith(
        "`graphdist a` exited 1, the page says 0")
    assert ro.drift(_block([LINE]), [ro.Ran("graphdist a", None, [LINE])])[0].startswith(
        "`graphdist a` was stopped at the timeout")


def test_an_added_or_a_removed_warning_line_is_a_drift():
    page = [WARN, "auc 0.7746  logloss 0.4850"]
    assert ro.drift(_block(page), _ran(page)) == []
    assert ro.drift(_block(page), _ran(["auc 0.7746  logloss 0.4850"])) == [f"- {WARN}   (not printed)"]
    assert ro.drift(_block(page), _ran(["warning: torch.foo is deprecated", *page])) == [
        "+ warning: torch.foo is deprecated   (printed, not in the block)"]
    # `...` stands for lines left out, never for a warning or an error
    elided = ["...", "auc 0.7746  logloss 0.4850"]
    assert ro.drift(_block(elided), _ran(["table", "t_0 15", "auc 0.7746  logloss 0.4850"])) == []
    assert ro.drift(_block(elided), _ran(["t_0 15", WARN, "auc 0.7746  logloss 0.4850"])) == [
        f"+ {WARN}   (printed, not in the block)"]
    assert ro.drift(_block(elided), _ran(["Traceback (most recent call last):", "auc 0.7746  logloss 0.4850"]))
    # any other line too, which the old subsequence check let through
    assert ro.drift(_block([LINE]), _ran(["noise", LINE])) == ["+ noise   (printed, not in the block)"]


def test_peak_memory_is_compared_within_the_tolerance_and_times_are_not():
    assert ro.drift(_block([LINE]), _ran([LINE.replace("13.4 ms", "61.0 ms").replace("339 MiB", "362 MiB")])) == []
    for off in ("424 MiB", "254 MiB"):  # 25% above and below
        got = LINE.replace("339 MiB", off)
        assert ro.drift(_block([LINE]), _ran([got])) == [f"- {LINE}   (not printed)",
                                                        f"+ {got}   (printed, not in the block)"], off
    refusal = ("graphdist: error: train-rec needs about 2.08 GiB per rank but a rank may hold only 1.42 GiB "
               "(its process memory limit, ulimit -d / -v)")
    assert ro.drift(_block([refusal]), _ran([refusal.replace("2.08", "2.12").replace("1.42", "1.51")])) == []
    assert ro.drift(_block([refusal]), _ran([refusal.replace("2.08", "2.70")]))
    assert ro.MEMORY_TOLERANCE < 0.25


def test_every_other_figure_must_match():
    for a, b in [("4,638 rows", "4,640 rows"), ("0.9306", "0.9307"), ("epoch 26", "epoch 27"), ("0.07 MB", "0.08 MB")]:
        assert ro.drift(_block([LINE]), _ran([LINE.replace(a, b)])), (a, b)
    plan = ["  halo  bits  bytes/epoch  epoch s (est.)", "  mvc     32       0.2 MB        0.014 <- --halo/--halo-bits",
            "peak 365.1 MiB per rank fits in 11.8 GiB"]
    moved = [plan[0], plan[1].replace("0.014", "0.031"), plan[2].replace("11.8 GiB", "3.1 GiB")]
    assert ro.drift(_block(plan), _ran(moved)) == []  # an estimate from timings, the machine's free memory
    assert ro.drift(_block(plan), _ran([plan[0], plan[1].replace("0.2 MB", "0.3 MB"), plan[2]]))
    assert ro.drift(_block(plan), _ran([*plan[:2], plan[2].replace("365.1", "300.1")]))


def test_lines_may_come_in_another_order():
    """Ranks print concurrently, and stderr is read after stdout."""
    page = [WARN, "table", "auc 0.7746"]
    assert ro.drift(_block(page), _ran(["table", "auc 0.7746", WARN])) == []


def test_progress_bars_are_dropped_from_stderr():
    err = ("train-gcn:   0%|          | 0/30 [00:00<?, ?epoch/s]\rtrain-gcn: 100%|##########| 30/30 "
           "[00:00<00:00, 32.88epoch/s, loss=0.6668]\n[rank 0] halo per layer: conv1\nwarning: x\n")
    assert ro._no_bars(err) == ["[rank 0] halo per layer: conv1", "warning: x", ""]


def test_the_marks_and_their_commands_are_read_as_written():
    lines = ["```", "graphdist a \\", "  --b 1", "graphdist c", "```", "prose", "<!-- output: the last command above -->",
             "```", "y 1", "```", "<!-- output: the $ lines; exit 2 -->", "```", "$ printf 'x' > bad.txt",
             "$ graphdist d \\", "    --e 2", "graphdist: error: d", "```", "```", "graphdist p --out runs/p4", "```",
             "```", "graphdist q runs/p4", "graphdist r", "```", "<!-- output: the first command above; after runs/p4 -->",
             "```", "q 1", "```", "```", "x", "```", "<!-- output: not checked: needs a Ctrl-C -->", "```", "^C", "```",
             "```", "bash scripts/install.sh && graphdist demo", "```", "<!-- output: the commands above -->", "```",
             "...", "== demo summary ==", "```"]
    one, two, three, four, five = db.blocks(lines)
    assert (one.commands, one.expected, one.segments) == (["graphdist a --b 1", "graphdist c"], [["y 1"]], [(1, 2)])
    assert (two.commands, two.expected, two.exit) == (["printf 'x' > bad.txt", "graphdist d --e 2"],
                                                     [[], ["graphdist: error: d"]], 2)
    assert two.prefixes[1] == ["$ graphdist d \\", "    --e 2"]
    assert (three.commands, three.segments) == (["graphdist p --out runs/p4", "graphdist q runs/p4", "graphdist r"],
                                                [(1, 2)])
    assert (four.why, four.commands) == ("needs a Ctrl-C", [])
    assert five.commands == ["graphdist demo"]  # install.sh is not run: it installs into this environment
    assert db.unmarked_outputs(lines) == [29]  # the block `x` is neither commands nor marked


def test_every_output_block_of_every_page_is_marked_and_every_unchecked_one_says_why():
    for page in db.pages():
        assert db.unmarked_outputs(page.read_text().splitlines()) == [], (
            f"{page.relative_to(REPO)}: an output block without `<!-- output: ... -->` (or `not checked: WHY`)")
    unchecked = [b for b in BLOCKS if b.why]
    assert all(len(b.why.split()) >= 3 for b in unchecked), [(b.where, b.why) for b in unchecked]
    where = {b.doc.relative_to(REPO).as_posix() for b in BLOCKS if b.expected}
    assert {"README.md", "docs/install.md", "docs/guides/gcn.md", "docs/guides/dlrm.md",
            "docs/guides/recommender.md"} <= where, where


def test_every_readme_command_runs_with_the_data_home_as_shipped():
    """The README's commands (its fenced blocks and code spans) are all run by the groups below
    but those that install or start the suite, each with its reason; none needs data the
    repository does not ship (``datasets/``: Cora), so all run after the two set-up commands."""
    readme = [b for b in BLOCKS if b.doc == db.README]
    cmds = {c for b in readme for c in b.commands}
    for c in ("graphdist demo", "graphdist data info planetoid:planetoid/Cora",
              "torchrun --standalone --nproc-per-node 2 examples/gat_cora.py planetoid:planetoid/Cora"):
        assert c in cmds, c
    assert all(b in g for b in readme if not b.why for g in [sum(GROUPS.values(), [])])
    assert {c for c, _ in db.not_run()} == {"bash scripts/install.sh", "bash scripts/install.sh --test",
                                             "python3 -m pytest -q", "GRAPHDIST_GPU=1 bash scripts/install.sh",
                                             "pip install -e .", "mkdocs build --strict"}
    for b in readme:
        assert ro.missing_data(b, [REPO / "datasets"]) == [], (b.where, b.commands)


def test_the_readme_says_how_to_install_mkdocs():
    """``mkdocs build --strict`` (Read on) needs the test extras, which the plain install lacks."""
    text = db.README.read_text()
    read_on = text[text.index("## Read on"):]
    assert "mkdocs build" in read_on and "bash scripts/install.sh --test" in read_on
    assert "mkdocs==" in (REPO / "pyproject.toml").read_text().split("test = [")[1].split("]")[0]
    assert '[ "${1:-}" = "--test" ] && extras="[test]"' in (REPO / "scripts" / "install.sh").read_text()


def _write_pages(tmp_path, monkeypatch, names, lines):
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(db, "REPO", tmp_path)
    monkeypatch.setattr(db, "README", tmp_path / "README.md")
    monkeypatch.setattr(db, "DOCS", tmp_path / "docs")


def test_repeated_blocks_are_grouped_and_pages_are_all_scanned(tmp_path, monkeypatch):
    lines = ["```", "graphdist a", "```", "<!-- output: the commands above -->", "```", "x 1", "```"]
    _write_pages(tmp_path, monkeypatch, ("README.md", "docs/guides/g.md", "docs/hooks/skip.md"), lines)
    found = db.all_blocks()
    assert [b.where for b in found] == ["README.md:5", "docs/guides/g.md:5", "README.md:1"]
    assert list(db.by_commands(found)) == [("graphdist a",)]
    # a block whose commands begin a longer group's is checked against that run
    (tmp_path / "docs/guides/g.md").write_text("\n".join(["```", "graphdist a", "graphdist b", "```"] + lines[3:]))
    assert list(db.by_commands(db.all_blocks())) == [("graphdist a", "graphdist b")]


def test_write_runs_a_repeated_block_once_and_rewrites_it_on_every_page(tmp_path, monkeypatch):
    lines = ["```", "graphdist a", "```", "<!-- output: the commands above -->", "```", "rows 1, loss 0.5", "```"]
    _write_pages(tmp_path, monkeypatch, ("README.md", "docs/guides/g.md"), lines)
    calls = []
    monkeypatch.setattr(ro, "run_in_checkout", lambda block, folder, timeout=600: calls.append(block.commands) or [
        ro.Ran("graphdist a", 0, ["rows 2, loss 0.25", "peak mem 100 MiB"])])
    assert ro.main([]) == 1  # drifted on both pages
    assert ro.main(["--write"]) == 0 and ro.main([]) == 0
    assert calls == [["graphdist a"]] * 3  # once per run of the script, not once per page
    for name in ("README.md", "docs/guides/g.md"):
        assert (tmp_path / name).read_text().splitlines()[5:7] == ["rows 2, loss 0.25", "peak mem 100 MiB"]
    # a block that has not drifted stays as the page has it (memory within the tolerance, times)
    monkeypatch.setattr(ro, "run_in_checkout", lambda block, folder, timeout=600: [
        ro.Ran("graphdist a", 0, ["rows 2, loss 0.25", "peak mem 110 MiB"])])
    assert ro.main(["--write"]) == 0
    assert (tmp_path / "README.md").read_text().splitlines()[5:7] == ["rows 2, loss 0.25", "peak mem 100 MiB"]
    # one that has is one run's lines
    monkeypatch.setattr(ro, "run_in_checkout", lambda block, folder, timeout=600: [
        ro.Ran("graphdist a", 0, ["rows 2, loss 0.25", "peak mem 110 MiB", "warning: new"])])
    assert ro.main(["--write"]) == 0
    assert (tmp_path / "README.md").read_text().splitlines()[5:8] == ["rows 2, loss 0.25", "peak mem 110 MiB",
                                                                      "warning: new"]


def test_write_keeps_the_dollar_lines_and_the_elisions_and_puts_a_new_line_in_its_place():
    lines = ["<!-- output: the $ lines -->", "```", "$ graphdist a \\", "    --b 1", "warning: old", "...",
             "auc 0.81  peak mem 100 MiB", "```"]
    (block,) = db.blocks(lines)
    printed = ["table", "t_0 15", "t_1 6", "auc 0.81  peak mem 104 MiB", "report: r.json", "warning: new"]
    ro.rewrite(lines, block, [ro.Ran("graphdist a --b 1", 0, printed)])
    assert lines == ["<!-- output: the $ lines -->", "```", "$ graphdist a \\", "    --b 1", "...",
                     "auc 0.81  peak mem 104 MiB", "warning: new", "```"]
    (block,) = db.blocks(lines)
    assert ro.drift(block, [ro.Ran("graphdist a --b 1", 0, printed)]) == []


def test_write_puts_a_line_with_new_figures_in_the_place_of_the_old_one():
    lines = ["<!-- output: the $ lines -->", "```", "$ graphdist plan", "rank   owned  activations", "   0   1,368  16.1 MiB",
             "", "...", "peak 465.1 MiB per rank", "```"]
    (block,) = db.blocks(lines)
    printed = ["rank   owned  activations", "   0   1,368   8.9 MiB", "halo 0.3 MB", "peak 357.9 MiB per rank"]
    assert ro.drift(block, [ro.Ran("graphdist plan", 0, printed)]) == [
        "-    0   1,368  16.1 MiB   (not printed)", "- peak 465.1 MiB per rank   (not printed)"]
    ro.rewrite(lines, block, [ro.Ran("graphdist plan", 0, printed)])
    assert lines[3:8] == ["rank   owned  activations", "   0   1,368   8.9 MiB", "", "...", "peak 357.9 MiB per rank"]


def _group_run(tmp_path_factory, cmds):
    """The group's commands run once per test run (shared by the xdist workers): ``(ran, checkout)``."""
    key = hashlib.sha1("\n".join(cmds).encode()).hexdigest()[:12]

    def make(folder):
        got = ro.run_in_checkout(db.Block(0, list(cmds)), folder, timeout=400)
        return got if isinstance(got, str) else [(r.command, r.rc, r.lines) for r in got], folder / "repo"
    got, repo = once_per_run(tmp_path_factory, f"readme-{key}", make)
    return (got if isinstance(got, str) else [ro.Ran(*r) for r in got]), repo


@pytest.fixture(autouse=True)
def _data(monkeypatch):
    monkeypatch.setenv("GRAPHDIST_DATA", str(SHARED_DATA))  # for the guides' data beyond the shipped home


@pytest.mark.parametrize("cmds", list(GROUPS), ids=[GROUPS[c][0].where for c in GROUPS])
def test_a_group_of_commands_prints_what_its_blocks_say(cmds, tmp_path_factory):
    group = GROUPS[cmds]
    got, _ = _group_run(tmp_path_factory, cmds)
    if isinstance(got, str):
        assert not any(b.doc == db.README for b in group), f"a README command cannot run: {got}"
        pytest.skip(f"real data not present: {got}")
    for block in group:
        d = ro.drift(block, got[:len(block.commands)])
        assert d == [], (f"{block.where}: {' && '.join(block.commands)} no longer does what the page says "
                         f"(python scripts/readme_outputs.py --write updates the output):\n" + "\n".join(d))


def test_the_demo_writes_both_reports(tmp_path_factory):
    """``graphdist demo`` (the README's first command, checked above) writes the two reports its
    summary names, from a 2-rank GCN and a 2-rank DLRM that learned."""
    cmds = next(c for c in GROUPS if c == ("graphdist demo",))
    got, repo = _group_run(tmp_path_factory, cmds)
    assert got[0].rc == 0
    gcn = json.loads((repo / "runs" / "demo" / "gcn_report.json").read_text())
    dlrm = json.loads((repo / "runs" / "demo" / "dlrm_report.json").read_text())
    assert gcn["world_size"] == 2 and gcn["test_acc"] > 0.8
    assert dlrm["world_size"] == 2 and dlrm["auc"] > 0.7


def test_the_commands_run_with_the_cpu_kernels_held_to_one_instruction_set(tmp_path):
    """What a block prints must not depend on the instruction sets or the vendor of the machine
    (MKL picks its kernels by both): every command runs with ``ONE_ISA``, which torch honours."""
    (tmp_path / "repo").mkdir()
    (ran,) = ro.run(db.Block(0, ['printenv MKL_CBWR FBGEMM_ENABLE_INSTRUCTIONS ONEDNN_MAX_CPU_ISA && '
                                 'python -c "import torch; print(torch.backends.cpu.get_cpu_capability())"']),
                    tmp_path / "repo")
    assert ran.rc == 0 and ran.lines == ["AVX2", "AVX2", "AVX2", "AVX2"], ran.lines
