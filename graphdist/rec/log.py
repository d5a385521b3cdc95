"""Reading a rating log's lines: ``user item [rating [timestamp]]``, the ids kept as written.

:func:`read_log` splits each data line into its first ``c`` fields (``c`` = 2..4, the fields of
the first data line) with numpy over the bytes of a block of whole lines (separators as in
:mod:`graphdist.data.table`: tab, comma, ``;``, whitespace, ``::``; ``#`` / ``%`` comments; a
header line skipped: with 3 or 4 fields, a first line with a word among the rating and timestamp
fields; with 2, words above a line of numbers, so a 2-field log of word ids cannot have its header
told from data: comment it with ``#``). The ids stay bytes until :func:`id_column` decides what
they are:

* every id a plain integer that fits int64 (``42``, ``-3``): int64 ids;
* every id a string of digits, some not plain (``000123``, ``18446744073709551617``): the ids
  exactly as written, as strings (large ids from other systems, zero-padded codes);
* every id a number, some written otherwise (``7.0``): numbers, each an integer (``7.0`` is 7;
  ``2.5`` is refused naming the file and line);
* any id not a number (``A2SUAM1J3GNN3B``, ``B00005N7P0``: Amazon's users and products, Yelp's
  ``Ha3iJu77CxlrFm-vQRs_8g``): every id of the column as written, as strings (UTF-8; a line
  that is not is refused).

Ratings and timestamps are parsed as float64 and must be finite.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from graphdist.data.table import data_lines, is_number
from graphdist.errors import DataFormatError

__all__ = ["read_log", "id_column", "numbers"]

_ID_LIMIT = 2.0 ** 53  # an id written as a float (7.0) is exact below this
_WIDE = 64  # widest token gathered by the vectorised path


def _tokens(block: bytes):
    """``(buf, starts, ends, line of each token)`` of a block whose separators are spaces."""
    buf = np.frombuffer(block, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    tok = buf > 32
    prev = np.concatenate([[False], tok[:-1]])
    nxt = np.concatenate([tok[1:], [False]])
    s = np.flatnonzero(tok & ~prev)
    e = np.flatnonzero(tok & ~nxt) + 1
    return buf, s, e, np.searchsorted(nl, s)


def _gather(buf: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """The tokens ``buf[s:e]`` as a bytes (``S``) array."""
    if s.size == 0:
        return np.zeros(0, dtype="S1")
    w = int((e - s).max())
    if w > _WIDE:  # rare: long tokens, one by one
        raw = buf.tobytes()
        return np.array([raw[a:b] for a, b in zip(s.tolist(), e.tolist())])
    idx = s[:, None] + np.arange(w)
    out = np.where(idx < e[:, None], buf[np.minimum(idx, buf.size - 1)], 0).astype(np.uint8)
    return np.ascontiguousarray(out).view(f"S{w}").reshape(-1)


def _block(path: Path, first: int, block: bytes, ncols: int, skip_first: bool):
    """``(fields [ncols] of bytes arrays, 0-based line of each row in the block, lines)``."""
    from graphdist.data.table import FIELD_SEPARATORS
    text = (block.replace(b"::", b"  ") if b"::" in block else block).translate(FIELD_SEPARATORS)
    buf, s, e, line = _tokens(text)
    head = np.flatnonzero(np.concatenate([[True], line[1:] != line[:-1]])) if line.size else line
    count = np.diff(np.concatenate([head, [line.size]]))
    c0 = buf[s[head]] if head.size else np.zeros(0, np.uint8)
    data = (c0 != ord("#")) & (c0 != ord("%"))
    if skip_first and data.any():
        data[np.argmax(data)] = False
    head, count = head[data], count[data]
    short = np.flatnonzero(count < ncols)
    if short.size:
        i = int(short[0])
        raise DataFormatError(path, f"expected at least {ncols} fields, got {int(count[i])}: "
                                    f"{text[s[head[i]]:e[head[i] + count[i] - 1]][:60].decode(errors='replace')!r}",
                              first + int(line[head[i]]))
    return [_gather(buf, s[head + c], e[head + c]) for c in range(ncols)], line[head], int(np.count_nonzero(buf == 10))


def _first_fields(block: bytes, after: int = 0):
    """Fields of the first data line of ``block`` at or after byte ``after``, and where it ends."""
    found = data_lines(block, 1, after)
    return (found[0][2], found[0][1]) if found else (None, len(block))


def _is_header(toks: list[bytes], nxt: list[bytes] | None) -> bool:
    """A first line of column names: a word among the rating / timestamp fields, or (two
    fields) two words above a line of numbers."""
    if len(toks) >= 3:
        return not all(map(is_number, toks[2:]))
    return not any(map(is_number, toks)) and nxt is not None and all(map(is_number, nxt[:2]))


def read_log(path: Path):
    """``(fields, Table)``: the first ``c`` fields of every data line (``c`` = 2..4, from the first
    data line) as bytes arrays, and where each row came from (its ``line_of``)."""
    from graphdist.data import table as tb
    parts, firsts, lines = [], [], []
    first, ncols = 1, None
    for block in tb.blocks(path):
        skip = False
        if ncols is None:
            toks, end = _first_fields(block)
            if toks is None:
                first += block.count(b"\n")
                continue
            skip = _is_header(toks, _first_fields(block, end + 1)[0])
            if skip:
                toks = _first_fields(block, end + 1)[0] or toks
            if len(toks) < 2:
                raise DataFormatError(path, f"expected at least 2 fields (user, item), got {len(toks)}",
                                      first + block[:end].count(b"\n"))
            ncols = min(len(toks), 4)
        cols, rows, n_lines = _block(path, first, block, ncols, skip)
        parts.append(cols)
        firsts.append(first)
        lines.append(rows)
        first += n_lines
    if ncols is None or not parts or sum(p[0].size for p in parts) == 0:
        raise DataFormatError(path, "no interactions found (expected lines: user item [rating [timestamp]])")
    fields = [np.concatenate([p[c] for p in parts]) for c in range(ncols)]
    return fields, tb.Table(np.zeros((fields[0].size, 0)), path, firsts, lines)


def numbers(tokens: np.ndarray, tab, what: str) -> np.ndarray:
    """float64 values of a column; a word or a non-finite value names its line."""
    try:
        v = tokens.astype(np.float64)
    except ValueError:
        v = None
    if v is None:
        for i, t in enumerate(tokens.tolist()):
            if not is_number(t):
                raise DataFormatError(tab.path, f"{t.decode(errors='replace')!r} is not a number", tab.line_of(i))
    bad = ~np.isfinite(v)
    if bad.any():
        i = int(np.argmax(bad))
        raise DataFormatError(tab.path, f"{what} {float(v[i]):g} is not a finite number", tab.line_of(i))
    return v


def id_column(tokens: np.ndarray, tab, what: str) -> np.ndarray:
    """A column of ids as int64, or as the strings written (see the module docstring)."""
    from graphdist.ids import canonical_ints
    body = np.char.lstrip(tokens, b"-")
    if tokens.size and bool(np.all(np.char.isdigit(body))):
        ints = canonical_ints(tokens)
        return ints if ints is not None else np.char.decode(tokens, "utf-8").astype(str)
    try:
        v = tokens.astype(np.float64)
    except ValueError:  # a word among them: every id as written
        return _as_text(tokens, tab, what)
    bad = ~(v == np.floor(v)) | (np.abs(v) >= _ID_LIMIT)  # (nan, inf too)
    if bad.any():
        i = int(np.argmax(bad))
        raise DataFormatError(tab.path, f"{what} id {float(v[i]):g} is not an integer id", tab.line_of(i))
    return v.astype(np.int64)


def _as_text(tokens: np.ndarray, tab, what: str) -> np.ndarray:
    """The ids as ``str``; a token that is not UTF-8 is refused naming its line (two such ids
    would otherwise be one after a lossy decode)."""
    try:
        return np.char.decode(tokens, "utf-8").astype(str)
    except UnicodeDecodeError:
        for i, t in enumerate(tokens.tolist()):
            try:
                t.decode("utf-8")
            except UnicodeDecodeError:
                raise DataFormatError(tab.path, f"{what} id {t!r} is not UTF-8 text", tab.line_of(i)) from None
        raise
