"""Reading a rating log's lines: ``user item [rating [timestamp]]``, the ids kept as written.

:func:`read_log` splits each data line into its first ``c`` fields (``c`` = 2..4, the fields of
the first data line) with numpy over the bytes of a block of whole lines (separators as in
:mod:`graphdist.data.table`: tab, comma, ``;``, whitespace, ``::``; ``#`` / ``%`` comments; a
header line skipped: with 3 or 4 fields, a first line with a word among the rating and timestamp
fields; with 2, words above a line of numbers, so a 2-field log of word ids cannot have its header
told from data: comment it with ``#``). The ids stay bytes until
:func:`graphdist.data.tokens.id_column` decides what they are:

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
from graphdist.data.tokens import fields_of_block
from graphdist.errors import DataFormatError

__all__ = ["read_log", "numbers"]


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
        cols, rows, n_lines = fields_of_block(path, first, block, ncols, skip)
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
