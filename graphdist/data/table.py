"""Fast reader for numeric text tables (edge lists, rating logs), vectorised with numpy.

    read_table(path, 2)                    -> Table(values int64 [rows, 2], ...)
    read_table(path, 3, dtype=np.float64)  -> user, item, rating as float64

Accepted: whitespace, tab, comma, ``;`` or ``::`` between fields; ``#`` / ``%`` comment lines;
blank lines; CRLF; ``.gz``; a first line of column names (``src,dst``: none of its fields a number,
the next data line's all numbers), skipped. Columns beyond ``ncols`` are ignored (an edge list's
weight column).

The text is processed in blocks of whole lines (``BLOCK`` bytes): separators are mapped to
spaces with ``bytes.translate``, comment lines are blanked, the fields of each line are counted
with numpy over the bytes, and the numbers are parsed by ``np.fromstring(sep=" ")`` (C). Lines
with more fields than ``ncols`` fall back to ``np.loadtxt`` for their block. Any problem is
located afterwards, line by line, only in the block where it happened, and reported as a
:class:`~graphdist.errors.DataFormatError` with the 1-based line number.
"""
from __future__ import annotations

import gzip
import io
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphdist.errors import DataFormatError, MissingFileError

__all__ = ["Table", "TextField", "read_table", "shard", "BLOCK", "is_number", "data_lines", "head_lines",
           "header_offset"]

BLOCK = 1 << 24
"""Bytes per block (whole lines): bounds the temporary arrays of one block."""

_SPACE, _NL = 32, 10
FIELD_SEPARATORS = bytes.maketrans(b"\t,;\r\v\f", b"      ")
_LIMIT = 2**62  # larger ids would overflow the int64 keys built from them


class TextField(DataFormatError):
    """A field that is no integer the table can hold, where its integers were read: ``word`` when
    it is no number at all (``alice``) or an integer beyond 2^62, else a number that is not an
    integer (``2.5``). A reader of ids may read the file again as text
    (:mod:`graphdist.data.tokens`) where any field is a word."""

    def __init__(self, path, message: str, line: int | None = None, *, word: bool = True):
        super().__init__(path, message, line)
        self.word = word


@dataclass
class Table:
    """Parsed rows and where they came from."""

    values: np.ndarray
    """``[rows, ncols]`` parsed values."""
    path: Path
    """The file."""
    first_lines: list[int]
    """1-based line number of the first line of each block."""
    block_rows: list[np.ndarray]
    """Per block: the 0-based line index (within the block) of each of its rows."""

    def line_of(self, row: int) -> int:
        """1-based line number of data row ``row``."""
        for first, lines in zip(self.first_lines, self.block_rows):
            if row < lines.size:
                return first + int(lines[row])
            row -= lines.size
        raise IndexError(row)


def _open(path: Path):
    try:
        return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    except OSError as e:
        raise MissingFileError(f"{path}: cannot read ({e.strerror or e})") from None


def blocks(path: Path, start: int = 0, end: int | None = None):
    """The file (or its bytes ``[start, end)``, whole lines) in blocks of whole lines (about
    ``BLOCK`` bytes each)."""
    rest = b""
    left = None if end is None else end - start
    with _open(path) as fh:
        if start:
            fh.seek(start)
        while left is None or left > 0:
            try:
                chunk = fh.read(BLOCK if left is None else min(BLOCK, left))
            except OSError as e:
                raise DataFormatError(path, f"cannot read ({e.strerror or e})") from None
            if not chunk:
                break
            if left is not None:
                left -= len(chunk)
            chunk = rest + chunk
            cut = chunk.rfind(b"\n")
            if cut < 0:
                rest = chunk
                continue
            yield chunk[:cut + 1]
            rest = chunk[cut + 1:]
    if rest:
        yield rest + b"\n"


