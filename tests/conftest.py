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


@pytest.fixture
def gnutella() -> Path:
    return shared_file("snap", "p2p-Gnutella24.txt")


@pytest.fixture
def facebook() -> Path:
    return shared_file("snap", "facebook_combined.txt")
