"""The user's own ids: the map from graphdist's node index to the id the input gave the node.

Loaders number nodes 0..N-1 (an edge list's ids in ascending order, a ratings file's users and
items each in ascending order of their ids); every output is keyed back by this map. An id
array is one of::

    None                    the index is the id (Planetoid, OGB, generated graphs, npz without
                            node_ids, LightGCN files, rec-synth)
    numpy int64 [N]         integer ids (an edge list's, an npz's ``node_ids``, a ratings file
                            whose ids are all plain integers)
    numpy str   [N]         ids exactly as written in the file, where any of them is not a plain
                            integer (``A2SUAM1J3GNN3B``, ``00042``, ``18446744073709551617``)

:func:`id_type` names the kind (``index`` / ``int64`` / ``string``: what the output columns
are). A partition artifact stores per part the ids of its owned nodes only
(``ids_<rank>.npy``, :func:`save_ids` / :func:`load_ids`), so a rank never needs the whole map.
Between ranks ids travel as fixed-width byte rows (:func:`encode` / :func:`decode`), never
pickled.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

__all__ = ["id_type", "describe", "take", "canonical_ints", "token_ids", "unique_bytes", "word_hash", "save_ids",
           "load_ids", "encode", "decode", "as_requested", "width", "ID_FILE", "INDEX", "INT64", "STRING"]

INDEX, INT64, STRING = "index", "int64", "string"
ID_FILE = "ids_{:05d}.npy"
"""One part's ids in a partition artifact: its owned nodes' ids, in ascending node index."""


def id_type(ids) -> str:
    """``index`` (None), ``int64`` or ``string``."""
    if ids is None:
        return INDEX
    a = np.asarray(ids)
    return STRING if a.dtype.kind in "US" else INT64


def describe(ids) -> str:
    """One line for ``graphdist data info``: ``the index (0 .. N-1)``, ``int64: 7, ..., 999,999`` or
    ``strings as written: 'alice', ..., 'zoe'`` (the first and the last node's; an id over 40
    characters shortened)."""
    kind = id_type(ids)
    if kind == INDEX:
        return "the index (0 .. N-1)"
    a = ids.numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if a.size == 0:
        return kind
    if kind == INT64:
        return f"int64: {int(a[0]):,}, ..., {int(a[-1]):,}"
    cut = [t if len(t) <= 40 else t[:37] + "..." for t in (str(a[0]), str(a[-1]))]
    return f"strings as written: {cut[0]!r}, ..., {cut[1]!r}"


def take(ids, index) -> np.ndarray:
    """The ids of the nodes ``index`` (an int array): ``ids[index]``, or ``index`` itself (int64)
    when the index is the id."""
    index = np.asarray(index.numpy() if isinstance(index, torch.Tensor) else index, dtype=np.int64)
    if ids is None:
        return index.copy()
    a = ids.numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    return a[index]


def canonical_ints(tokens: np.ndarray) -> np.ndarray | None:
    """``tokens`` (bytes, ``S`` dtype) as int64 when every one is a plain integer written the
    way Python writes it (``-12``, ``7``; not ``007``, ``+7``, ``7.0``, or beyond int64), else
    None: such ids are kept as strings, exactly as written."""
    if tokens.size == 0:
        return np.zeros(0, dtype=np.int64)
    try:
        with np.errstate(all="raise"):
            v = tokens.astype(np.int64)
    except (ValueError, OverflowError, FloatingPointError):
        return None
    return v if np.array_equal(v.astype(tokens.dtype), tokens) else None


_MIX = np.uint64(0x9E3779B97F4A7C15)


def word_hash(tokens: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each bytes token (``S`` array), over its 8-byte words (zero-padded)."""
    n, w = tokens.size, max(tokens.dtype.itemsize, 1)
    m = -(-w // 8)
    b = np.zeros((n, 8 * m), dtype=np.uint8)
    b[:, :w] = np.ascontiguousarray(tokens).view(np.uint8).reshape(n, w)
    words = b.view("<u8")
    h = words[:, 0].copy()
    with np.errstate(over="ignore"):
        for j in range(1, m):
            h ^= h >> np.uint64(31)
            h *= _MIX
            h += words[:, j]
    return h


def unique_bytes(tokens: np.ndarray):
    """``np.unique(tokens, return_inverse=True)`` for a bytes (``S``) array, the same result
    faster: the distinct tokens found by their 64-bit hash (:func:`word_hash`, an integer sort),
    checked token for token, and only the distinct ones sorted as strings; where two distinct
    tokens share a hash, ``np.unique`` itself."""
    tokens = np.asarray(tokens).reshape(-1)
    if tokens.size >= 1 << 14:  # below, numpy's own sort is as fast
        _, first, hinv = np.unique(word_hash(tokens), return_index=True, return_inverse=True)
        reps = tokens[first]
        if np.array_equal(reps[hinv], tokens):  # else a collision: two tokens, one hash
            order = np.argsort(reps, kind="stable")
            return reps[order], _ranks(order)[hinv.reshape(-1)]
    uniq, inv = np.unique(tokens, return_inverse=True)
    return uniq, inv.reshape(-1)


def _ranks(order: np.ndarray) -> np.ndarray:
    """The inverse permutation of ``order``: where each element went."""
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank


def token_ids(tokens: np.ndarray):
    """``(ids, inverse)``: the distinct ids of ``tokens`` (bytes) in ascending order (numeric for
    integer ids, else by their UTF-8 bytes) as int64 or str, and each token's index into them."""
    uniq, inv = unique_bytes(tokens)
    ints = canonical_ints(uniq)
    if ints is None:
        return np.char.decode(uniq, "utf-8", errors="replace").astype(str), inv
    order = np.argsort(ints, kind="stable")
    return ints[order], _ranks(order)[inv]


def as_requested(tokens: list[str], kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Ids a user typed (a ``--users`` file) in the type of an id map of ``kind``: ``(ids,
    valid)``; ``valid`` is False for a token that cannot be an id of that type (a word where
    the ids are integers)."""
    if kind == STRING:
        return np.array(tokens, dtype=str), np.ones(len(tokens), dtype=bool)
    out = np.zeros(len(tokens), dtype=np.int64)
    ok = np.zeros(len(tokens), dtype=bool)
    for i, t in enumerate(tokens):
        try:
            v = int(t)
        except ValueError:
            continue
        if str(v) == t and (kind == INT64 or v >= 0) and -2**63 <= v < 2**63:
            out[i], ok[i] = v, True
    return out, ok


def save_ids(path, ids: np.ndarray) -> None:
    """``ids`` (int64 or str) as a ``.npy`` file (no pickle), atomically and durably; strings as
    wide as the widest of ``ids`` (so the file depends on the ids only)."""
    from graphdist.fileio import replace_durably
    p = Path(path)
    tmp = p.with_name(f"{p.name}.tmp{os.getpid()}")
    a = np.asarray(ids)
    if a.dtype.kind in "iu":
        a = a.astype(np.int64)
    else:
        a = a.astype(str)
        a = a.astype(f"<U{max(1, int(np.char.str_len(a).max()) if a.size else 1)}")
    try:
        with open(tmp, "wb") as f:
            np.save(f, a, allow_pickle=False)
        replace_durably(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load_ids(path) -> np.ndarray:
    """The ids :func:`save_ids` wrote."""
    return np.load(path, allow_pickle=False)


def encode(ids: np.ndarray, width: int | None = None) -> torch.Tensor:
    """``[n, W]`` uint8 rows (int64: 8 bytes; str: UTF-8, zero-padded to ``width`` or the widest)
    to send ids between ranks as a tensor."""
    a = np.asarray(ids)
    if a.dtype.kind in "iu":
        return torch.from_numpy(np.ascontiguousarray(a.astype(np.int64)).view(np.uint8).reshape(-1, 8).copy())
    b = np.char.encode(a.astype(str), "utf-8")
    w = max(int(width or 0), b.dtype.itemsize if b.size else 1, 1)
    b = b.astype(f"S{w}")
    return torch.from_numpy(np.frombuffer(b.tobytes(), dtype=np.uint8).reshape(-1, w).copy())


def decode(rows: torch.Tensor, kind: str) -> np.ndarray:
    """The ids :func:`encode` made (``kind``: ``int64`` or ``string``)."""
    a = np.ascontiguousarray(rows.cpu().numpy())
    if kind != STRING:
        return a.reshape(-1, 8).view(np.int64).reshape(-1).copy()
    w = a.shape[1] if a.ndim == 2 else 1
    return np.char.decode(a.view(f"S{w}").reshape(-1), "utf-8").astype(str)


def width(ids: np.ndarray) -> int:
    """Bytes of the widest id of ``ids`` as :func:`encode` writes it."""
    a = np.asarray(ids)
    if a.dtype.kind in "iu":
        return 8
    return int(np.char.str_len(np.char.encode(a.astype(str), "utf-8")).max()) if a.size else 1
