"""Halo rows one epoch stale (``--halo-staleness 1``, PipeGCN, Wan et al., ICLR 2022).

With staleness 1 every exchange of epoch ``t`` is posted as usual, but the layer uses the rows
that the *previous* epoch's exchange of the same layer and direction brought::

    epoch t, layer l, forward    post(send rows of epoch t)      -> held until epoch t+1
                                 A_halo @ (rows posted in epoch t-1)
    epoch t, layer l, backward   post_reverse(halo grads of t)   -> held until epoch t+1
                                 g_h += T^T (halo grads posted in epoch t-1)

so an exchange has the rest of its epoch (backward, the Adam step, the evaluation pass, the
next epoch's earlier layers) to arrive: communication overlaps all of compute, not only the
owned SpMM. The first epoch has no previous exchange and uses fresh rows (its own, exact),
which are then held for epoch 2. The bytes per epoch are those of the exact exchange.

Smoothing (PipeGCN-GF, ``--staleness-smoothing gamma``): the rows used are
``s_t = gamma s_{t-1} + (1 - gamma) (stale rows)``, ``s_1`` = the fresh rows of epoch 1.

:meth:`StaleHalos.state` / :meth:`StaleHalos.load` put the held rows (and the smoothed ones) in
the checkpoint, per rank, so a resumed run continues bit for bit. Evaluation must use another,
exact exchanger (the trainer builds one).

Resharding (resume on another number of ranks or another partition, e.g. after ``--nnodes
MIN:MAX`` lost a host) carries the weights and Adam state over but not the held rows
(:data:`STALE_RESHARD`, logged), because what is held belongs to the cut of the partition that
wrote it:

* the held forward rows of layer ``l`` are ``h_l(t)`` of the old halo nodes only. A new partition
  has other halo nodes; for ``l >= 1`` the previous epoch's activations of a node that was in no
  old halo were never kept (only the input layer's rows, the features, could be rebuilt);
* a held backward row is a *sum over one peer's destinations* of that peer's edge terms
  (``sum_v a_uv g_v(t)`` for the node ``u`` a rank sent to peer ``p``). A new partition groups
  the destinations into other peers; the old sums can be neither split nor regrouped (the
  smoothed rows of ``--staleness-smoothing`` likewise);
* and even with every row rebuilt the resumed run would not be the unbroken one: the edges that
  read last epoch's rows are the cut edges, so on another partition other edges are stale from
  the first resumed epoch (at k = 1 none: the run turns exact), and the losses differ from the
  unbroken run's by the staleness itself, not by float rounding.

So the first resumed epoch on another partition exchanges fresh rows, as a run's first epoch
does, and holds them for the next. On the partition it was written on (the same
``partition_id``: the same rows on every rank, from any artifact holding that assignment) a stale
run resumes bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Staleness", "StaleHalos", "STALE_RESHARD"]

STALE_RESHARD = ("--halo-staleness: the held halo rows belong to the old partition's cut (rows of its halo, "
                 "gradient sums per old peer) and do not carry over to this one; the first resumed epoch "
                 "exchanges fresh rows, as a run's first epoch does, so the losses from here differ from an "
                 "unbroken run's by the staleness itself")
"""What a ``--halo-staleness`` resume onto another partition leaves behind (logged once)."""

_DIRS = ("forward", "backward")


class _Ready:
    """A Pending-like handle of rows already held (or of an earlier Pending)."""

    def __init__(self, rows):
        self.rows = rows

    def wait(self) -> torch.Tensor:
        return self.rows


def _rows(held) -> torch.Tensor:
    return held if isinstance(held, torch.Tensor) else held.wait()


@dataclass(frozen=True)
class Staleness:
    """Stale halos asked of an exchanger (its constructor's ``stale``, which builds its
    :class:`StaleHalos` from its own row counts)."""

    layers: int
    """Layers that exchange (one held buffer per layer and direction)."""
    width: int
    """The widest row any layer can exchange."""
    gamma: float = 0.0
    """Smoothing factor of the held rows (``--staleness-smoothing``)."""


class StaleHalos:
    """The held exchanges of one rank's :class:`~graphdist.exchange.exchanger.HaloExchanger`
    (built by its constructor from a :class:`Staleness`), keyed by (direction, layer tag).

    ``n_rows = {"forward": n_recv, "backward": n_send}``, ``layers`` and ``width`` (the widest
    row any layer can exchange) fix the checkpoint layout; ``gamma`` is the smoothing factor."""

    def __init__(self, n_rows: dict, layers: int, width: int, gamma: float = 0.0, device="cpu"):
        if not 0.0 <= gamma < 1.0:
            raise ValueError(f"smoothing gamma must be in [0, 1), got {gamma}")
        self.n_rows, self.layers, self.width, self.gamma = dict(n_rows), int(layers), int(width), float(gamma)
        self.device = device
        self.held: dict = {}
        """``{(direction, tag): Pending | tensor}``: the exchange the next epoch will use."""
        self.smooth: dict = {}
        """``{(direction, tag): tensor}``: the smoothed rows (gamma > 0)."""

    def swap(self, direction: str, tag: int, pending):
        """Hold ``pending`` (posted now) for the next epoch; return the handle to use now: the
        previous epoch's rows, or ``pending`` itself in the first epoch."""
        key = (direction, int(tag))
        old = self.held.get(key)
        self.held[key] = pending
        if old is None:
            if self.gamma > 0:
                return _Smoothed(self, key, pending)
            return pending
        rows = _rows(old)
        if self.gamma > 0:
            rows = self.smooth[key].mul(self.gamma).add_(rows, alpha=1.0 - self.gamma)
            self.smooth[key] = rows
        return _Ready(rows)

    def drain(self) -> None:
        """Wait for every exchange in flight (before a checkpoint or at the end of training)."""
        for key, h in self.held.items():
            self.held[key] = _rows(h)

    def _kinds(self):
        return (self.held, self.smooth) if self.gamma > 0 else (self.held,)

    def state(self, rank: int) -> dict:
        """The checkpointed tensors of this rank (fixed shapes, so the same call gives the
        template to load into): rows padded to ``width`` columns, and each one's real width
        (0 = none held). Smoothed rows only with smoothing."""
        self.drain()
        out = {}
        widths = torch.zeros(2, 2, self.layers, dtype=torch.int64)
        for i, src in enumerate(self._kinds()):
            for d, direction in enumerate(_DIRS):
                n = self.n_rows[direction]
                for tag in range(self.layers):
                    buf = torch.zeros(max(n, 1), self.width, device=self.device)
                    rows = src.get((direction, tag))
                    if rows is not None:
                        if rows.shape[1] > self.width:
                            raise ValueError(f"stale halo rows of layer {tag} are {rows.shape[1]} wide, more than "
                                             f"the {self.width} columns the checkpoint layout allows")
                        buf[:rows.shape[0], :rows.shape[1]] = rows
                        widths[i, d, tag] = rows.shape[1]
                    out[f"stale/r{rank}/{i}/{direction}/{tag}"] = buf
        out[f"stale/r{rank}/widths"] = widths
        return out

    def load(self, state: dict, rank: int) -> None:
        """Hold what :meth:`state` saved (after the checkpoint filled ``state`` in place)."""
        widths = state[f"stale/r{rank}/widths"]
        self.held, self.smooth = {}, {}
        for i, dst in enumerate(self._kinds()):
            for d, direction in enumerate(_DIRS):
                n = self.n_rows[direction]
                for tag in range(self.layers):
                    w = int(widths[i, d, tag])
                    if w > 0:
                        dst[(direction, tag)] = state[f"stale/r{rank}/{i}/{direction}/{tag}"][:n, :w].clone()


class _Smoothed:
    """First epoch with smoothing: the fresh rows, which also start the smoothed rows."""

    def __init__(self, owner: StaleHalos, key, pending):
        self.owner, self.key, self.pending = owner, key, pending

    def wait(self) -> torch.Tensor:
        rows = self.pending.wait()
        self.owner.smooth[self.key] = rows
        return rows
