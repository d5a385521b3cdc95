"""The import direction ARCHITECTURE.md draws, read from the code: the core (``graphdist/*.py``)
imports no room above it, ``partitioners`` nothing of graphdist, and DLRM (``embeddings``) not
the partitioned-graph room; only ``graphdist/comm.py`` calls torch.distributed collectives."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOMS = ("graphdist.halo", "graphdist.gnn", "graphdist.rec", "graphdist.cli", "embeddings")


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _bad(path: Path, banned) -> list[str]:
    return sorted(m for m in _imports(path) if any(m == b or m.startswith(b + ".") for b in banned))


@pytest.mark.parametrize("path", sorted(p for p in (REPO / "graphdist").glob("*.py") if p.name != "__main__.py"),
                         ids=lambda p: p.name)
def test_core_imports_no_room_above_it(path):  # (__main__.py is the CLI's `python -m graphdist` entry)
    assert _bad(path, ROOMS) == []


@pytest.mark.parametrize("path", sorted((REPO / "partitioners").rglob("*.py")), ids=lambda p: p.name)
def test_partitioners_import_nothing_of_graphdist(path):
    assert _bad(path, ("graphdist", "embeddings")) == []


@pytest.mark.parametrize("path", sorted((REPO / "embeddings").rglob("*.py")), ids=lambda p: p.name)
def test_dlrm_does_not_use_the_graph_rooms(path):
    assert _bad(path, ("graphdist.halo", "graphdist.gnn", "graphdist.rec")) == []


COLLECTIVES = {"all_reduce", "all_gather", "all_to_all_single", "broadcast", "barrier", "all_gather_object",
               "allreduce_coalesced", "reduce_scatter", "send", "recv", "isend", "irecv"}


def _collective_calls(path: Path) -> list[str]:
    calls = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in COLLECTIVES:
            base = node.func.value
            if isinstance(base, ast.Name) and base.id == "dist" or node.func.attr == "allreduce_coalesced":
                calls.append(f"{path.name}:{node.lineno} {node.func.attr}")
    return calls


def test_only_comm_calls_collectives():
    found = []
    for root in ("graphdist", "embeddings"):
        for path in sorted((REPO / root).rglob("*.py")):
            if path.relative_to(REPO).as_posix() not in ("graphdist/comm.py", "graphdist/testing.py"):
                found += _collective_calls(path)
    assert found == []