def shard(path, rank: int, shards: int) -> tuple[int, int, int]:
    """``(start, end, lines)``: the bytes of shard ``rank`` of ``shards`` of an uncompressed
    text file, in whole lines (a line belongs to the shard its first byte falls in), and the
    number of lines that start in it; the shards cover the file exactly once."""
    path = Path(path)
    size = path.stat().st_size

    def line_start(pos: int) -> int:  # the first line start at or after pos
        if pos <= 0 or pos >= size:
            return min(max(pos, 0), size)
        with _open(path) as fh:
            fh.seek(pos - 1)
            while True:
                chunk = fh.read(1 << 16)
                if not chunk:
                    return size
                i = chunk.find(b"\n")
                if i >= 0:
                    return pos + i
                pos += len(chunk)

    start, end = line_start(size * rank // shards), line_start(size * (rank + 1) // shards)
    lines = sum(b.count(b"\n") for b in blocks(path, start, end)) if end > start else 0
    return start, end, lines


def _slow_line(path, text: bytes, lineno: int, ncols: int, dtype, what: str):
    """Raise the DataFormatError for one bad line (called only after the fast path failed)."""
    toks = text.split()
    if len(toks) < ncols:
        raise DataFormatError(path, f"expected at least {ncols} fields, got {len(toks)}: "
                                    f"{text[:60].decode(errors='replace')!r}", lineno)
    for tok in toks[:ncols]:
        try:
            v = int(tok) if dtype == np.int64 else float(tok)
        except ValueError:
            msg = f"{tok.decode(errors='replace')!r} is not {'an integer ' + what if dtype == np.int64 else 'a number'}"
            if dtype != np.int64:
                raise DataFormatError(path, msg, lineno) from None
            raise TextField(path, msg, lineno, word=not is_number(tok)) from None
        if dtype == np.int64 and not -_LIMIT < v < _LIMIT:
            raise TextField(path, f"{what} {tok.decode()} is out of range (|id| < 2^62)", lineno)


def parse_block(path: Path, first: int, block: bytes, ncols: int, dtype, what: str):
    """``(values [rows, ncols], line index of each row within the block)``."""
    text = (block.replace(b"::", b"  ") if b"::" in block else block).translate(FIELD_SEPARATORS)
    buf = np.frombuffer(text, dtype=np.uint8)
    nl = np.flatnonzero(buf == _NL)
    starts = np.concatenate([[0], nl[:-1] + 1])
    ends = nl
    tok = buf > _SPACE  # after translate: every separator is a space, lines end in \n (< space)
    head = np.empty(buf.size, dtype=np.int8)
    np.greater(tok[1:], tok[:-1], out=head[1:].view(bool))
    head[:1] = tok[:1]
    fields = np.add.reduceat(head, starts, dtype=np.int32)  # each line's segment ends with its \n
    # first character of each line (after leading spaces) decides whether it is a comment
    first_char = buf[starts].copy()
    nonempty = fields > 0
    for i in np.flatnonzero(nonempty & (first_char == _SPACE)):  # rare: leading spaces
        j = int(starts[i])
        while buf[j] == _SPACE:
            j += 1
        first_char[i] = buf[j]
    comment = (first_char == ord("#")) | (first_char == ord("%"))
    data = nonempty & ~comment
    rows = np.flatnonzero(data)
    if comment.any():
        arr = bytearray(text)
        for i in np.flatnonzero(comment):
            arr[starts[i]:ends[i]] = b" " * int(ends[i] - starts[i])
        text = bytes(arr)
    n = rows.size
    counts = fields[rows]
    if n and counts.min() < ncols:
        bad = int(rows[np.argmax(counts < ncols)])
        _slow_line(path, text[starts[bad]:ends[bad]], first + bad, ncols, dtype, what)
    values = None
    if n and counts.max() == ncols:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                flat = np.fromstring(text, dtype=dtype, sep=" ")
            except (ValueError, DeprecationWarning):
                flat = None
        if flat is not None and flat.size == n * ncols:
            values = flat.reshape(n, ncols)
    elif n:  # extra columns: numpy's loadtxt on the data lines, keeping the first ncols
        try:
            values = np.loadtxt(io.BytesIO(text), dtype=dtype, usecols=range(ncols), ndmin=2, comments=None)
        except ValueError:
            values = None
        if values is not None and values.shape[0] != n:
            values = None
    if n and values is None:  # find the line that broke the fast path
        for i in rows:
            _slow_line(path, text[starts[i]:ends[i]], first + int(i), ncols, dtype, what)
        raise DataFormatError(path, f"could not parse lines {first}..{first + starts.size - 1}")
    if values is None:
        values = np.zeros((0, ncols), dtype=dtype)
    if dtype == np.int64 and values.size and (values.max() >= _LIMIT or values.min() <= -_LIMIT):
        big = np.flatnonzero((np.abs(values) >= _LIMIT).any(1))
        if big.size:  # fromstring saturates on overflow: name the line
            i = int(rows[big[0]])
            _slow_line(path, text[starts[i]:ends[i]], first + i, ncols, dtype, what)
            raise DataFormatError(path, f"{what} out of range (|id| < 2^62)", first + i)
    return values, rows, int(nl.size)


def is_number(tok: bytes) -> bool:
    """Whether a field parses as a number (``float``)."""
    try:
        float(tok)
        return True
    except ValueError:
        return False


def data_lines(block: bytes, most: int, after: int = 0) -> list[tuple[int, int, list[bytes]]]:
    """``(start, end, fields)`` of the first ``most`` data lines (not blank, not a comment) of
    ``block`` at or after byte ``after``."""
    pos, found = after, []
    while len(found) < most and pos < len(block):
        end = block.find(b"\n", pos)
        end = len(block) if end < 0 else end
        line = block[pos:end]
        toks = (line.replace(b"::", b"  ") if b"::" in line else line).translate(FIELD_SEPARATORS).split()
        if toks and toks[0][:1] not in (b"#", b"%"):
            found.append((pos, end, toks))
        pos = end + 1
    return found


HEAD_BYTES = 1 << 20
"""Bytes of a file's head searched for a line of column names (its first data line)."""


def head_lines(path: Path, most: int) -> list[tuple[int, int, list[bytes]]]:
    """:func:`data_lines` of the file's first :data:`HEAD_BYTES`."""
    with _open(path) as fh:
        return data_lines(fh.read(HEAD_BYTES), most)


def header_offset(path: Path, ncols: int) -> int | None:
    """Byte offset of the file's first data line when it is column names (none of its first
    ``ncols`` fields a number, the next data line's all numbers), else None; read from the file's
    first bytes, so every shard's reader finds the same line."""
    lines = head_lines(path, 2)
    if (len(lines) == 2 and not any(map(is_number, lines[0][2][:ncols])) and len(lines[1][2]) >= ncols
            and all(map(is_number, lines[1][2][:ncols]))):
        return lines[0][0]
    return None


def read_table(path, ncols: int, *, dtype=np.int64, what: str = "node id",
               byte_range: tuple[int, int] | None = None, first_line: int = 1) -> Table:
    """Read the first ``ncols`` columns of every data line of ``path`` (see the module doc);
    with ``byte_range`` only the whole lines of those bytes (:func:`shard`), whose first line
    is line ``first_line`` of the file (for error messages)."""
    path = Path(path)
    parts, firsts, lines = [], [], []
    first = first_line
    pos = (byte_range or (0, None))[0]
    at = header_offset(path, ncols) if pos < HEAD_BYTES else None  # a later shard cannot hold it
    for block in blocks(path, *(byte_range or (0, None))):
        if at is not None and pos <= at < pos + len(block):  # column names: a comment line
            block = block[:at - pos] + b"#" + block[at - pos + 1:]
        pos += len(block)
        v, rows, n_lines = parse_block(path, first, block, ncols, dtype, what)
        parts.append(v)
        firsts.append(first)
        lines.append(rows.astype(np.int32) if rows.size and rows.max() < 2**31 else rows)
        first += n_lines
    values = np.concatenate(parts) if parts else np.zeros((0, ncols), dtype=dtype)
    return Table(values, path, firsts, lines)
