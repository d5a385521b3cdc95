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
  Where a script seeds every rank alike instead (or not at all), the first step's check finds
  every rank's generator in one state after drawing, and says so once
  (:func:`check_generators`).
"""
from __future__ import annotations

import random

import torch
from torch import nn

from graphdist import comm
from graphdist.errors import ConfigError
from graphdist.keyed import key32

__all__ = ["Guard", "Resync", "install", "guard_of", "check_weights", "check_generators", "rng_digest",
           "say_once", "seed", "CHECK_EVERY"]

CHECK_EVERY = 100
"""Default: :func:`graphdist.gnn.pyg.sync_grads` compares the ranks' weights every this many steps."""


class Guard:
    """The weights check of one distributed model: when it is due and why."""

    def __init__(self, every: int):
        self.every = int(every)
        self.steps = 0
        self.why: str | None = "distribute"  # the first step checks
        self.depth = 0  # nested reset_parameters calls (one broadcast, at the outermost)
        self.rng = rng_digest()  # the generators' state before the forward pass of a step due a check

    def mark(self, why: str) -> None:
        self.why = why
        self.rng = rng_digest()

    def forward_starts(self) -> None:
        """The model's forward pre-hook: remember the generators' state while a check is due, so the
        check sees whether the step's own forward pass drew random numbers (dropout)."""
        if self.why is not None:
            self.rng = rng_digest()

    def step(self, model: nn.Module) -> None:
        """Called by ``sync_grads`` once per step: check when due."""
        self.steps += 1
        why = self.why or (f"{self.every} steps" if self.every > 0 and self.steps % self.every == 0 else None)
        if why is not None:
            first = self.why is not None  # (after distribute, a reset or a load: the generators too)
            self.why = None
            check_weights(model, f"step {self.steps} (check after {why})")
            if first:
                check_generators(self.rng, f"step {self.steps}")


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
    model.register_forward_pre_hook(lambda module, args: guard.forward_starts())


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


def rng_digest() -> int:
    """A 48-bit digest of this process's torch generators (CPU, and the current CUDA device's when
    CUDA is initialised): exact as a float64, so ranks can compare them in one all-reduce."""
    import hashlib
    h = hashlib.sha1(torch.get_rng_state().numpy().tobytes())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        h.update(torch.cuda.get_rng_state().numpy().tobytes())
    return int.from_bytes(h.digest()[:6], "little")


_SAID: set = set()
"""The one-line warnings this process gave (each once)."""


def say_once(key: str, text: str) -> None:
    """``text`` as one warning line on rank 0, the first time ``key`` is said in this process."""
    if key in _SAID:
        return
    _SAID.add(key)
    if comm.world()[0] == 0:
        from graphdist.log import get_logger
        get_logger().warning(f"warning: {text}")


def check_generators(before: int, when: str) -> None:
    """Say once (one line, rank 0) when the step drew random numbers (the generators' digest
    differs from ``before``, taken as its forward pass began) and every rank's torch generator is
    now in the same state: the same ``torch.manual_seed`` on every rank (or none: a
    fresh process starts from torch's one default seed), so dropout drew the same masks at the
    same local rows on every rank. A collective (one all-reduce of ``2 x world size`` numbers)."""
    rank, ws = comm.world()
    if ws == 1:
        return
    now = rng_digest()
    mine = torch.zeros(ws, 2, dtype=torch.float64)
    mine[rank] = torch.tensor([float(now), float(now != before)], dtype=torch.float64)
    got = comm.all_reduce_sum(mine.to(comm.collective_device())).cpu()
    if bool((got[:, 1] > 0).all()) and bool((got[:, 0] == got[0, 0]).all()):
        say_once("generators", f"every rank's torch generator drew the same numbers up to {when} (the same "
                 "torch.manual_seed on every rank, or none): dropout drops the same local rows and columns on "
                 "every rank; seed each rank with gd.seed(s) (a seed per (s, rank)) before distribute")


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
