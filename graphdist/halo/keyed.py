"""Random numbers that are functions of a key and a position only (no generator state), so k
ranks draw what one process draws and a resumed run draws what an unbroken one drew::

    r_i = mix32(row_i ^ key)      c_j = mix32(j * C ^ ~key)         (per row / per column)
    bits[i, j] = int32((r_i ^ c_j) * M)                               (one multiply per element)

Used for dropout masks keyed by global node id (:func:`graphdist.gnn.models.keyed_dropout`);
:func:`key32` also keys the stochastic rounding of quantised halo rows (:mod:`graphdist.halo.quant`).
"""
from __future__ import annotations

import torch

__all__ = ["mix32", "key32", "keyed_bits"]


def mix32(x: torch.Tensor) -> torch.Tensor:
    """lowbias32 integer hash on int32 tensors (wrapping multiplies, logical shifts)."""
    x = x ^ ((x >> 16) & 0xFFFF)
    x = x * 0x7FEB352D
    x = x ^ ((x >> 15) & 0x1FFFF)
    x = x * (0x846CA68B - (1 << 32))
    return x ^ ((x >> 16) & 0xFFFF)


def key32(*values: int) -> int:
    """A 32-bit key (as a signed int32 value) from small integers, e.g. (seed, epoch, layer)."""
    h = 0x811C9DC5
    for v in values:
        h = ((h ^ (int(v) & 0xFFFFFFFF)) * 0x01000193) & 0xFFFFFFFF
        h = ((h ^ (h >> 15)) * 0x2C1B3C6D) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _rows32(ids: torch.Tensor) -> torch.Tensor:
    ids = ids.to(torch.int64)
    folded = ((ids & 0xFFFFFFFF) ^ ((ids >> 32) * 0x9E3779B1)) & 0xFFFFFFFF
    return torch.where(folded >= 1 << 31, folded - (1 << 32), folded).to(torch.int32)


def keyed_bits(ids: torch.Tensor, width: int, key: int) -> torch.Tensor:
    """``[len(ids), width]`` int32, uniform over all 32-bit values, a function of
    ``(key, ids[i], j)``."""
    rows = mix32(_rows32(ids) ^ key)
    cols = torch.arange(width, dtype=torch.int32, device=ids.device) * (0x85EBCA6B - (1 << 32))
    cols = mix32(cols ^ ~key)
    x = rows[:, None] ^ cols[None, :]
    return x.mul_(0x7FEB352D)
