"""Process memory has one home: the product reads a process's or a machine's memory (``VmHWM``,
``VmRSS``, ``getrusage``, ``MemAvailable``, the physical pages) and sets glibc's mmap threshold
only in ``graphdist/memory.py`` (over ``partitioners/sysmem.py``). (That no two modules import
each other: ``tests/test_architecture.py``.)"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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
