"""Halo rows in flight as b-bit integers (b = 16, 8, 4, 2): per-row offset and scale,
stochastic rounding, packed bytes. Pure torch (the exchange itself is in :mod:`graphdist.comm`).

One message row ``x [F]`` becomes ``ceil(F * b / 8)`` data bytes followed by 4 bytes of
parameters (offset ``z`` and scale ``s`` as bfloat16)::

    z = bf16 value <= min(x)          s = bf16 value >= (max(x) - z) / (2^b - 1)
    q = round((x - z) / s + u),  u ~ uniform(-1/2, 1/2)      clamp to [0, 2^b - 1]
    x_hat = q * s + z

``z`` and ``s`` are rounded to bfloat16 *before* the codes are drawn (``z`` down, ``s`` up), so
``E[x_hat] = x`` holds for the parameters actually sent: the estimate is unbiased (up to the
float32 rounding of ``(x - z) / s + u``), and the rounding error is below one step ``s`` per
value, ``s <= (max - min + 2^-7 |min|) / (2^b - 1)`` (the bfloat16 offset widens the range by
at most 2^-8 of ``|min|``). Values narrower than a byte are packed along the row: for b = 4
byte ``j`` holds values ``2j`` (low nibble) and ``2j+1``; for b = 2 values ``4j .. 4j+3`` from
the low bits up. b = 16 stores each code little-endian in 2 bytes.

``u`` is :func:`graphdist.keyed.centred_into` of ``key`` and the value's position in the
message (on a grid of :data:`GRID`-wide rows, so that hashing stays in long rows however
narrow the message is): a hash, no generator state, so the same key draws the same noise on
any rank and in a resumed run. It
comes as ``2^25 u`` (whole numbers), so one multiply-add gives ``T = 2^25 ((x - z) / s + u)``
exactly scaled, and adding ``1.5 * 2^48`` rounds ``T`` to whole ``2^25`` units with the code
in the low bits of the float (no float-to-int conversion). The codes are written straight into
the wire buffer: narrowed into place (b >= 8), or as int16 viewed two (b = 4) or four (b = 2)
at a time as one wider integer, folded by shifts into the low byte and narrowed (the layout
above, on the little-endian hosts torch runs on); decoding widens the bytes the same way. On a
CPU the rows go through in blocks that stay in cache, on per-thread scratch buffers.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from graphdist.keyed import blocks, centred_into, key32, position_hashes

__all__ = ["BITS", "row_bytes", "encode", "decode", "expected_sq_error", "rel_error"]

BITS = (32, 16, 8, 4, 2)
"""Bit widths of halo rows: 32 = float32 as is, the others quantised."""
PARAM_BYTES = 4


def row_bytes(width: int, bits: int) -> int:
    """Bytes one message row of ``width`` values takes on the wire (parameters included)."""
    if bits == 32:
        return 4 * width
    return (width * bits + 7) // 8 + PARAM_BYTES


GRID = 64
"""The noise of value ``j`` of message row ``i`` is that of position ``p = i * F + j`` on a grid
of rows of ``GRID`` values (row ``p // GRID``, column ``p % GRID``): long rows of hashes however
narrow the message rows are."""
_MAGIC = 1.5 * 2.0 ** 48
"""``fl(T + 1.5 * 2^48)`` rounds ``T`` to a multiple of ``2^25`` (the spacing of floats there)
to nearest, and its bits are ``0x57C00000 + T / 2^25`` for ``|T / 2^25| < 2^22``."""


def _bf16_down(v: torch.Tensor) -> torch.Tensor:
    """The largest bfloat16 value <= ``v`` (float32 in, float32 out): the low 16 bits cut
    (towards zero), one bfloat16 step further from zero where that rounded a negative value up."""
    t = v.view(torch.int32) & -65536
    return t.add_((t.view(torch.float32) > v).to(torch.int32), alpha=65536).view(torch.float32)


def _bf16_up(v: torch.Tensor) -> torch.Tensor:
    """The smallest bfloat16 value >= ``v`` (float32 in, float32 out)."""
    t = v.view(torch.int32) & -65536
    return t.add_((t.view(torch.float32) < v).to(torch.int32), alpha=65536).view(torch.float32)


def _row_min_max(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n, f = x.shape
    if x.device.type == "cpu" and 1 < f <= 16 and x.is_contiguous():  # a pooling kernel beats a
        flat = x.view(1, 1, n * f)                                     # reduction over few values
        return (-F.max_pool1d(-flat, f, f)).view(n), F.max_pool1d(flat, f, f).view(n)
    return x.amin(1), x.amax(1)


def encode(x: torch.Tensor, bits: int, key: int = 0) -> torch.Tensor:
    """``x [n, F]`` float -> ``[n, row_bytes(F, bits)]`` uint8; the rounding noise ``U`` is a
    function of ``(key, position)`` (give every call its own key: same key, same noise)."""
    if bits not in BITS or bits == 32:
        raise ValueError(f"bits must be one of 16, 8, 4, 2, got {bits}")
    n, f = x.shape
    x = x.float()
    levels = (1 << bits) - 1
    out = torch.empty((n, row_bytes(f, bits)), dtype=torch.uint8, device=x.device)
    if n == 0 or f == 0:
        return out.zero_()
    lo, hi = _row_min_max(x)
    z = _bf16_down(lo)
    s = _bf16_up((hi - z) / levels).clamp_min_(2.0 ** -126)  # a constant row: any scale > 0
    inv = (2.0 ** 25 / s)[:, None]
    zc = z[:, None]
    rows, cols = position_hashes(-(-n * f // GRID), GRID, key32(key), x.device)
    step, (ibuf, fbuf) = blocks(n, f, x.device, slots=2, align=GRID, extra=GRID)  # blocks start on grid rows
    fbuf = fbuf.view(torch.float32)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        m = r1 - r0
        g0, g1 = r0 * f // GRID, -(-r1 * f // GRID)
        t = centred_into(ibuf[:(g1 - g0) * GRID].view(g1 - g0, GRID), rows[g0:g1], cols)  # 2^25 u
        t = t.view(-1)[:m * f].view(m, f)
        d = torch.sub(x[r0:r1], zc[r0:r1], out=fbuf[:m * f].view(m, f))
        t.addcmul_(d, inv[r0:r1])  # 2^25 ((x - z) / s + u), exactly scaled
        t.clamp_(max=levels * 2.0 ** 25)  # float rounding may carry the top value a hair past the last level
        t.add_(_MAGIC)  # rounds to a whole number of 2^25 units: the code sits in the low bits
        _pack_into(out[r0:r1], t.view(torch.int32), d, bits)
    _store_params(out, z, s)
    return out


def expected_sq_error(x: torch.Tensor, bits: int, block: int = 1 << 15) -> float:
    """``E ||decode(encode(x, bits)) - x||^2`` over the rounding noise, for the offset and scale
    :func:`encode` would use: a value ``t = (x - z) / s`` rounds to ``floor(t)`` or ``ceil(t)``,
    off by ``s^2 p (1 - p)`` in expectation (``p = t - floor(t)``). Exact for the rows given, no
    noise drawn: what ``--halo auto`` compares against ``--halo-error`` before it picks a width
    (rows in blocks of ``block``, so no temporary as large as ``x``)."""
    if bits not in BITS or bits == 32:
        raise ValueError(f"bits must be one of 16, 8, 4, 2, got {bits}")
    levels = (1 << bits) - 1
    total = torch.zeros((), dtype=torch.float64, device=x.device)
    for r0 in range(0, x.shape[0], block):
        xb = x[r0:r0 + block].float()
        if xb.numel() == 0:
            continue
        lo, hi = _row_min_max(xb.contiguous())
        z = _bf16_down(lo)
        s = _bf16_up((hi - z) / levels).clamp_min_(2.0 ** -126)
        t = (xb - z[:, None]).div_(s[:, None])
        p = t.sub_(t.floor())
        total += (p.mul_(1 - p).sum(1, dtype=torch.float64) * s.double().square()).sum()
    return float(total)


def _store_params(out: torch.Tensor, z: torch.Tensor, s: torch.Tensor) -> None:
    if out.shape[1] % 2 == 0:  # the parameters sit 2-byte aligned: write them as bfloat16
        p = out.view(torch.bfloat16)
        p[:, -2].copy_(z)
        p[:, -1].copy_(s)
    else:
        out[:, -PARAM_BYTES:] = torch.stack([z, s], 1).to(torch.bfloat16).view(torch.uint8)


def decode(buf: torch.Tensor, bits: int, width: int, dtype=torch.float32) -> torch.Tensor:
    """Inverse of :func:`encode`: ``[n, row_bytes]`` uint8 -> ``[n, width]`` ``dtype``."""
    n = buf.shape[0]
    if n == 0 or width == 0:
        return torch.zeros((n, width), dtype=dtype, device=buf.device)
    params = buf[:, -PARAM_BYTES:].clone(memory_format=torch.contiguous_format).view(torch.bfloat16).float()
    q = torch.empty((n, width), dtype=torch.float32, device=buf.device)
    step, (ibuf,) = blocks(n, width, buf.device)
    if bits >= 8:  # one widening copy, no scratch: blocks would only add calls
        step = n
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        _unpack_into(q[r0:r1], buf[r0:r1], bits, ibuf)
        q[r0:r1].mul_(params[r0:r1, 1:2]).add_(params[r0:r1, 0:1])
    return q.to(dtype)


def _pack_into(out: torch.Tensor, c: torch.Tensor, scratch: torch.Tensor, bits: int) -> None:
    """Codes in the low ``bits`` bits of ``c`` (int32 ``[m, F]``; bits 16 and up anything) -> the
    data bytes of ``out``. ``c`` and ``scratch`` (float32 ``[m, F]``, contiguous) are
    overwritten: they hold the codes and the shifted copies."""
    m, f = c.shape
    if bits >= 8:  # narrowing keeps the low bytes
        (out.view(torch.int16) if bits == 16 else out)[:, :f].copy_(c)
        return
    per = 8 // bits
    fp = -(-f // per) * per
    if fp <= 2 * f and (bits == 4 or f % 2 == 0):  # int16 codes fit in scratch, the shifts in c
        codes = scratch.view(torch.int16)[:, :fp]
        codes[:, :f].copy_(c)
        codes[:, f:].zero_()
        wide = torch.int32 if bits == 4 else torch.int64
        v = codes.view(wide)
        tmp = c.view(wide)[:, :v.shape[1]]
    else:  # rows narrower than 4 values: fresh buffers, they are small
        codes = torch.zeros((m, fp), dtype=torch.int16, device=c.device)
        codes[:, :f].copy_(c)
        v = codes.view(torch.int32 if bits == 4 else torch.int64)
        tmp = torch.empty_like(v)
    if bits == 4:  # int32 = c0 | c1 << 16  ->  low byte c0 | c1 << 4
        v.bitwise_or_(torch.bitwise_right_shift(v, 12, out=tmp))
    else:  # int64 = c0 | c1 << 16 | c2 << 32 | c3 << 48  ->  low byte c0 | c1 << 2 | c2 << 4 | c3 << 6
        v.bitwise_or_(torch.bitwise_right_shift(v, 14, out=tmp))
        v.bitwise_or_(torch.bitwise_right_shift(v, 28, out=tmp))
    out[:, :fp // per].copy_(v)  # narrowing keeps the low byte


def _unpack_into(q: torch.Tensor, buf: torch.Tensor, bits: int, scratch: torch.Tensor) -> None:
    """Data bytes of ``buf [m, row_bytes]`` -> float codes in ``q [m, width]``; ``scratch``:
    an int32 buffer of at least ``m * width`` values."""
    m, width = q.shape
    data = buf[:, :buf.shape[1] - PARAM_BYTES]
    if bits == 8:
        q.copy_(data)
        return
    if bits == 16:  # little-endian byte pairs, unsigned
        if buf.storage_offset() % 2 or buf.stride(0) % 2 or buf.stride(1) != 1:
            w = scratch.view(torch.int16)[:m * width].view(m, width)
            w.view(torch.uint8).copy_(data)
            data = w
        q.copy_(data.view(torch.uint16))
        return
    db = data.shape[1]
    wide = torch.int16 if bits == 4 else torch.int32
    room = scratch.view(wide)
    w = room[:m * db].view(m, db)
    w.copy_(data)
    tmp = room[m * db:2 * m * db].view(m, db) if 2 * m * db <= room.numel() else torch.empty_like(w)
    if bits == 4:  # byte b -> int16 with low byte b & 15, high byte b >> 4
        w.bitwise_or_(torch.bitwise_left_shift(w, 4, out=tmp)).bitwise_and_(0x0F0F)
    else:  # byte b -> int32 whose bytes are its four 2-bit values
        w.bitwise_or_(torch.bitwise_left_shift(w, 6, out=tmp))
        w.bitwise_or_(torch.bitwise_left_shift(w, 12, out=tmp)).bitwise_and_(0x03030303)
    q.copy_(w.view(torch.uint8)[:, :width])


def rel_error(exs, layers: int, device) -> dict:
    """Relative error ``||x_hat - x|| / ||x||`` of the quantised rows per layer (the tag of an
    exchange), over all ranks and the epochs measured (``ex.measure``), from exchangers ``exs``
    (their ``stats.errors``): ``{"forward": [...], "backward": [...]}`` (None where a layer sent
    nothing in that direction). Collective: every rank calls it (the built-in trainer's report
    and the PyG path's, :mod:`graphdist.gnn.pyg.report`)."""
    from graphdist import comm
    sums = torch.zeros(2, layers, 2, dtype=torch.float64)
    for ex in exs:
        for (direction, tag), (e2, n2) in ex.stats.errors.items():
            if tag < layers:
                sums[0 if direction == "forward" else 1, tag] += torch.tensor([e2, n2], dtype=torch.float64)
    sums = comm.all_reduce_sum(sums.to(device)).cpu()
    out = {}
    for i, name in enumerate(("forward", "backward")):
        out[name] = [float((sums[i, j, 0] / sums[i, j, 1]).sqrt()) if sums[i, j, 1] > 0 else None
                     for j in range(layers)]
    return out
