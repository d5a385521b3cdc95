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


def _why(e: OSError) -> str:
    return e.strerror or type(e).__name__


def _existing_ancestor(p: Path) -> Path:
    a = p
    while not a.exists() and a != a.parent:
        a = a.parent
    return a


def check_output_dir(path, flag: str, *, shown=None) -> None:
    """Refuse, before any work, a directory that cannot be created or written:
    :class:`~graphdist.errors.ConfigError` naming ``flag``, the path (``shown``, default
    ``path``) and why. Creates it (and its parents) when missing, and writes and removes a probe
    file in it."""
    import tempfile

    from graphdist.errors import ConfigError
    p = Path(path)
    shown = path if shown is None else shown
    anc = _existing_ancestor(p.absolute())
    if not anc.is_dir():
        raise ConfigError(f"{flag} {shown}: cannot write there ({anc} is a file, not a directory)")
    try:
        p.mkdir(parents=True, exist_ok=True)
        if not p.is_dir():
            raise ConfigError(f"{flag} {shown}: exists and is not a directory")
        with tempfile.NamedTemporaryFile(dir=p, prefix=".graphdist-probe-"):
            pass
    except OSError as e:
        raise ConfigError(f"{flag} {shown}: cannot write there ({_why(e)})") from None


def check_output_file(path, flag: str) -> None:
    """Refuse, before any work, a file that cannot be written (its directory is created when
    missing; an existing file is left alone): :class:`~graphdist.errors.ConfigError` naming
    ``flag``, the path and why."""
    from graphdist.errors import ConfigError
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag} {path}: is a directory, expected a file name")
    check_output_dir(p.parent if str(p.parent) else Path("."), flag, shown=path)
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(f"{flag} {path}: cannot write there (the file is read-only)")


def write_report(path, report: dict, *, indent: int = 2) -> None:
    """Atomic JSON write of a run's report, after its summary was printed: a failure (disk full)
    is one :class:`~graphdist.errors.ConfigError` line that says the summary above is the result."""
    from graphdist.errors import ConfigError
    try:
        atomic_write_json(path, report, indent=indent)
    except OSError as e:
        raise ConfigError(f"--report {path}: could not write the report ({e.strerror or e}); "
                          "the summary above is the result") from None
