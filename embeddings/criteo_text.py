"""A Criteo TSV line's 40 fields into the cache's arrays (:mod:`embeddings.criteo`): line by line,
naming a bad line (:func:`parse_lines`), or a chunk at once with numpy (:func:`parse_lines_fast`);
the dense and id conversions the table readers share (:mod:`embeddings.criteo_tables`)."""
from __future__ import annotations

import numpy as np

from embeddings.data import NUM_DENSE, NUM_SPARSE
from graphdist.errors import DataFormatError

NUM_FIELDS = 1 + NUM_DENSE + NUM_SPARSE


def parse_lines(lines: list[str], path: str, first_line: int, skip_bad: bool, skipped: list | None = None,
                sep: str = "tab"):
    """Parse text lines (their fields separated by tabs; ``sep`` names the file's separator in the
    messages); returns ``(dense, sparse, labels, n_bad)`` of the good lines (the index in
    ``lines`` of each bad one is appended to ``skipped``)."""
    dense = np.zeros((len(lines), NUM_DENSE), dtype=np.float32)
    sparse = np.zeros((len(lines), NUM_SPARSE), dtype=np.uint32)
    labels = np.zeros(len(lines), dtype=np.int8)
    k = bad = 0
    for j, line in enumerate(lines):
        line = line.rstrip("\r\n")
        f = line.split("\t")
        try:
            if len(f) != NUM_FIELDS:
                raise ValueError(f"expected {NUM_FIELDS} {sep}-separated fields, got {len(f)}")
            lab = f[0]
            if lab not in ("0", "1"):
                raise ValueError(f"label must be 0 or 1, got {lab!r}")
            for i in range(NUM_DENSE):
                v = f[1 + i]
                if v:
                    try:
                        x = int(v)
                    except ValueError:
                        raise ValueError(f"dense field {i + 1} is not an integer: {v!r}") from None
                    dense[k, i] = np.log1p(max(x, 0))
            for i in range(NUM_SPARSE):
                v = f[1 + NUM_DENSE + i]
                if v:
                    if len(v) > 8 or not all(c in "0123456789abcdefABCDEF" for c in v):
                        raise ValueError(f"categorical field {i + 1} is not an 8-digit hex id: {v!r}")
                    sparse[k, i] = int(v, 16)
            labels[k] = 1 if lab == "1" else 0
            k += 1
        except ValueError as e:
            if not skip_bad:
                raise DataFormatError(path, f"{e} (use --skip-bad-lines to skip such lines)",
                                      line=first_line + j) from None
            dense[k] = 0
            sparse[k] = 0
            bad += 1
            if skipped is not None:
                skipped.append(j)
    return dense[:k], sparse[:k], labels[:k], bad


_HEX = np.full(256, -1, dtype=np.int8)
_HEX[0] = -2  # padding of ids shorter than 8 characters in an S8 array
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


def parse_lines_fast(lines: list[bytes]):
    """Vectorised parse of raw (bytes) lines; ``None`` if anything is off, and then
    :func:`parse_lines` finds and names the bad line. Several times faster than line by line."""
    n = len(lines)
    if n == 0:
        return None
    # every line must have its own 40 fields: a 41-field line next to a 39-field one has the
    # right total but would shift the columns of both
    if any(ln.count(b"\t") != NUM_FIELDS - 1 for ln in lines):
        return None
    text = b"".join(lines)
    if b"\r" in text:
        text = text.replace(b"\r\n", b"\n")
    if text.endswith(b"\n"):
        text = text[:-1]
    fields = text.replace(b"\n", b"\t").split(b"\t")
    if len(fields) != n * NUM_FIELDS:
        return None
    a = np.array(fields, dtype=object).reshape(n, NUM_FIELDS)
    lab = a[:, 0].astype("S")
    if lab.dtype.itemsize != 1 or not ((lab == b"0") | (lab == b"1")).all():
        return None
    ds = a[:, 1:1 + NUM_DENSE].astype("S")
    try:
        di = np.where(ds == b"", b"0", ds).astype(np.int64)
    except (ValueError, OverflowError):
        return None
    cs = a[:, 1 + NUM_DENSE:].astype("S")
    if cs.dtype.itemsize > 8:  # some id longer than 8 hex digits
        return None
    vals, bad = hex_ids(cs)
    if bad.any():
        return None
    return dense_values(di), vals, (lab == b"1").astype(np.int8), 0


def dense_values(counts: np.ndarray) -> np.ndarray:
    """The cache's dense features of integer counts: ``log(1 + max(x, 0))`` as float32."""
    return np.log1p(np.maximum(counts, 0)).astype(np.float32)


def hex_ids(cs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, bad)`` of byte strings of up to 8 hex digits (``b""``: 0): uint32 ids and, of the same
    shape, where a string is longer or holds another character (its id then 0)."""
    bad = np.zeros(cs.shape, dtype=bool)
    if cs.dtype.itemsize > 8:
        bad = np.char.str_len(cs) > 8
        cs = np.where(bad, b"", cs)
    raw = np.frombuffer(cs.astype("S8").tobytes(), dtype=np.uint8).reshape(*cs.shape, 8)
    dig = _HEX[raw]
    bad |= (dig == -1).any(axis=-1)
    vals = np.zeros(cs.shape, dtype=np.uint32)
    for k in range(8):  # Horner over the (left-aligned, zero-padded) hex digits
        dk = dig[..., k]
        m = dk >= 0
        vals = np.where(m, (vals << np.uint32(4)) | dk.astype(np.uint32), vals)
    return np.where(bad, np.uint32(0), vals), bad
