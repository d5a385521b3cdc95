"""Random numbers that are functions of a key and a position only (no generator state), so k
ranks draw what one process draws and a resumed run draws what an unbroken one drew. The one
generator of graphdist: every draw is the lowbias32 hash (:func:`mix32`) of a key (:func:`key32`
of e.g. seed, epoch, layer) and a global id.

Matrices (dropout masks, stochastic rounding) hash once per row and once per column::

    r_i = mix32(row_i ^ key)      c_j = mix32(j * C ^ ~key)         (per row / per column)
    bits[i, j] = int32((r_i ^ c_j) * M)                               (one multiply per element)

Per element that is an xor and a multiply (the hashes run once per row and once per column),
several times cheaper than torch's generators on a CPU. Used for dropout masks keyed by global
node id (:func:`graphdist.gnn.models.keyed_dropout`) and, through :func:`keyed_uniform` (rows
keyed by position), for the stochastic rounding of quantised halo rows
(:mod:`graphdist.exchange.quant`).

One number per id (the recommender's BPR sampling, :mod:`graphdist.rec.sampling`, and its
evaluation users) takes two hashes of the id under two keys, 53 bits of a float64::

    u(id) = (mix32(id ^ key) * 2^21 + mix32(id ^ key') / 2^11) / 2^53        (:func:`keyed_unit`)
"""
from __future__ import annotations

import sys
import threading

import numpy as np
import torch

__all__ = ["mix32", "key32", "keyed_bits", "keyed_uniform", "keyed_unit", "keyed_below", "id_hashes",
           "position_hashes", "bits_into", "centred_into", "BLOCK", "blocks"]

BLOCK = 1 << 18
"""Values per block of rows on a CPU: elementwise passes over one block run in cache, on scratch
buffers of ``4 * BLOCK`` bytes (1 MiB) kept per thread (:func:`blocks`). A fresh row-sized
buffer costs more in page faults than the arithmetic on it (``train-gcn`` gives every tensor
above ``--malloc-mmap-mb`` its own mapping). Accelerators take all rows at once."""

_local = threading.local()


def mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 integer hash on int32 tensors (wrapping multiplies, logical shifts); a new
    tensor, ``x`` is left as it is."""
    x = torch.bitwise_right_shift(x, 16).bitwise_and_(0xFFFF).bitwise_xor_(x)
    x.mul_(0x7FEB352D)
    x.bitwise_xor_(torch.bitwise_right_shift(x, 15).bitwise_and_(0x1FFFF))
    x.mul_(0x846CA68B - (1 << 32))
    return x.bitwise_xor_(torch.bitwise_right_shift(x, 16).bitwise_and_(0xFFFF))


def key32(*values: int) -> int:
    """A 32-bit key (as a signed int32 value) from small integers, e.g. (seed, epoch, layer)."""
    h = 0x811C9DC5
    for v in values:
        h = ((h ^ (int(v) & 0xFFFFFFFF)) * 0x01000193) & 0xFFFFFFFF
        h = ((h ^ (h >> 15)) * 0x2C1B3C6D) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _rows32(ids: torch.Tensor) -> torch.Tensor:
    """``(id mod 2^32) ^ (floor(id / 2^32) * 0x9E3779B1)`` as wrapping int32: the id itself below
    2^31 (the two halves of the int64, read in place on a little-endian machine)."""
    if ids.numel() == 0:
        return torch.empty(ids.shape, dtype=torch.int32, device=ids.device)
    halves = ids.to(torch.int64).reshape(-1).contiguous().view(torch.int32).view(-1, 2)
    lo, hi = (halves[:, 0], halves[:, 1]) if sys.byteorder == "little" else (halves[:, 1], halves[:, 0])
    return hi.mul(0x9E3779B1 - (1 << 32)).bitwise_xor_(lo).view(ids.shape)


def _hashes(rows32: torch.Tensor, width: int, key: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = mix32(rows32 ^ key)
    cols = torch.arange(width, dtype=torch.int32, device=rows32.device) * (0x85EBCA6B - (1 << 32))
    return rows, mix32(cols ^ ~key)


def keyed_bits(ids: torch.Tensor, width: int, key: int) -> torch.Tensor:
    """``[len(ids), width]`` int32, uniform over all 32-bit values, a function of
    ``(key, ids[i], j)``."""
    rows, cols = id_hashes(ids, width, key)
    return bits_into(torch.empty((rows.numel(), width), dtype=torch.int32, device=rows.device), rows, cols)


def id_hashes(ids: torch.Tensor, width: int, key: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row and per-column hashes ``(r [len(ids)], c [width])`` of rows keyed by ``ids``
    (:func:`bits_into` fills any block of rows from them)."""
    return _hashes(_rows32(ids), width, key)


