"""``--nnodes MIN:MAX``: which partition a group re-formed on fewer ranks trains on
(:func:`graphdist.partition.regroup.parts_for_world`), and the flag's bad values. The end-to-end run
(a node lost, the job finishing on the node left) is in tests/test_launch.py."""
from __future__ import annotations

import dataclasses

import pytest

from graphdist.cli import main
from graphdist.errors import ArtifactError
from graphdist.gnn import GCNConfig
from graphdist.partition.regroup import parts_for_world
from graphdist.launch import Nodes

SPEC = "sbm:nodes=300,classes=3,avg_degree=5,features=8,seed=0"
OTHER = "sbm:nodes=300,classes=3,avg_degree=5,features=8,seed=1"


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """Artifacts side by side: k = 4 (random), k = 2 by two methods and of another graph."""
    root = tmp_path_factory.mktemp("parts")
    made = {}
    for name, spec, k, method in (("a-k4", SPEC, 4, "random"), ("b-k2-block", SPEC, 2, "block"),
                                  ("c-k2-random", SPEC, 2, "random"), ("0-other-k2", OTHER, 2, "random")):
        assert main(["partition", spec, "--parts", str(k), "--method", method, "--out", str(root / name)]) == 0
        made[name] = root / name
    (root / "not-an-artifact").mkdir()
    return made


def _cfg(nnodes="1:2", **kw):
    return GCNConfig(nodes=Nodes(nnodes=nnodes, rdzv_endpoint="h0:29500"), **kw)


def test_a_sibling_of_the_same_graph_and_method_is_taken_first(parts):
    cfg, note = parts_for_world(_cfg(partition=str(parts["a-k4"])), 2)
    # the other graph's k = 2 sorts first by name, block's before random's: same graph, same method wins
    assert cfg.partition == str(parts["c-k2-random"]) and cfg.parts is None
    assert note == (f"the group has 2 ranks, not the 4 that --partition {parts['a-k4']} was cut for: "
                    f"training on {parts['c-k2-random']} (k = 2, the same graph)")


def test_without_a_sibling_the_spec_is_partitioned_in_process_or_one_line_says_what_to_do(parts):
    cfg, note = parts_for_world(_cfg(spec=SPEC, partition=str(parts["a-k4"])), 3)
    assert cfg.partition is None and cfg.parts == 3 and cfg.method == "random"  # the artifact's method
    assert "no artifact with k = 3 next to it; partitioning " + SPEC + " in-process into 3 (method random)" in note
    with pytest.raises(ArtifactError) as e:
        parts_for_world(_cfg(partition=str(parts["a-k4"])), 3)
    msg = str(e.value)
    assert "\n" not in msg and f"graphdist partition SPEC --parts 3 --out {parts['a-k4'].parent}/NAME" in msg, msg


def test_in_process_parts_follow_the_world_and_a_fixed_node_count_changes_nothing(parts):
    cfg, note = parts_for_world(_cfg(spec=SPEC, parts=4), 2)
    assert cfg.parts == 2 and note.startswith("the group has 2 ranks, not the 4 of --parts 4")
    for c in (_cfg(spec=SPEC, parts=2), _cfg("2", spec=SPEC, parts=4), _cfg("2:2", partition=str(parts["a-k4"]))):
        assert parts_for_world(c, 2) == (c, None)  # matching parts, or not elastic: as before (then refused)
    assert dataclasses.replace(_cfg(), nodes=Nodes(nnodes="1:3", rdzv_endpoint="h0:1")).nodes.elastic


@pytest.mark.parametrize("value, match", [
    ("0", "--nnodes 0: needs 1 <= MIN <= MAX, got MIN 0 and MAX 0"),
    ("3:2", "--nnodes 3:2: needs 1 <= MIN <= MAX, got MIN 3 and MAX 2"),
    ("two", "--nnodes takes N or MIN:MAX (whole numbers), got 'two'"),
])
def test_a_bad_node_range_is_one_line(value, match, capsys):
    assert main(["train-gcn", SPEC, "--nnodes", value, "--rdzv-endpoint", "h0:29500"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0], err
