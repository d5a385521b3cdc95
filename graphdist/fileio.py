"""Atomic, durable file writes: a reader (or a crash, or a power loss) never sees a half-written
report, part or checkpoint under the final name.

Each writer puts the content into ``<name>.tmp<pid>`` beside the target, flushes and ``fsync``s
it, ``os.replace``s it onto the target and then ``fsync``s the directory, so that the rename
itself is on disk (:func:`fsync_dir`). Without the first fsync a power loss can leave an empty
file under the final name (the rename reached the disk before the data).
"""
from __future__ import annotations

import json
import os
from pathlib import Path


def _tmp(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f"{path.name}.tmp{os.getpid()}")


def fsync_dir(path) -> None:
    """``fsync`` a directory, so that renames and new entries in it survive a power loss (a no-op
    where directories cannot be opened, e.g. on Windows)."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path) -> None:
    """``fsync`` one existing file."""
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(tmp, path) -> None:
    """``tmp`` (written and closed) becomes ``path``: fsync the data, rename, fsync the directory."""
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)


def atomic_write_text(path, text: str) -> None:
    """Write ``text`` to ``path`` (parents created) atomically and durably."""
    p = Path(path)
    tmp = _tmp(p)
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(p.parent)


def atomic_write_json(path, obj, *, indent: int = 2) -> None:
    """Write ``obj`` as JSON to ``path`` (parents created) atomically."""
    atomic_write_text(path, json.dumps(obj, indent=indent) + "\n")


def atomic_torch_save(obj, path) -> None:
    """``torch.save(obj, path)`` atomically and durably (parents created)."""
    import torch
    p = Path(path)
    tmp = _tmp(p)
    try:
        torch.save(obj, tmp)
        replace_durably(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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


def check_run_outputs(cfg) -> None:
    """Every output path of a trainer's config is writable, before any work: ``report``, and
    ``checkpoint_dir`` (with ``--resume``: it must already hold a checkpoint, and is not created;
    ``--resume auto`` starts afresh in an empty one),
    plus ``cache_dir`` and ``tensorboard`` where the config has them. One line naming the flag
    otherwise."""
    from graphdist.errors import MissingFileError
    if cfg.report:
        check_output_file(cfg.report, "--report")
    if cfg.checkpoint_dir:
        if getattr(cfg, "resume", False) is True and not (Path(cfg.checkpoint_dir) / "latest").is_file():
            where = "does not exist" if not Path(cfg.checkpoint_dir).exists() else "has no 'latest' file"
            raise MissingFileError(f"--resume: no checkpoint in {cfg.checkpoint_dir} ({where})")
        check_output_dir(cfg.checkpoint_dir, "--checkpoint-dir")
    if getattr(cfg, "cache_dir", None):
        check_output_dir(cfg.cache_dir, "--cache-dir")
    if getattr(cfg, "tensorboard", None):
        check_output_dir(cfg.tensorboard, "--tensorboard")


def cache_home() -> Path:
    """Where graphdist keeps what it can rebuild (a binary copy of a text data file):
    ``$XDG_CACHE_HOME/graphdist``, else ``~/.cache/graphdist`` (the XDG base-directory rule), never
    beside the user's data, whose folder may be read-only or shared."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "graphdist"


def atomic_savefig(fig, path) -> None:
    """Save a matplotlib figure to ``path`` atomically (a temporary file of the same suffix, so
    the same format, renamed over it), and close the figure."""
    import matplotlib.pyplot as plt
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.stem}.tmp-{os.getpid()}{p.suffix}")
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, p)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
