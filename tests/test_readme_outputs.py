"""Every README output block marked ``<!-- output: ... -->`` is what its commands print today
(``scripts/readme_outputs.py``; ``--write`` rewrites the blocks after a change that moves a
figure). Times and memory are masked; rows, bytes, accuracies, losses and epochs must match."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import REPO, SHARED_DATA

_spec = importlib.util.spec_from_file_location("readme_outputs", REPO / "scripts" / "readme_outputs.py")
ro = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("readme_outputs", ro)  # its dataclasses look their module up
_spec.loader.exec_module(ro)

BLOCKS = ro.blocks(ro.README.read_text().splitlines())


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


def test_the_readme_marks_its_output_blocks():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("block", BLOCKS, ids=[f"line{b.line}" for b in BLOCKS])
def test_a_readme_output_block_is_what_its_commands_print(block, monkeypatch):
    monkeypatch.setenv("GRAPHDIST_DATA", str(SHARED_DATA))  # the real data of this machine, if any
    missing = ro.missing_data(block)
    if missing:
        pytest.skip(f"real data not present: {', '.join(missing)}")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    got = ro.run(block, timeout=300)
    assert ro.drift(block, got) == [], (f"README.md:{block.line} no longer shows what "
                                        f"{' && '.join(block.commands)} prints (python scripts/readme_outputs.py "
                                        f"--write updates it):\n" + "\n".join(got[-40:]))
