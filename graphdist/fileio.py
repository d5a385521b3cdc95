"""Atomic file writes: a reader (or a crash) never sees a half-written report, part or checkpoint.

Each writer puts the content into ``<name>.tmp<pid>`` beside the target, then ``os.replace``s it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path


def _tmp(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f"{path.name}.tmp{os.getpid()}")


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` (parents created) atomically."""
    p = Path(path)
    tmp = _tmp(p)
    tmp.write_text(text)
    os.replace(tmp, p)


def atomic_write_json(path, obj, *, indent: int = 2) -> None:
    """Write ``obj`` as JSON to ``path`` (parents created) atomically."""
    atomic_write_text(path, json.dumps(obj, indent=indent) + "\n")


def atomic_torch_save(obj, path) -> None:
    """``torch.save(obj, path)`` atomically (parents created)."""
    import torch
    p = Path(path)
    tmp = _tmp(p)
    torch.save(obj, tmp)
    os.replace(tmp, p)