def bits_into(buf: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Fill ``buf`` (int32 ``[len(rows), len(cols)]``) with the bits of those rows."""
    torch.bitwise_xor(rows[:, None], cols[None, :], out=buf)
    return buf.mul_(0x7FEB352D)


def blocks(n: int, width: int, device: torch.device | str, slots: int = 1, align: int = 1, extra: int = 0):
    """``(rows per block, [int32 scratch of one block + extra values] * slots)``: on a CPU blocks
    of about :data:`BLOCK` values (a multiple of ``align`` rows) on buffers kept per thread
    (callers in one thread take turns: none may hold them across calls), elsewhere one block of
    all rows on fresh buffers."""
    device = torch.device(device)
    if device.type != "cpu":
        return max(n, 1), [torch.empty(max(n, 1) * width + extra, dtype=torch.int32, device=device)
                           for _ in range(slots)]
    step = max(align, BLOCK // max(width, 1) // align * align)
    need = step * max(width, 1) + extra
    bufs = getattr(_local, "bufs", [])
    if len(bufs) < slots or bufs[0].numel() < need:
        bufs = [torch.empty(max(need, BLOCK + extra), dtype=torch.int32) for _ in range(max(slots, len(bufs)))]
        _local.bufs = bufs
    return step, bufs[:slots]


def position_hashes(n: int, width: int, key: int, device: torch.device | str = "cpu"):
    """Per-row and per-column hashes ``(r [n], c [width])`` of positions ``0..n-1`` (for
    :func:`centred_into`, which fills any block of rows from them)."""
    return _hashes(torch.arange(n, dtype=torch.int32, device=device), width, key)


def centred_into(buf: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Fill ``buf`` (int32 ``[len(rows), len(cols)]``, contiguous) with the noise of those rows
    and return it as float32 in place: ``2^25 u`` with ``u`` uniform on the ``2^24`` odd
    multiples of ``2^-25`` in ``(-1/2, 1/2)`` (the top 25 bits with the lowest set: whole
    numbers below ``2^24``, converted exactly; ``E[u] = 0`` and ``|u| < 1/2``)."""
    bits_into(buf, rows, cols).bitwise_right_shift_(7).bitwise_or_(1)
    return buf.view(torch.float32).copy_(buf)  # converted in place: no second buffer


def keyed_uniform(n: int, width: int, key: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``[n, width]`` float32 ``u`` of :func:`centred_into` (uniform in ``(-1/2, 1/2)``, mean 0),
    a function of ``(key, i, j)`` for row ``i`` and column ``j`` (the top 25 of the bits
    :func:`keyed_bits` gives for id ``i``)."""
    rows, cols = position_hashes(n, width, key, device)
    return centred_into(torch.empty((n, width), dtype=torch.int32, device=device), rows, cols).mul_(2.0 ** -25)


def keyed_unit(ids: np.ndarray, key: int) -> np.ndarray:
    """float64 draws uniform in ``[0, 1)`` (multiples of ``2^-53``), one per id: a function of
    ``(key, ids[i])`` only (two :func:`mix32` hashes of the id, under ``key`` for the high word
    and a key derived from it for the low one, read as one int64)."""
    rows = _rows32(torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)).reshape(-1))
    keys = [key32(key, 0x6C6F), key]  # (low, high) word of the int64 on a little-endian machine
    words = mix32(rows[:, None] ^ torch.tensor(keys if sys.byteorder == "little" else keys[::-1], dtype=torch.int32))
    bits = words.view(torch.int64).view(-1).bitwise_right_shift_(11).bitwise_and_((1 << 53) - 1)
    return bits.to(torch.float64).mul_(2.0 ** -53).numpy().reshape(np.shape(ids))


def keyed_below(ids: np.ndarray, key: int, n) -> np.ndarray:
    """int64 draws uniform in ``[0, n)`` (``n`` a scalar or one bound per id), one per id:
    ``floor(n * u)`` of :func:`keyed_unit`."""
    n = np.asarray(n, dtype=np.int64)
    return np.minimum((keyed_unit(ids, key) * n).astype(np.int64), n - 1)
