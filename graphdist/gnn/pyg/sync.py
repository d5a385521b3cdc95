"""Ranks cannot drift apart silently: re-broadcast on ``reset_parameters``, a weights check, ``seed``.

Every rank holds the whole model (data-parallel weights). They stay equal only if every rank
starts from the same weights and applies the same summed gradients. Three things keep that true:

* ``reset_parameters()`` of a distributed model (or of one of its message-passing layers) is
  followed by a broadcast of rank 0's weights (:class:`Resync`, put in front of the model's class
  by :func:`graphdist.gnn.pyg.distribute`): PyG's training harnesses reset the model at the start
  of each run, and each rank's generator would draw other weights.
* :func:`check_weights` compares a checksum of every parameter and buffer across the ranks (one
  small all-gather) and stops with one line naming the first that differs. ``sync_grads`` runs it
  on the first step after ``distribute``, a reset or a ``load_state_dict``, and every
  ``check_every`` steps.
* :func:`seed` seeds torch, NumPy and ``random`` per (seed, rank): a model's own ``F.dropout``
  draws other masks on each rank (not the same masks by local row index) and repeats run to run.
"""
from __future__ import annotations

import random

import torch
from torch import nn

from graphdist import comm
from graphdist.errors import ConfigError
from graphdist.keyed import key32

__all__ = ["Guard", "Resync", "install", "guard_of", "check_weights", "seed", "CHECK_EVERY"]

CHECK_EVERY = 100
"""Default: :func:`graphdist.gnn.pyg.sync_grads` compares the ranks' weights every this many steps."""


class Guard:
    """The weights check of one distributed model: when it is due and why."""

    def __init__(self, every: int):
        self.every = int(every)
        self.steps = 0
        self.why: str | None = "distribute"  # the first step checks
        self.depth = 0  # nested reset_parameters calls (one broadcast, at the outermost)

    def mark(self, why: str) -> None:
        self.why = why

    def step(self, model: nn.Module) -> None:
        """Called by ``sync_grads`` once per step: check when due."""
        self.steps += 1
        why = self.why or (f"{self.every} steps" if self.every > 0 and self.steps % self.every == 0 else None)
        if why is not None:
            self.why = None
            check_weights(model, f"step {self.steps} (check after {why})")


class Resync:
    """Put in front of a distributed model's class (and every wrapped layer's): after
    ``reset_parameters()`` every rank holds rank 0's new weights."""

    def reset_parameters(self, *args, **kwargs):
        g = guard_of(self)
        if g is None:
            return super().reset_parameters(*args, **kwargs)
        g.depth += 1
        try:
            out = super().reset_parameters(*args, **kwargs)
        finally:
            g.depth -= 1
        if g.depth == 0:
            comm.broadcast_module(self)
            g.mark("reset_parameters")
        return out


_RESYNC: dict[type, type] = {}


def install(model: nn.Module, guard: Guard) -> None:
    """Attach ``guard`` to ``model``; make its ``reset_parameters`` re-broadcast; mark the check
    due after ``load_state_dict``."""
    object.__setattr__(model, "_graphdist_guard", guard)
    cls = type(model)
    if hasattr(cls, "reset_parameters") and not issubclass(cls, Resync):
        if cls not in _RESYNC:
            _RESYNC[cls] = type(cls.__name__, (Resync, cls), {"__module__": cls.__module__,
                                                              "__qualname__": cls.__qualname__})
        model.__class__ = _RESYNC[cls]
    model.register_load_state_dict_post_hook(lambda module, keys: guard.mark("load_state_dict"))


def guard_of(module: nn.Module) -> Guard | None:
    """The :class:`Guard` of a distributed model or layer (None if not distributed)."""
    g = getattr(module, "_graphdist_guard", None)
    if g is None:
        st = getattr(module, "_graphdist", None)
        g = getattr(getattr(st, "ctx", None), "guard", None)
    return g


def _checksums(model: nn.Module) -> tuple[list[str], torch.Tensor]:
    """Names and ``[3 * n]`` float64 checksums (sum, position-weighted sum, sum of |.|)."""
    names, sums = [], []
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if not (t.is_floating_point() or t.is_complex()) and t.dtype != torch.int64:
            continue
        v = t.detach().reshape(-1).to(torch.float64)
        w = torch.arange(1, v.numel() + 1, dtype=torch.float64, device=v.device).mul_(0.6180339887).frac_()
        names.append(name)
        sums.append(torch.stack([v.sum(), (v * w).sum(), v.abs().sum()]))
    if not sums:
        return names, torch.zeros(0, dtype=torch.float64)
    return names, torch.cat(sums).cpu()


def check_weights(model: nn.Module, when: str = "now") -> None:
    """Stop with one line naming the first parameter (or buffer) whose values differ between
    the ranks (checksums compared to rank 0's; relative tolerance 1e-7). A collective."""
    rank, ws = comm.world()
    if ws == 1:
        return
    names, sums = _checksums(model)
    dev = comm.collective_device()
    allsums = comm.all_gather_rows(sums.to(dev)[None]).cpu().reshape(ws, -1, 3)
    ref = allsums[0]
    scale = ref[:, 2].abs()[None] + allsums[:, :, 2].abs()
    bad = ((allsums[:, :, :2] - ref[None, :, :2]).abs().amax(2) > 1e-7 * scale + 1e-30)  # [ws, n]
    if not bool(bad.any()):
        return
    i = int(bad.any(0).nonzero()[0])
    ranks = [r for r in range(ws) if bool(bad[r, i])]
    raise ConfigError(
        f"the ranks hold different weights at {when}: {names[i]} differs between rank 0 and rank"
        f"{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} (sum {float(ref[i, 0]):.9g} against "
        f"{float(allsums[ranks[0], i, 0]):.9g}); change weights on every rank alike (reset_parameters, "
        "load_state_dict, the optimiser after gd.sync_grads)")


def seed(value: int) -> int:
    """Seed torch, NumPy and ``random`` for this rank: a function of (``value``, rank), so each
    rank draws its own dropout masks (not the same masks by local row index, as the same
    ``torch.manual_seed`` on every rank would give) and a run repeats them. Returns the seed used.
    Weights drawn afterwards differ per rank until :func:`~graphdist.gnn.pyg.distribute` (or a
    ``reset_parameters`` after it) broadcasts rank 0's."""
    from graphdist.proc import env_world
    s = key32(int(value), env_world()[0], 0x5EED) & 0x7FFFFFFF
    torch.manual_seed(s)
    random.seed(s)
    try:
        import numpy as np
        np.random.seed(s)
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    return s
