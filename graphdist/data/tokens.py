"""Reading the fields of a text table as the bytes written: for ids that are words (usernames,
URLs, Amazon's ``A2SUAM1J3GNN3B``), where :func:`graphdist.data.table.read_table` reads numbers.

    read_fields(path, 2)   -> ([src bytes [rows], dst bytes [rows]], Table)

Separators, comments and blank lines as in :mod:`graphdist.data.table`; the fields of a block of
whole lines are cut with numpy over its bytes (a token wider than 64 bytes is taken one by one).
:func:`id_column` decides what a column of ids is (int64 or the strings written);
:func:`text_ids` makes one id space of strings from several columns.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from graphdist.data import table as tb
from graphdist.errors import DataFormatError

__all__ = ["fields_of_block", "read_fields", "room", "first_word", "why_text", "occurrences", "first_line",
           "names_hint", "drop_first", "id_column", "text_ids", "as_text"]

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


def fields_of_block(path: Path, first: int, block: bytes, ncols: int, skip_first: bool = False):
    """``(fields [ncols] of bytes arrays, 0-based line of each row in the block, lines)`` of a block
    of whole lines whose first line is line ``first`` of the file; ``skip_first`` drops its first
    data line (a header). A line of fewer than ``ncols`` fields is refused naming it."""
    text = (block.replace(b"::", b"  ") if b"::" in block else block).translate(tb.FIELD_SEPARATORS)
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
    rows = line[head]
    for c in range(ncols):
        wide = e[head + c] - s[head + c]
        if wide.size and int(wide.max()) > _WIDE:
            i = int(np.argmax(wide))
            room(path, wide.size * ncols, int(wide[i]), first + int(rows[i]))
    return [_gather(buf, s[head + c], e[head + c]) for c in range(ncols)], rows, int(np.count_nonzero(buf == 10))


def room(path, ids: int, width: int, line: int | None = None) -> None:
    """Refuse, before they are made, ``ids`` ids held as wide as the longest (``width`` bytes:
    fixed-width arrays, sorted and decoded, about four times that) where the machine has not the
    memory, naming the longest id's line."""
    from graphdist.memory import available_bytes
    need, have = 4 * ids * width, available_bytes()
    if need > have:
        raise DataFormatError(path, f"an id of {width:,} bytes: ids are held as wide as the longest, so "
                                    f"{ids:,} ids need about {need / 2**30:.1f} GiB, more than the "
                                    f"{have / 2**30:.1f} GiB available; shorten the longest ids (e.g. hash "
                                    f"them) or map the ids to integers", line)


def read_fields(path, ncols: int, *, byte_range: tuple[int, int] | None = None, first_line: int = 1,
                header: bool = True):
    """``(fields, Table)``: the first ``ncols`` fields of every data line of ``path`` as bytes
    arrays, and where each row came from (``Table.line_of``); a first line of column names
    (:func:`graphdist.data.table.header_offset`) is skipped unless ``header`` is False (the
    caller decides: :func:`first_line`). ``byte_range`` and ``first_line`` as in
    :func:`graphdist.data.table.read_table`."""
    path = Path(path)
    parts, firsts, lines = [], [], []
    first = first_line
    pos = (byte_range or (0, None))[0]
    at = tb.header_offset(path, ncols) if header and pos < tb.HEAD_BYTES else None
    for block in tb.blocks(path, *(byte_range or (0, None))):
        if at is not None and pos <= at < pos + len(block):  # column names: a comment line
            block = block[:at - pos] + b"#" + block[at - pos + 1:]
        pos += len(block)
        cols, rows, n_lines = fields_of_block(path, first, block, ncols)
        parts.append(cols)
        firsts.append(first)
        lines.append(rows)
        first += n_lines
    width = max((p[c].dtype.itemsize for p in parts for c in range(ncols)), default=1)
    if width > _WIDE:
        room(path, ncols * sum(p[0].size for p in parts), width)
    fields = [np.concatenate([p[c] for p in parts]) if parts else np.zeros(0, dtype="S1") for c in range(ncols)]
    return fields, tb.Table(np.zeros((fields[0].size, 0)), path, firsts, lines)


def first_word(cols: list[np.ndarray]) -> tuple[int, bytes] | None:
    """``(row, token)`` of the first token of the bytes columns that is no number (``alice``;
    ``2.5`` and ``nan`` are numbers), or None."""
    found = None
    for c in cols:
        for lo in range(0, c.size, 1 << 16):  # numpy per chunk; Python only in the chunk with a word
            chunk = c[lo:lo + (1 << 16)]
            try:
                chunk.astype(np.float64)
                continue
            except ValueError:
                i = lo + next(i for i, t in enumerate(chunk.tolist()) if not tb.is_number(t))
            if found is None or i < found[0]:
                found = (i, bytes(c[i]))
            break
    return found


