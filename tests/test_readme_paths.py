"""Every real-data spec in the README, the docs pages and the dataset cards resolves as written:
its path is relative to the data home (never ``../shared`` or an absolute path of this machine)
and starts with the folder of a dataset card, which says where the file comes from; the ones
whose files this machine has resolve through ``$GRAPHDIST_DATA``; and Cora, which the README's
commands read, ships in the repository's own data home with its pinned digests."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess

import pytest

from tests.conftest import REPO, SHARED_DATA

DOCS = [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md") if "hooks" not in p.parts),
        REPO / "datasets" / "README.md", *sorted((REPO / "datasets").glob("*/README.md"))]
SPEC = re.compile(r"\b(planetoid|edgelist|ratings|lightgcn|npz|ogb|criteo):([A-Za-z0-9_./~-]+)")
EXAMPLES = {"bad.txt", "ratings.csv"}  # files the README writes itself to show an error


def _paths():
    out = set()
    for doc in DOCS:
        for kind, path in SPEC.findall(doc.read_text()):
            if path.isupper() or path.split("/")[0].isupper() or path in EXAMPLES:
                continue  # a placeholder (FILE, DIR, ROOT/NAME)
            out.add((doc.relative_to(REPO).as_posix(), kind, path))
    return sorted(out)


def test_the_readme_and_the_docs_have_real_data_specs():
    docs = {d for d, _, _ in _paths()}
    assert "README.md" in docs and "docs/guides/gcn.md" in docs and "docs/datasets.md" in docs, docs
    kinds = {k for _, k, _ in _paths()}
    assert {"planetoid", "edgelist", "ratings"} <= kinds, kinds


@pytest.mark.parametrize("doc, kind, path", _paths())
def test_spec_paths_live_in_the_data_home(doc, kind, path):
    assert not path.startswith(("../", "/", "~")), (doc, path)
    top = path.split("/")[0]
    assert (REPO / "datasets" / top / "README.md").exists(), f"{doc}: {kind}:{path} has no dataset card datasets/{top}/"


@pytest.mark.parametrize("spec", ["planetoid:planetoid/Cora", "edgelist:snap/facebook_combined.txt",
                                  "edgelist:snap/p2p-Gnutella24.txt"])
def test_readme_specs_resolve_through_the_data_home(spec, monkeypatch):
    if not SHARED_DATA.exists():
        pytest.skip(f"real data not present: {SHARED_DATA}")
    from graphdist.specs import parse_spec
    monkeypatch.setenv("GRAPHDIST_DATA", str(SHARED_DATA))
    monkeypatch.chdir(REPO.parent)  # not the repository: only the data home can resolve it
    s = parse_spec(spec)
    assert s.path is not None and s.path.exists() and str(s.path).startswith(str(SHARED_DATA))


def test_cora_ships_in_the_data_home_with_its_pinned_digests(monkeypatch):
    """The 8 raw files of Cora are in ``datasets/planetoid/Cora/raw/``, not git-ignored (so a fresh
    clone has them), each equal to the sha256 that ``SHA256SUMS`` pins (those of
    ``kimiyoung/planetoid``'s ``data/``), and ``planetoid:planetoid/Cora`` resolves there with no
    ``$GRAPHDIST_DATA`` from any working directory."""
    home = REPO / "datasets" / "planetoid"
    pinned = dict(reversed(ln.split(maxsplit=1)) for ln in (home / "SHA256SUMS").read_text().splitlines()
                  if ln.strip() and not ln.startswith("#"))
    names = [f"Cora/raw/ind.cora.{x}" for x in ("allx", "ally", "graph", "test.index", "tx", "ty", "x", "y")]
    assert sorted(n for n in pinned if n.startswith("Cora/")) == sorted(names)
    for n in names:
        assert hashlib.sha256((home / n).read_bytes()).hexdigest() == pinned[n], n
    r = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=home, capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == "", f"git ignores {r.stdout.split()}: a fresh clone would lack them"
    assert "MIT License" in (home / "Cora" / "LICENSE").read_text()
    from graphdist.specs import parse_spec
    monkeypatch.delenv("GRAPHDIST_DATA", raising=False)
    monkeypatch.chdir(REPO.parent)
    assert parse_spec("planetoid:planetoid/Cora").path == REPO / "datasets" / "planetoid" / "Cora"


def test_gpu_install_without_cuda_says_one_line():
    """``GRAPHDIST_GPU=1 bash scripts/install.sh`` on a machine without a CUDA torch stops before
    installing anything, with one line and exit 2 (it printed Python's AssertionError first)."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the install would proceed")
    r = subprocess.run(["bash", str(REPO / "scripts" / "install.sh")],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "GRAPHDIST_GPU": "1"})
    assert r.returncode == 2, r.stderr
    assert r.stdout == "" and r.stderr.splitlines() == [
        "install.sh: GRAPHDIST_GPU=1 needs a CUDA build of torch installed first"], r.stderr
