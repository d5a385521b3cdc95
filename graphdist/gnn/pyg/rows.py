"""``[h ; halo rows of h]`` with autograd: the exchange every distributed PyG layer's input goes
through (:mod:`graphdist.gnn.pyg.wrap`) and the global degrees and norms are computed with
(:mod:`graphdist.gnn.pyg.hops`). Forward posts the owned rows the peers need and appends what
arrives; backward sends the halo rows' gradients home, where they are added to their sources."""
from __future__ import annotations

import weakref

import torch

from graphdist.exchange.exchanger import HaloExchanger
from graphdist.gnn.models import Reused
from graphdist.gnn.pyg.traced import exchange_op

__all__ = ["halo_rows"]


class _HaloRows(torch.autograd.Function):
    """``[h ; halo rows]`` through the exchanger's post/post_reverse (quantised when bits < 32)."""

    @staticmethod
    def forward(ctx, h, ex):
        ctx.ex, ctx.shape = ex, h.shape
        flat = h.reshape(h.shape[0], -1)
        ctx.tag = ex.next_tag()
        recv = ex.post(flat.index_select(0, ex.send_idx), ctx.tag).wait()
        return torch.cat([flat, recv.to(flat.dtype)]).reshape((-1,) + tuple(h.shape[1:]))

    @staticmethod
    def backward(ctx, g):
        ex = ctx.ex
        n_own = ctx.shape[0]
        g = g.reshape(g.shape[0], -1)
        back = ex.post_reverse(g[n_own:].contiguous(), ctx.tag).wait()
        g_own = g[:n_own].clone()
        if back.shape[0]:
            g_own.index_add_(0, ex.send_idx, back.to(g.dtype))
        return g_own.reshape(ctx.shape), None


_kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""exchanger -> ``[h ; halo rows]`` of the last training pass's input that needed no gradient (the
features, dropped out or not): written over by the next pass once nobody holds it
(:class:`Reused`), an evaluation's of the same shape included"""


def halo_rows(h: torch.Tensor, ex: HaloExchanger) -> torch.Tensor:
    """``[h ; halo rows of h]`` (autograd; quantised in flight when ``ex.bits < 32``)."""
    if not ex.active:
        return h
    if torch.jit.is_tracing():  # the collective as one opaque node (graphdist.gnn.pyg.traced)
        return exchange_op(lambda t: _HaloRows.apply(t.contiguous(), ex), h, ("rows", id(ex)))
    if h.requires_grad and torch.is_grad_enabled():
        return _HaloRows.apply(h.contiguous(), ex)
    flat = h.reshape(h.shape[0], -1)
    recv = ex.post(flat.index_select(0, ex.send_idx), ex.next_tag()).wait()
    shape = (flat.shape[0] + recv.shape[0], flat.shape[1])
    # a training pass keeps its buffer (its backward holds it anyway); an evaluation only borrows
    # one, so a forward without training (infer) holds nothing beyond its layer
    train = torch.is_grad_enabled()
    kept = _kept.setdefault(ex, Reused()) if train else _kept.get(ex)
    out = None if kept is None else kept.buffer(shape, flat.dtype, flat.device)
    borrowed = out is not None
    if out is None:
        out = torch.empty(shape, dtype=flat.dtype, device=flat.device)
    torch.cat([flat, recv.to(flat.dtype)], out=out)
    view = (-1,) + tuple(h.shape[1:])
    return kept.give(out, view) if train or borrowed else out.view(view)