def why_text(cols: list[np.ndarray], tab, skip_first: bool = False) -> str | None:
    """Why an edge list's ids are text: its first field that is no number, with its line (past
    the first row where that may be column names), or None."""
    w = first_word([c[1:] for c in cols] if skip_first else cols)
    if w is None:
        return None
    return f"{w[1].decode(errors='replace')!r} on line {tab.line_of(w[0] + int(skip_first))} is not a number"


def occurrences(cols: list[np.ndarray], toks: list[bytes]) -> list[int]:
    """How often each of ``toks`` is a field of the bytes columns ``cols``."""
    return [sum(int(np.count_nonzero(c == t)) for c in cols) for t in toks]


def first_line(path, toks: list[bytes], counts: list[int], names_above_numbers: bool) -> bool:
    """For an edge list of word ids, whether its first data line (fields ``toks``, each seen
    ``counts`` times in the file) is column names: two words seen nowhere else, above a line of
    numbers (:func:`graphdist.data.table.header_offset`). Two such words above words cannot be
    told from an edge: kept, and a line says so (rank 0). Words seen elsewhere are an edge."""
    alone = len(set(toks)) == 2 and counts == [1, 1] and not any(map(tb.is_number, toks))
    if alone and not names_above_numbers:
        a, b = (t.decode("utf-8", errors="replace") for t in toks)
        names_hint(path, f"{a!r}, {b!r}", "an edge whose two nodes appear")
    return alone and names_above_numbers


def names_hint(path, shown: str, read_as: str) -> None:
    """Say (rank 0) that a first line that may be column names, ``shown``, is read as data."""
    from graphdist.log import get_logger
    get_logger().info(f"{path}: the first line ({shown}) is read as {read_as} nowhere else: "
                      f"if it names the columns, comment it with #")


def drop_first(cols: list[np.ndarray], tab) -> tuple[list[np.ndarray], object]:
    """``cols`` and ``tab`` without their first row."""
    for i, rows in enumerate(tab.block_rows):
        if rows.size:
            tab.block_rows[i] = rows[1:]
            break
    tab.values = tab.values[1:]
    return [c[1:] for c in cols], tab


def id_column(tokens: np.ndarray, tab, what: str) -> np.ndarray:
    """A column of ids: int64 when every id is a plain integer; the strings written when they are
    digit strings some of which are not plain int64 (``000123``) or when any is not a number; an
    id written as a float must be an integer (``7.0`` is 7; ``2.5``, NaN refused naming the line)."""
    from graphdist.ids import canonical_ints
    body = np.char.lstrip(tokens, b"-")
    if tokens.size and bool(np.all(np.char.isdigit(body))):
        ints = canonical_ints(tokens)
        return ints if ints is not None else np.char.decode(tokens, "utf-8").astype(str)
    try:
        v = tokens.astype(np.float64)
    except ValueError:  # a word among them: every id as written
        return as_text(tokens, tab, what)
    bad = ~(v == np.floor(v)) | (np.abs(v) >= _ID_LIMIT)  # (nan, inf too)
    if bad.any():
        i = int(np.argmax(bad))
        raise DataFormatError(tab.path, f"{what} id {float(v[i]):g} is not an integer id", tab.line_of(i))
    return v.astype(np.int64)


def as_text(tokens: np.ndarray, tab, what: str) -> np.ndarray:
    """The ids as ``str``; a token that is not UTF-8 is refused naming its line (two such ids
    would otherwise be one after a lossy decode)."""
    try:
        return np.char.decode(tokens, "utf-8").astype(str)
    except UnicodeDecodeError:
        j = _not_utf8(tokens)
        raise DataFormatError(tab.path, f"{what} id {bytes(tokens[j])!r} is not UTF-8 text", tab.line_of(j)) from None


def _not_utf8(tokens: np.ndarray) -> int:
    """Index of the first token that is not UTF-8 (one exists)."""
    for i, t in enumerate(tokens.tolist()):
        try:
            t.decode("utf-8")
        except UnicodeDecodeError:
            return i
    raise AssertionError("every token is UTF-8")


def text_ids(cols: list[np.ndarray], tab, what: str = "node"):
    """``(ids str [N] in ascending UTF-8 order, inverse [len(cols), rows])``: one id space over the
    bytes columns ``cols`` (an edge list's sources and destinations), every id as written; only
    the distinct ids are decoded (an id that is not UTF-8 is refused naming its first line)."""
    rows = cols[0].size
    from graphdist.ids import unique_bytes
    uniq, inv = unique_bytes(np.concatenate(cols))
    inv = inv.reshape(len(cols), rows)
    try:
        ids = np.char.decode(uniq, "utf-8").astype(str)
    except UnicodeDecodeError:
        j = _not_utf8(uniq)
        at = int(np.argmax((inv == j).any(0)))
        raise DataFormatError(tab.path, f"{what} id {bytes(uniq[j])!r} is not UTF-8 text", tab.line_of(at)) from None
    return ids, inv
