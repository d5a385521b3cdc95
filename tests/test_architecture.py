"""The import direction ARCHITECTURE.md draws, read from the code of every module of every
package: ``partitioners`` imports nothing of graphdist; the core (``graphdist/*.py`` and
``graphdist/data/``) no room above it; ``exchange/`` (the exchange of halo rows) the core;
``partition/`` (the partitioned graph) the core and ``exchange/``; the graph workloads the core,
``exchange/`` and ``partition/`` but not each other; DLRM
(``embeddings``) the core only; the CLI everything. No module imports another's private name.
Only ``graphdist/comm.py`` calls torch.distributed collectives."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = ("graphdist", "embeddings", "partitioners")
CORE = "graphdist (core)"
BANNED = {  # room -> the rooms it may not import
    "partitioners": ("graphdist", "embeddings"),
    CORE: ("graphdist.exchange", "graphdist.partition", "graphdist.gnn", "graphdist.rec", "graphdist.cli", "embeddings"),
    "graphdist.data": ("graphdist.exchange", "graphdist.partition", "graphdist.gnn", "graphdist.rec", "graphdist.cli",
                       "embeddings"),
    "graphdist.exchange": ("graphdist.partition", "graphdist.gnn", "graphdist.rec", "graphdist.cli", "embeddings"),
    "graphdist.partition": ("graphdist.gnn", "graphdist.rec", "graphdist.cli", "embeddings"),
    "graphdist.gnn": ("graphdist.rec", "graphdist.cli", "embeddings"),
    "graphdist.rec": ("graphdist.gnn", "graphdist.cli", "embeddings"),
    "embeddings": ("graphdist.exchange", "graphdist.partition", "graphdist.gnn", "graphdist.rec", "graphdist.cli"),
    "graphdist.cli": (),
}


def _room(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    if parts[0] != "graphdist":
        return parts[0]
    if len(parts) == 2:
        return "graphdist.cli" if parts[1] == "__main__" else CORE  # `python -m graphdist` is the CLI's entry
    return f"graphdist.{parts[1]}"


MODULES = sorted(p for root in OURS for p in (REPO / root).rglob("*.py"))


def test_every_package_has_a_place():
    packages = {p.parent for p in MODULES if p.name == "__init__.py"}
    rooms = {_room(p / "__init__.py") for p in packages if p != REPO / "graphdist"}
    assert rooms <= set(BANNED), f"a new room: add it to BANNED and ARCHITECTURE.md: {rooms - set(BANNED)}"
    assert {_room(p) for p in MODULES} <= set(BANNED)


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


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_imports_point_down(path):
    assert _bad(path, BANNED[_room(path)]) == []


def _private_uses(path: Path) -> list[str]:
    """Private (``_x``, not dunder) names of graphdist, embeddings or partitioners this module
    takes from another module: ``from m import _x``, or ``m._x`` where ``m`` was imported."""
    tree = ast.parse(path.read_text())
    modules, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] in OURS:
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"{node.lineno}: from {node.module} import {a.name}")
                modules[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in OURS:
                    modules[a.asname or a.name.split(".")[0]] = a.asname and a.name or a.name.split(".")[0]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_private_name_is_taken_from_another_module(path):
    assert _private_uses(path) == []


def test_the_checks_see_a_wrong_import(tmp_path):
    """The two readers catch what they are for (a module written here, read like the others)."""
    bad = tmp_path / "m.py"
    bad.write_text("import graphdist.partition.layout as hp\nfrom graphdist.gnn.plan import _x\nfrom graphdist.rec import trainer\n"
                   "hp._Shared\ntrainer._RecTask\n")
    assert _bad(bad, BANNED["graphdist.exchange"]) == ["graphdist.gnn.plan", "graphdist.gnn.plan._x",
                                                       "graphdist.partition.layout", "graphdist.rec",
                                                       "graphdist.rec.trainer"]
    assert _bad(bad, BANNED["graphdist.gnn"]) == ["graphdist.rec", "graphdist.rec.trainer"]
    assert len(_private_uses(bad)) == 3


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


def test_an_exchanger_is_changed_only_through_its_methods():
    """HaloExchanger's modes (stale buffers, widths per layer, calibration, statistics, error
    measurement, rounds) are constructor arguments or methods: assigning a public attribute of a
    built exchanger raises, so no module outside exchange/exchanger.py can set one."""
    from graphdist.exchange.exchanger import CommStats, HaloExchanger
    from graphdist.exchange.stale import Staleness
    import torch
    stats = CommStats()
    ex = HaloExchanger(torch.tensor([0, 1]), [1, 1], [1, 1], stats=stats, stale=Staleness(2, 4))
    assert ex.stats is stats and ex.stale.n_rows == {"forward": 2, "backward": 2}
    for name, value in (("stale", None), ("layer_bits", {}), ("calibrate", True), ("stats", CommStats()),
                        ("measure", True), ("rounds", 2), ("active", True), ("bits", 8)):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(ex, name, value)
    ex.set_widths({("forward", 0): 8, ("backward", 1): 32})
    assert ex.layer_bits == {("forward", 0): 8}
    ex.start_calibration()
    assert ex.calibrating
    stats.calib[("forward", 0)] = [1]
    assert ex.end_calibration() == {("forward", 0): [1]} and not ex.calibrating and stats.calib == {}
    ex.measure_errors(True)
    assert ex.measure


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """File-level imports between the product's modules, those inside functions too: module ->
    the modules it imports (``from a import b`` names module ``a.b`` where that is a module)."""
    names = {_module_name(p) for p in MODULES}

    def module_of(m: str) -> str:
        while m and m not in names:
            m = m.rpartition(".")[0]
        return m

    graph = {}
    for path in MODULES:
        me, edges = _module_name(path), set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges.update(module_of(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                edges.update(module_of(f"{node.module}.{a.name}") for a in node.names)
        graph[me] = edges - {"", me}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1; stack.append(w); on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_circle():
    """No two modules of the product import each other, directly or around a circle, lazily inside
    a function or not: every room reads from the top down."""
    assert circles(import_graph()) == []


def test_the_circle_reader_sees_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_architecture_lists_every_module_in_its_rooms_table():
    """ARCHITECTURE.md is a map: a table per room (a ``### `room``` heading) with one row per
    module of that room; a module added, moved or removed shows here."""
    import re
    text = (REPO / "ARCHITECTURE.md").read_text()
    listed = {}
    for head, body in re.findall(r"^### `([^`]+)`\n(.*?)(?=^#)", text, flags=re.S | re.M):
        listed[head] = set(re.findall(r"^\| `([\w.]+\.py)` \|", body, flags=re.M))
    rooms = {"partitioners/": "partitioners", "core": "graphdist", "graphdist/data/": "graphdist/data",
             "graphdist/exchange/": "graphdist/exchange", "graphdist/partition/": "graphdist/partition",
             "graphdist/gnn/": "graphdist/gnn", "graphdist/gnn/pyg/": "graphdist/gnn/pyg",
             "graphdist/rec/": "graphdist/rec", "embeddings/": "embeddings", "graphdist/cli/": "graphdist/cli"}
    missing = []
    for room, folder in rooms.items():
        have = {p.name for p in (REPO / folder).glob("*.py")}
        if listed.get(room) != have:
            missing.append(f"{room}: not listed {sorted(have - listed.get(room, set()))}, "
                           f"listed but absent {sorted(listed.get(room, set()) - have)}")
    assert not missing, "\n".join(missing)


def test_a_rank_does_not_import_scipy():
    """Every rank imports ``partitioners.errors`` (graphdist.errors' user errors), which runs the
    package's ``__init__``; scipy is imported where a partitioner uses it, not there (0.17 s of
    every process: the suite starts about 270)."""
    import subprocess
    import sys
    code = ("import sys, graphdist.launch, graphdist.errors, graphdist.gnn.trainer, graphdist.rec.trainer, "
            "partitioners; print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout[-2000:], r.stderr[-2000:])
