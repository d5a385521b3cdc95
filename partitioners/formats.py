"""Graph and hypergraph files for the partitioners that read only files, written with numpy.

    write_parhip(path, indptr, indices, vwgt)    KaMinPar's binary ParHiP graph (``tofile``)
    write_hmetis(path, nptr, pins, vwgt)         hMetis text hypergraph for Mt-KaHyPar
    write_int_lines(f, ptr, values)              lines of decimal ints, vectorised

ParHiP binary layout (little endian, as KaMinPar's ``parhip_parser`` reads it)::

    u64 version   flags, a set bit means "absent" / "32-bit": bit 0 no edge weights, bit 1 no
                  node weights, bit 2 32-bit edge offsets, bit 3 32-bit node ids,
                  bit 4 32-bit node weights, bit 5 32-bit edge weights
    u64 n, u64 m
    offsets [n+1] byte offset of each node's first neighbour in the file
    edges   [m]   neighbour ids
    vwgt    [n]   node weights

The text writer turns a block of integers into ASCII digits with a handful of numpy passes (one
per decimal digit), never a Python loop per number or per line.
"""
from __future__ import annotations

import numpy as np

__all__ = ["write_parhip", "write_hmetis", "write_int_lines", "PARHIP_HEADER"]

PARHIP_HEADER = 24
"""Bytes of the ParHiP header (three u64)."""
_BLOCK = 1 << 22  # numbers per block of the text writer


def write_parhip(path, indptr: np.ndarray, indices: np.ndarray, vwgt: np.ndarray | None) -> None:
    """Binary ParHiP graph: 32-bit node ids and weights, 32-bit edge offsets when the file
    stays under 4 GiB (else 64-bit). ``indices`` is written as it is when already int32."""
    n, m = indptr.size - 1, int(indices.size)
    if n >= 2**31 - 1:
        raise ValueError(f"{n} nodes do not fit KaMinPar's 32-bit node ids")
    wide = PARHIP_HEADER + (n + 1) * 4 + m * 4 >= 2**32
    off_t = np.uint64 if wide else np.uint32
    version = (1 | (0 if vwgt is not None else 2) | (0 if wide else 4) | 8 | 16 | 32)
    base = PARHIP_HEADER + (n + 1) * np.dtype(off_t).itemsize
    with open(path, "wb") as f:
        np.array([version, n, m], dtype=np.uint64).tofile(f)
        for i in range(0, n + 1, _BLOCK):
            (base + indptr[i:i + _BLOCK].astype(np.uint64) * 4).astype(off_t).tofile(f)
        if indices.dtype == np.int32:
            indices.tofile(f)
        else:
            for i in range(0, m, _BLOCK):
                indices[i:i + _BLOCK].astype(np.int32).tofile(f)
        if vwgt is not None:
            if vwgt.size and (vwgt.max() >= 2**31 or vwgt.min() < 0):
                raise ValueError("node weights must fit in 31 bits for KaMinPar")
            vwgt.astype(np.int32).tofile(f)


def write_int_lines(f, ptr: np.ndarray, values: np.ndarray) -> None:
    """Write line ``r`` = ``values[ptr[r]:ptr[r+1]]`` as decimal numbers separated by one space
    (an empty row is an empty line). ``values`` must be >= 0."""
    rows = ptr.size - 1
    r0 = 0
    while r0 < rows:
        r1 = min(rows, max(r0 + 1, int(np.searchsorted(ptr, ptr[r0] + _BLOCK, side="right")) - 1))
        f.write(_lines(ptr[r0:r1 + 1] - ptr[r0], values[int(ptr[r0]):int(ptr[r1])]))
        r0 = r1


def _lines(ptr: np.ndarray, v: np.ndarray) -> bytes:
    cnt = np.diff(ptr)
    items = np.maximum(cnt, 1)  # an empty row is one item of zero digits: just its newline
    istart = np.zeros(cnt.size + 1, dtype=np.int64)
    np.cumsum(items, out=istart[1:])
    n_items = int(istart[-1])
    nd = np.zeros(n_items, dtype=np.int64)
    row = np.repeat(np.arange(cnt.size), cnt)
    pos = istart[row] + (np.arange(v.size) - ptr[row])  # item of each number
    v = v.astype(np.int64)
    digits = np.ones(v.size, dtype=np.int64)
    top = int(v.max()) if v.size else 0
    p = 1
    while p < 19 and 10 ** p <= top:
        digits += v >= 10 ** p
        p += 1
    nd[pos] = digits
    length = nd + 1
    end = np.cumsum(length)  # one past each item's separator
    out = np.full(int(end[-1]), ord(" "), dtype=np.uint8)
    out[end[istart[1:] - 1] - 1] = ord("\n")  # the last item of each row ends the line
    last = end[pos] - 2  # position of each number's last digit
    for p in range(int(digits.max()) if v.size else 0):
        has = digits > p
        out[last[has] - p] = (v[has] // 10 ** p % 10 + ord("0")).astype(np.uint8)
    return out.tobytes()


def write_hmetis(path, nptr: np.ndarray, pins: np.ndarray, vwgt: np.ndarray | None) -> None:
    """hMetis hypergraph: ``nets nodes [10]``, one line of 1-based pins per net, then one node
    weight per line (format 10) when ``vwgt`` is given."""
    n_nets = nptr.size - 1
    n = int(vwgt.size) if vwgt is not None else int(pins.max()) + 1 if pins.size else 0
    with open(path, "wb") as f:
        f.write(f"{n_nets} {n}{' 10' if vwgt is not None else ''}\n".encode())
        for i in range(0, n_nets, _BLOCK // 8):  # pins shifted to 1-based block by block
            j = min(n_nets, i + _BLOCK // 8)
            e0, e1 = int(nptr[i]), int(nptr[j])
            write_int_lines(f, nptr[i:j + 1] - e0, pins[e0:e1].astype(np.int64) + 1)
        if vwgt is not None:
            write_int_lines(f, np.arange(n + 1, dtype=np.int64), np.asarray(vwgt, dtype=np.int64))
