"""An edge list read by k ranks together, each its shard (the k-worker build,
:mod:`graphdist.partition.build`), numbered as the one-process loader numbers it
(:func:`graphdist.data.files.load_edgelist`).

    src, dst, n, ids = read_edges(path, rank, k)      # collective

Rank ``r`` reads bytes ``[r S/k, (r+1) S/k)`` in whole lines (:func:`graphdist.data.table.shard`),
error messages naming the file's own line numbers. The node ids are the distinct ids of every
shard, merged, ascending. Where any rank reads a word (or an integer beyond 2^62), every rank
reads its shard again as text and the ids are the strings written, in ascending UTF-8 order:
each rank's distinct ids travel as UTF-8 byte rows as wide as the widest id, and stay bytes
(one byte per byte of the widest id, per node) until the caller decodes its owned nodes'. Which
path, which error, and whether the file's first line is column names are decided alike on every
rank, from what each reported.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from graphdist import comm
from graphdist.errors import DataFormatError, GraphdistError

__all__ = ["read_edges"]


def read_edges(path: Path, rank: int, k: int):
    """This rank's edges ``(src, dst)`` renumbered to 0..N-1 by ascending original id, N, and the
    original ids ([N], ascending: node i's id; int64, or UTF-8 bytes where the ids are words)."""
    from graphdist.data import parquet
    from graphdist.data.table import TextField, read_table, shard
    if parquet.is_parquet(path):
        return _parquet_edges(path, rank, k)
    start, end, lines = shard(path, rank, k)
    first = 1 + sum(comm.all_gather_json(int(lines))[:rank])
    tab, err, neg, why, wide, text = None, None, None, None, None, None
    try:
        tab = read_table(path, 2, byte_range=(start, end), first_line=first)
    except TextField as e:  # every rank must learn of it, not only this one
        err, wide = str(e), str(e) if e.word else None
        text, why = _as_text(path, (start, end), first)
    except GraphdistError as e:
        err = str(e)
    arr = tab.values if tab is not None else np.zeros((0, 2), dtype=np.int64)
    if arr.size and arr.min() < 0:
        row = int(np.flatnonzero((arr < 0).any(axis=1))[0])
        neg = str(DataFormatError(path, f"negative node id {int(arr[row].min())}", tab.line_of(row)))
    every = comm.all_gather_json((int(arr.shape[0]), err, neg, why, wide))
    reasons = [e[3] for e in every if e[3]] + [e[4] for e in every if e[4]]  # a word, else an integer beyond 2^62
    if reasons:  # every rank reads its shard again as text
        del tab, arr
        return _word_edges(path, rank, (start, end), first, reasons[0], text)
    # as one process: a bad field anywhere before a negative id anywhere (read, then checked)
    _agree_first_error([(e[0], e[1]) for e in every] if any(e[1] for e in every) else
                       [(e[0], e[2]) for e in every], path)
    del tab
    ids = torch.from_numpy(np.unique(arr))
    ids = np.unique(comm.all_gather_rows(ids).numpy())
    return _renumbered(ids, arr[:, 0], arr[:, 1])


def _parquet_edges(path: Path, rank: int, k: int):
    """:func:`read_edges` of a Parquet edge list: rank r reads its share of the row groups
    (:func:`graphdist.data.parquet.edge_columns`); the ids are integers where every rank's read
    as integers (:func:`graphdist.data.parquet.alike`), else every rank's are the strings written,
    numbered as the word ids of a text file (their UTF-8 bytes, ascending)."""
    from graphdist.data.parquet import alike, edge_columns
    from graphdist.ids import encode, unique_bytes, width
    src = dst = np.zeros(0, dtype=np.int64)
    err = None
    try:
        src, dst = edge_columns(path, rank, k)
    except GraphdistError as e:
        err = str(e)
    ints = alike([src, dst])
    every = comm.all_gather_json((int(src.size), err, ints[0].dtype.kind == "U"))
    _agree_first_error(every, path)
    if not any(e[2] for e in every):
        src, dst = ints
        ids = np.unique(comm.all_gather_rows(torch.from_numpy(np.unique(np.concatenate([src, dst])))).numpy())
        return _renumbered(ids, src, dst)
    del ints
    src, dst = (np.char.encode(c.astype(str), "utf-8") for c in (src, dst))
    mine = np.char.decode(np.unique(np.concatenate([src, dst])), "utf-8") if src.size else np.zeros(0, dtype=str)
    w = max(comm.all_gather_json(width(mine)))
    rows = comm.all_gather_rows(encode(mine, w)).numpy()
    ids = unique_bytes(np.ascontiguousarray(rows).view(f"S{w}").reshape(-1))[0]
    return _renumbered(ids, src, dst)


def _as_text(path: Path, byte_range: tuple[int, int], first: int):
    """``((fields, Table) or None, why)``: the shard read as text (column names kept: the caller
    decides, :func:`_first_line`), and why its ids are text (:func:`graphdist.data.tokens.why_text`,
    past a first line of column names), or None: no word (or a shard that cannot be read so)."""
    from graphdist.data.table import header_offset
    from graphdist.data.tokens import read_fields, why_text
    try:
        text = read_fields(path, 2, byte_range=byte_range, first_line=first, header=False)
    except GraphdistError:
        return None, None
    at = header_offset(path, 2)
    return text, why_text(*text, skip_first=at is not None and byte_range[0] <= at < byte_range[1])


def _agree_first_error(every: list, path: Path) -> None:
    """Raise, alike on every rank, the earliest shard's error of ``every`` (per rank: ``(rows,
    error or None, ...)``), or that no rank found an edge."""
    first_error = next((e[1] for e in every if e[1] is not None), None)
    if first_error is not None:
        raise GraphdistError(first_error)
    if sum(e[0] for e in every) == 0:
        raise DataFormatError(path, "no edges found")


def _renumbered(ids: np.ndarray, src: np.ndarray, dst: np.ndarray):
    """``(src, dst)`` as indices into the ascending ``ids`` (int64, or UTF-8 bytes), N and ``ids``."""
    from graphdist.data.graph import np_ids
    n = int(ids.size)
    src, dst = (np.ascontiguousarray(np_ids(np.searchsorted(ids, c), max(n, 1))) for c in (src, dst))
    return src, dst, n, ids


def _word_edges(path: Path, rank: int, byte_range: tuple[int, int], first: int, why: str, text=None):
    """:func:`read_edges` where the ids are words, for the reason ``why`` (see the module
    docstring); ``text``: the shard already read as text (:func:`_as_text`), or None."""
    from graphdist.data.tokens import read_fields, text_ids
    from graphdist.ids import encode, unique_bytes, width
    cols, tab, err, mine = [np.zeros(0, "S1")] * 2, None, None, np.zeros(0, dtype=str)
    try:
        cols, tab = text or read_fields(path, 2, byte_range=byte_range, first_line=first, header=False)
    except GraphdistError as e:
        err = str(e)
    _agree_first_error(comm.all_gather_json((int(cols[0].size), err)), path)  # every rank, alike
    cols, tab = _first_line(path, rank, cols, tab)
    try:
        mine = text_ids(cols, tab)[0]
    except GraphdistError as e:
        err = str(e)
    every = comm.all_gather_json((int(cols[0].size), err, width(mine)))
    _agree_first_error(every, path)
    from graphdist.log import get_logger
    get_logger().info(f"{path}: node ids kept as the strings written ({why})")
    w = max(e[2] for e in every)
    rows = comm.all_gather_rows(encode(mine, w)).numpy()
    del mine
    ids = unique_bytes(np.ascontiguousarray(rows).view(f"S{w}").reshape(-1))[0]
    del rows
    return _renumbered(ids, cols[0], cols[1])


def _first_line(path: Path, rank: int, cols: list, tab):
    """The file's first data line (the first row of the first rank with rows) dropped as column
    names, or kept, as :func:`graphdist.data.tokens.first_line` decides from every shard's count
    of its two fields (collective)."""
    from graphdist.data.table import header_offset
    from graphdist.data.tokens import drop_first, first_line, occurrences
    rows = comm.all_gather_json(int(cols[0].size))
    owner = next((r for r, n in enumerate(rows) if n), None)
    if owner is None:
        return cols, tab
    mine = [bytes(c[0]).hex() for c in cols] if rank == owner else None
    toks = [bytes.fromhex(t) for t in comm.all_gather_json(mine)[owner]]
    counts = np.sum(comm.all_gather_json(occurrences(cols, toks)), axis=0).tolist()
    if first_line(path, toks, counts, header_offset(path, 2) is not None) and rank == owner:
        cols, tab = drop_first(cols, tab)
    return cols, tab
