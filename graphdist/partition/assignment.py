"""A partition given as a file (``graphdist partition --assignment FILE``, ``train-rec``'s and
the k-rank build's): one part id per node, read and checked with one-line errors naming the
file; and the range of ``--parts``."""
from __future__ import annotations

from pathlib import Path

from graphdist.errors import ConfigError

__all__ = ["check_parts", "check_readable", "read_assignment"]


def check_parts(k: int, n: int) -> None:
    """``--parts`` must be between 1 and the number of nodes."""
    if k < 1 or k > n:
        raise ConfigError(f"--parts {k} must be between 1 and the number of nodes N={n}")


def check_readable(path: str) -> None:
    """Refuse, in one line, an --assignment file that cannot be read."""
    from graphdist.errors import MissingFileError
    p = Path(path)
    try:
        with open(p, "rb") as f:
            f.read(1)
    except OSError as e:
        raise MissingFileError(f"--assignment {path}: cannot read ({e.strerror or type(e).__name__})") from None


def read_assignment(path, n: int, parts: int | None = None):
    """``(int64 numpy [n], k)`` from a ``.npy`` array or a text file with one part id per line
    (``#`` comments and blank lines skipped; further columns ignored). ``k`` is ``parts``, or
    the largest id + 1. Every problem is a one-line error naming the file (and, for text, the
    line): unreadable, not integers, wrong length, negative or ``>= parts``."""
    import numpy as np

    from graphdist.errors import DataFormatError
    p = Path(path)
    check_readable(str(path))
    line_of = None
    if p.suffix == ".npy":
        try:
            arr = np.load(p, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DataFormatError(p, f"not a readable .npy array ({str(e).split('. ')[0]})") from None
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1:
            raise DataFormatError(p, f"has shape {list(arr.shape)}; expected one part id per node")
        if arr.dtype.kind == "f":
            bad = np.flatnonzero(~np.isfinite(arr) | (arr != np.round(arr)))
            if bad.size:
                raise DataFormatError(p, f"entry {int(bad[0])} is {float(arr[bad[0]]):g}, not an integer part id")
        elif arr.dtype.kind not in "iub":
            raise DataFormatError(p, f"holds {arr.dtype} values; expected integer part ids")
        a = arr.astype(np.int64)
    else:
        from graphdist.data.table import read_table
        tab = read_table(p, 1, what="part id")
        a = tab.values[:, 0]
        line_of = tab.line_of
    where = (lambda i: {"line": line_of(int(i))}) if line_of else (lambda i: {})  # noqa: E731
    entry = "" if line_of else "entry {i}: "
    if a.size != n:
        raise DataFormatError(p, f"has {a.size:,} part ids but the graph has {n:,} nodes")
    if n and int(a.min()) < 0:
        i = int(np.flatnonzero(a < 0)[0])
        raise DataFormatError(p, f"{entry.format(i=i)}negative part id {int(a[i])}", **where(i))
    k = int(parts) if parts else (int(a.max()) + 1 if n else 1)
    if parts is not None and parts < 1:
        raise ConfigError(f"--parts {parts} must be >= 1")
    if n and int(a.max()) >= k:
        i = int(np.flatnonzero(a >= k)[0])
        raise DataFormatError(p, f"{entry.format(i=i)}part id {int(a[i])} is out of range for --parts {k} "
                                 f"(ids must be 0..{k - 1})", **where(i))
    check_parts(k, n)
    return a, k

