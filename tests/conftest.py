"""Shared test fixtures: where the real data lives, CUDA skip marker."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("GRAPHDIST_SHARED_DATA", REPO.parent / "shared" / "datasets"))

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def shared_file(*parts) -> Path:
    """A file under ../shared/datasets, or skip the test cleanly when it is absent."""
    p = SHARED_DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"real data not present: {p}")
    return p


@pytest.fixture
def cora_dir() -> Path:
    return shared_file("planetoid", "Cora")


def planetoid(name: str) -> Path:
    """A Planetoid dataset folder: ../shared/datasets first, then the data home (where
    ``scripts/fetch_planetoid.py`` writes CiteSeer and PubMed); skip the test when neither has it."""
    for root in (SHARED_DATA, REPO / "datasets"):
        if (root / "planetoid" / name / "raw").is_dir():
            return root / "planetoid" / name
    pytest.skip(f"real data not present: planetoid/{name} in {SHARED_DATA} or {REPO / 'datasets'}")


@pytest.fixture
def gnutella() -> Path:
    return shared_file("snap", "p2p-Gnutella24.txt")


@pytest.fixture
def facebook() -> Path:
    return shared_file("snap", "facebook_combined.txt")


@pytest.fixture
def restore_dist_env():
    """The in-process (world size 1) path sets MASTER_ADDR/PORT; do not leak them to other tests."""
    keys = ("MASTER_ADDR", "MASTER_PORT")
    before = {k: os.environ.get(k) for k in keys}
    yield
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
