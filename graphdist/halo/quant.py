"""Halo rows in flight as b-bit integers (b = 16, 8, 4, 2): per-row offset and scale,
stochastic rounding, packed bytes. Pure torch (the exchange itself is in :mod:`graphdist.comm`).

One message row ``x [F]`` becomes ``ceil(F * b / 8)`` data bytes followed by 4 bytes of
parameters (offset ``z`` and scale ``s`` as bfloat16)::

    z = bf16 value <= min(x)          s = bf16 value >= (max(x) - z) / (2^b - 1)
    q = floor((x - z) / s + U),  U ~ uniform[0, 1)      clamp to [0, 2^b - 1]
    x_hat = q * s + z

``z`` and ``s`` are rounded to bfloat16 *before* the codes are drawn (``z`` down, ``s`` up), so
``E[x_hat] = x`` holds for the parameters actually sent: the estimate is unbiased, and the
rounding error is below one step ``s`` per value, ``s <= (max - min + 2^-7 |min|) / (2^b - 1)``
(the bfloat16 offset widens the range by at most 2^-8 of ``|min|``). Values narrower than a byte are packed
along the row: for b = 4 byte ``j`` holds values ``2j`` (low nibble) and ``2j+1``; for b = 2
values ``4j .. 4j+3`` from the low bits up. b = 16 stores each code little-endian in 2 bytes.
"""
from __future__ import annotations

import torch

__all__ = ["BITS", "row_bytes", "encode", "decode"]

BITS = (32, 16, 8, 4, 2)
"""Bit widths of halo rows: 32 = float32 as is, the others quantised."""
PARAM_BYTES = 4


def row_bytes(width: int, bits: int) -> int:
    """Bytes one message row of ``width`` values takes on the wire (parameters included)."""
    if bits == 32:
        return 4 * width
    return (width * bits + 7) // 8 + PARAM_BYTES


def _bf16_down(v: torch.Tensor) -> torch.Tensor:
    b = v.to(torch.bfloat16)
    lower = torch.nextafter(b, torch.full_like(b, float("-inf")))
    return torch.where(b.float() > v, lower, b)


def _bf16_up(v: torch.Tensor) -> torch.Tensor:
    b = v.to(torch.bfloat16)
    upper = torch.nextafter(b, torch.full_like(b, float("inf")))
    return torch.where(b.float() < v, upper, b)


def encode(x: torch.Tensor, bits: int, key: int = 0) -> torch.Tensor:
    """``x [n, F]`` float -> ``[n, row_bytes(F, bits)]`` uint8; the rounding noise ``U`` comes
    from a generator seeded with ``key`` (give every call its own key: same key, same noise)."""
    if bits not in BITS or bits == 32:
        raise ValueError(f"bits must be one of 16, 8, 4, 2, got {bits}")
    n, f = x.shape
    x = x.float()
    levels = (1 << bits) - 1
    if n == 0 or f == 0:
        return torch.zeros((n, row_bytes(f, bits)), dtype=torch.uint8, device=x.device)
    z = _bf16_down(x.amin(1))
    s = _bf16_up((x.amax(1) - z.float()) / levels)
    s = torch.where(s.float() > 0, s, torch.ones_like(s))
    gen = torch.Generator(device=x.device)
    gen.manual_seed(int(key) & 0x7FFFFFFFFFFFFFFF)
    t = torch.rand((n, f), generator=gen, device=x.device)
    t.addcmul_(x - z.float()[:, None], 1.0 / s.float()[:, None])  # (x - z) / s + U
    t.floor_().clamp_(0, levels)
    data = _pack(t, bits)
    params = torch.stack([z, s], 1).view(torch.uint8)
    return torch.cat([data, params], 1)


def decode(buf: torch.Tensor, bits: int, width: int, dtype=torch.float32) -> torch.Tensor:
    """Inverse of :func:`encode`: ``[n, row_bytes]`` uint8 -> ``[n, width]`` ``dtype``."""
    n = buf.shape[0]
    if n == 0 or width == 0:
        return torch.zeros((n, width), dtype=dtype, device=buf.device)
    params = buf[:, -PARAM_BYTES:].clone(memory_format=torch.contiguous_format).view(torch.bfloat16).float()
    q = _unpack(buf[:, :-PARAM_BYTES], bits, width)
    return q.mul_(params[:, 1:2]).add_(params[:, 0:1]).to(dtype)


def _pack(t: torch.Tensor, bits: int) -> torch.Tensor:
    """Codes (whole floats in ``[0, 2^bits - 1]``) -> packed bytes."""
    n, f = t.shape
    if bits == 16:
        q = t.to(torch.int32)
        return torch.stack([q & 0xFF, q >> 8], 2).to(torch.uint8).reshape(n, 2 * f)
    q = t.to(torch.uint8)
    if bits == 8:
        return q
    per = 8 // bits
    pad = (-f) % per
    if pad:
        q = torch.cat([q, q.new_zeros((n, pad))], 1)
    q = q.reshape(n, -1, per)
    out = q[:, :, 0].clone()
    for i in range(1, per):
        out.bitwise_or_(q[:, :, i] << (bits * i))
    return out


def _unpack(data: torch.Tensor, bits: int, width: int) -> torch.Tensor:
    """Packed bytes -> float codes ``[n, width]``."""
    n = data.shape[0]
    if bits == 16:
        d = data.reshape(n, width, 2).to(torch.int32)
        return (d[..., 0] | (d[..., 1] << 8)).float()
    if bits == 8:
        return data.float()
    per = 8 // bits
    mask = (1 << bits) - 1
    out = torch.empty((n, data.shape[1], per), dtype=torch.uint8, device=data.device)
    for i in range(per):
        torch.bitwise_and(data >> (bits * i), mask, out=out[:, :, i])
    return out.reshape(n, -1)[:, :width].float()
