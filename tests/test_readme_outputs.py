"""Every output block marked ``<!-- output: ... -->`` in README.md and the docs pages
(``docs/**/*.md``) is what its commands print today (``scripts/readme_outputs.py``; ``--write``
rewrites the blocks after a change that moves a figure). Times and memory are masked; rows, bytes,
accuracies, losses and epochs must match. Blocks with the same commands run once."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import REPO, SHARED_DATA

_spec = importlib.util.spec_from_file_location("readme_outputs", REPO / "scripts" / "readme_outputs.py")
ro = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("readme_outputs", ro)  # its dataclasses look their module up
_spec.loader.exec_module(ro)

BLOCKS = ro.all_blocks()
GROUPS = ro.by_commands(BLOCKS)


def test_the_checker_masks_what_a_machine_changes_and_nothing_else():
    line = ("test_acc 0.9306 (best val 0.9150 at epoch 26), final loss 0.6668, 13.4 ms/epoch, halo 7,730 rows "
            "= 0.27 MB/epoch (mvc, 32 bit), peak mem 339 MiB/rank, world size 2")
    block = ro.Block(1, ["graphdist x"], [line])
    assert ro.drift(block, ["noise", line.replace("13.4 ms", "61.0 ms").replace("339 MiB", "402 MiB")]) == []
    assert ro.drift(block, [line.replace("7,730 rows", "9,240 rows")]) == [ro.mask(line)]
    assert ro.drift(block, [line.replace("0.9306", "0.9307")]) == [ro.mask(line)]
    lines = ["```", "graphdist a \\", "  --b 1", "echo no", "```", "<!-- output: the commands above -->", "```",
             "x 1", "```", "<!-- output: the $ lines -->", "```", "$ graphdist c", "y 2", "```"]
    (one, two) = ro.blocks(lines)
    assert (one.commands, one.expected, two.commands, two.expected) == (["graphdist a --b 1"], ["x 1"],
                                                                         ["graphdist c"], ["y 2"])


def test_the_pages_mark_their_output_blocks():
    """The README shows marked examples, and so do the guides (the blocks the README had before
    the docs site: data info, partition and quality, the demo, train-gcn, Cora's exchanges, stale
    halos and sampling, the DLRM warnings)."""
    where = {b.doc.relative_to(ro.REPO).as_posix() for b in BLOCKS}
    assert "README.md" in where and any(w.startswith("docs/guides/") for w in where), where
    assert len(GROUPS) >= 7


def test_repeated_blocks_are_grouped_and_pages_are_all_scanned(tmp_path, monkeypatch):
    lines = ["```", "graphdist a", "```", "<!-- output: the commands above -->", "```", "x 1", "```"]
    for name in ("README.md", "docs/guides/g.md", "docs/hooks/skip.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(ro, "REPO", tmp_path)
    monkeypatch.setattr(ro, "README", tmp_path / "README.md")
    monkeypatch.setattr(ro, "DOCS", tmp_path / "docs")
    found = ro.all_blocks()
    assert [b.where for b in found] == ["README.md:5", "docs/guides/g.md:5"]
    assert list(ro.by_commands(found)) == [("graphdist a",)]


def test_write_runs_a_repeated_block_once_and_rewrites_it_on_every_page(tmp_path, monkeypatch, capsys):
    lines = ["```", "graphdist a", "```", "<!-- output: the commands above -->", "```", "rows 1, loss 0.5", "```"]
    for name in ("README.md", "docs/guides/g.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(ro, "REPO", tmp_path)
    monkeypatch.setattr(ro, "README", tmp_path / "README.md")
    monkeypatch.setattr(ro, "DOCS", tmp_path / "docs")
    monkeypatch.setattr(ro, "missing_data", lambda block: [])
    calls = []
    monkeypatch.setattr(ro, "run", lambda block, timeout=600: calls.append(block.commands) or ["rows 2, loss 0.25"])
    assert ro.main([]) == 1  # drifted on both pages
    assert ro.main(["--write"]) == 0 and ro.main([]) == 0
    assert calls == [["graphdist a"]] * 3  # once per run of the script, not once per page
    for name in ("README.md", "docs/guides/g.md"):
        assert (tmp_path / name).read_text().splitlines()[5] == "rows 2, loss 0.25"


@pytest.mark.parametrize("cmds", list(GROUPS), ids=[GROUPS[c][0].where for c in GROUPS])
def test_a_marked_output_block_is_what_its_commands_print(cmds, monkeypatch):
    group = GROUPS[cmds]
    monkeypatch.setenv("GRAPHDIST_DATA", str(SHARED_DATA))  # the real data of this machine, if any
    missing = ro.missing_data(group[0])
    if missing:
        pytest.skip(f"real data not present: {', '.join(missing)}")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    got = ro.run(group[0], timeout=300)
    for block in group:
        assert ro.drift(block, got) == [], (f"{block.where} no longer shows what "
                                            f"{' && '.join(block.commands)} prints (python scripts/readme_outputs.py "
                                            f"--write updates it):\n" + "\n".join(got[-40:]))
