"""The core's modules (``graphdist/*.py``) each own one concern and import one way: no module of the
core imports another that imports it back (directly or through others; imports inside functions
count), and process memory is read in one place (``graphdist/memory.py``, over
``partitioners/sysmem.py``)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORE = sorted((REPO / "graphdist").glob("*.py"))


def _core_imports(path: Path) -> set[str]:
    """The core modules ``path`` imports (``graphdist.X`` for a file ``graphdist/X.py``)."""
    names = {p.stem for p in CORE}
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        mods = []
        if isinstance(n, ast.Import):
            mods = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            mods = [n.module] + [f"{n.module}.{a.name}" for a in n.names]
        for m in mods:
            parts = m.split(".")
            if len(parts) >= 2 and parts[0] == "graphdist" and parts[1] in names and parts[1] != path.stem:
                out.add(parts[1])
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary cycle's smallest rotation, found by a depth-first walk from each node."""
    found = set()

    def walk(start, node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                i = path.index(min(path))
                found.add(tuple(path[i:] + path[:i]))
            elif nxt not in path and nxt > start:
                walk(start, nxt, path + [nxt])
    for s in sorted(graph):
        walk(s, s, [s])
    return [list(c) for c in sorted(found)]


def test_core_modules_import_one_way():
    graph = {p.stem: _core_imports(p) for p in CORE}
    assert cycles(graph) == []


def test_the_cycle_finder_sees_a_circle():
    assert cycles({"comm": {"runtime"}, "runtime": {"comm", "log"}, "log": set()}) == [["comm", "runtime"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


PROCESS_MEMORY = ("VmHWM", "VmRSS", "ru_maxrss", "mallopt", "SC_PHYS_PAGES", "MemAvailable", "getrusage")


def test_process_memory_has_one_home():
    homes = {"graphdist/memory.py", "partitioners/sysmem.py"}
    found = []
    for root in ("graphdist", "embeddings", "partitioners"):
        for p in sorted((REPO / root).rglob("*.py")):
            rel = p.relative_to(REPO).as_posix()
            if rel in homes:
                continue
            for n in ast.walk(ast.parse(p.read_text())):
                said = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else \
                    n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else ""
                if said in PROCESS_MEMORY:  # (a docstring that mentions one is not a read)
                    found.append(f"{rel}:{n.lineno} {said}")
    assert found == []
