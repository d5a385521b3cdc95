"""benchmarks/pyg_ports.py's diff logic on a tiny fake "PyG" file (no PyG sources needed): the
lines it counts (added / changed, graphdist's or not) and that a patch it writes applies back."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "benchmarks") not in sys.path:  # its harness, as `python benchmarks/pyg_ports.py` finds it
    sys.path.insert(0, str(REPO / "benchmarks"))
spec = importlib.util.spec_from_file_location("pyg_ports", REPO / "benchmarks" / "pyg_ports.py")
pp = importlib.util.module_from_spec(spec)
sys.modules["pyg_ports"] = pp  # (its dataclass looks its module up)
spec.loader.exec_module(pp)

ORIG = """import torch
data = dataset[0]
model = Net()
optimizer = Adam(model.parameters())
loss = F.nll_loss(out[mask], y[mask])
optimizer.step()
print(acc)
"""
# 2 added (marked), 1 changed (marked), 1 changed not marked, 1 removed
PORTED = """import torch
import graphdist.gnn.pyg as gd  # graphdist
data = dataset[0]
model = Net()
gd.distribute(model, data)  # graphdist
optimizer = Adam(model.parameters(), lr=0.1)
loss = gd.nll_loss(out, y, mask)  # graphdist
optimizer.step()
"""


def test_count_diff_by_hand():
    d = "\n".join(["--- a/x.py", "+++ b/x.py", "@@ -1,3 +1,4 @@", " a", "-b", "-c", "+B  # graphdist", "+new",
                   "+more  # graphdist", " d", "-e"])
    c = pp.count_diff(d)
    # block 1: 2 removed, 3 added -> 2 changed ("B" marked, "new" not) + 1 added (marked); block 2: 1 removed
    assert (c.added, c.changed, c.removed, c.added_other, c.changed_other) == (1, 2, 1, 0, 1)
    assert c.total == 4


@pytest.mark.skipif(not (shutil.which("diff") and shutil.which("patch")), reason="needs diff and patch")
def test_patch_of_a_fake_pyg_file_counts_and_applies(tmp_path):
    orig, new = tmp_path / "orig.py", tmp_path / "new.py"
    orig.write_text(ORIG)
    new.write_text(PORTED)
    text = pp.make_patch(orig, new, "examples/fake.py")
    assert text.startswith("--- a/examples/fake.py\n+++ b/examples/fake.py\n")
    c = pp.count_diff(text)
    assert (c.added, c.changed, c.removed, c.added_other, c.changed_other) == (2, 2, 1, 0, 1)
    ports, tree = tmp_path / "ports", tmp_path / "tree"
    (ports / "examples").mkdir(parents=True)
    (ports / "examples" / "fake.py.patch").write_text(text)
    (tree / "examples").mkdir(parents=True)
    (tree / "examples" / "fake.py").write_text(ORIG)
    done = pp.apply_patches(tree, ports)
    assert list(done) == ["examples/fake.py"]
    assert (tree / "examples" / "fake.py").read_text() == PORTED
    (tree / "examples" / "fake.py").write_text(ORIG.replace("model = Net()", "model = Other()"))
    with pytest.raises(SystemExit, match="fake.py.patch: does not apply"):  # PyG moved: no fuzzy apply
        pp.apply_patches(tree, ports)
