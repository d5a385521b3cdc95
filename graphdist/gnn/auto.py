"""``--halo auto``: the exchange with the lowest predicted epoch time, the mode before anything
is built, the wire width of each layer and direction after the first epoch.

**Mode.** Decided with the rest of the run (:func:`graphdist.gnn.decide.decide`): every rank's
part as :class:`~graphdist.gnn.stats.PartStats`, each exact mode's epoch predicted with ``graphdist
plan``'s estimate (:func:`graphdist.gnn.plan_time.epoch_seconds`): sparse products and linears at
rates measured on rank 0 when the run starts, halo bytes over the link. The link is
``--link-gbps`` / ``--link-latency-us`` when given (a modelled network), else measured here
(:func:`measure_link`: two timed all-to-alls, 64 KiB and 4 MiB per peer, best of three, fitted to
latency + bytes / bandwidth). The epoch time of a mode is its slowest rank's; the fastest mode wins
(mvc on a tie, as it moves fewer rows). Every rank decides from the same gathered numbers, so all
agree, and the checkpoint records the mode (a resumed run never measures again).

**Bits** (``--halo-bits 32``, ``--halo-error E > 0``, graphdist's own models). The first epoch
runs exact and *calibrates*: every training exchange records the rows it sends and receives,
their squared norm, the expected squared rounding error at 16, 8, 4 and 2 bits
(:func:`graphdist.exchange.quant.expected_sq_error`, exact for those rows), the time to encode
and decode them at each width (timed there, under the job's real load), and the compute that
ran between posting the exchange and waiting for it. Then, for each layer and direction
(forward activations, backward gradients), :func:`choose_bits` takes the width whose predicted
time is lowest among those whose expected relative error ``sqrt(sum err^2 / sum x^2)`` over
all ranks (the figure ``comm/halo_rel_error`` measures) is within ``E``::

    time(b) = max over ranks of  max(0, (bytes sent + received at b) / link bytes/s - hidden)
                               + encode and decode time at b     (0 at 32)

(``hidden``: the compute between post and wait, which the transfer runs behind).

Ties keep the wider width. The choice is the same on every rank (it rests on all-reduced sums
and gathered maxima), is kept in the history (so a resumed run uses it, and the checkpoint
carries it) and is plain data in the report (``comm/halo_auto``: ``bits``, per exchange the
expected error and predicted seconds). One width serves every peer of a layer: the link model
is one link per rank, so a width per peer pair would only matter under a per-pair error budget.
"""
from __future__ import annotations

import math
import time

import torch

from graphdist import comm
from graphdist.exchange.quant import BITS, row_bytes

__all__ = ["measure_link", "choose_bits", "AutoBits"]


def measure_link(group=None) -> tuple[float, float]:
    """``(bytes per second, seconds of latency)`` of this job's all-to-all, the same on every rank
    (rank 0's fit of the slowest rank's times). The rate counts the bytes a rank sends and
    receives together (the probe is symmetric): a real capped link carries an all-to-all's two
    directions one after the other (``graphdist.exchange.link``), and every estimate charges sent +
    received bytes against it."""
    _, world = comm.world(group)
    times = []
    for per_peer in (64 << 10, 4 << 20):
        n = per_peer // 4
        send = torch.zeros(n * world, dtype=torch.float32)
        out = torch.empty_like(send)
        best = float("inf")
        for _ in range(3):
            comm.barrier(group)
            t0 = time.perf_counter()
            comm.all_to_all_rows(out, send, [n] * world, [n] * world, group)
            best = min(best, time.perf_counter() - t0)
        times.append((per_peer * (world - 1), max(comm.all_gather_object(best, group))))
    (b1, t1), (b2, t2) = times
    bw = 2 * (b2 - b1) / max(t2 - t1, 1e-9)  # sent + received per second
    lat = max(t1 - 2 * b1 / bw, 0.0)
    return float(bw), float(lat)


def choose_bits(calib: list[dict], budget: float, link_bytes_per_s: float, codec: dict, layers: int) -> dict:
    """The wire width of each layer and direction (see the module docstring): ``calib`` is every
    rank's ``CommStats.calib``; ``codec`` ``{bits: values per second}`` encoded and decoded,
    for a rank whose calibration timed none. Plain data in and out, the same on every rank::

        {"forward": [bits per layer], "backward": [...], "exchanges": [{"direction", "layer",
         "bits", "expected_rel_error", "seconds", "seconds_at_32"}, ...], "budget": E}
    """
    out = {"forward": [32] * layers, "backward": [32] * layers, "exchanges": [], "budget": budget}
    codec = {int(b): float(v) for b, v in codec.items()}
    for direction, tag in sorted({k for c in calib for k in c}):
        if tag >= layers:
            continue
        mine = [c[(direction, tag)] for c in calib if (direction, tag) in c]
        width, norm2 = mine[0][2], sum(m[3] for m in mine)
        best = None
        for i, bits in enumerate(BITS):  # 32 first: a tie keeps the wider width
            err = 0.0 if bits == 32 else math.sqrt(sum(m[3 + i] for m in mine) / norm2) if norm2 > 0 else 0.0
            if err > budget:
                continue
            t = max(_seconds(m, i, bits, width, link_bytes_per_s, codec) for m in mine)
            if best is None or t < best[0]:
                best = (t, bits, err)
            if bits == 32:
                at32 = t
        out[direction][tag] = best[1]
        out["exchanges"].append({"direction": direction, "layer": tag, "bits": best[1], "expected_rel_error": best[2],
                                 "seconds": best[0], "seconds_at_32": at32})
    return out


def _seconds(m: list, i: int, bits: int, width: int, link_bytes_per_s: float, codec: dict) -> float:
    """One rank's predicted time of an exchange at ``bits`` (``i``: its index in ``BITS``) from
    its calibration record ``m``: the transfer its compute did not hide, plus encode and decode
    (the timed encode and decode of its sent rows, scaled to what it sends and receives)."""
    wire = (m[0] + m[1]) * row_bytes(width, bits) / link_bytes_per_s
    visible = max(0.0, wire - m[12])
    if bits == 32:
        return visible
    timed = m[7 + i]
    code = timed * (m[0] + m[1]) / (2 * m[0]) if m[0] > 0 and timed > 0 else (m[0] + m[1]) * width / codec[bits]
    return visible + code


class AutoBits:
    """The bits half of ``--halo auto`` in the training loop: calibrate in the run's first epoch,
    choose, apply; on resume, apply what the history recorded. ``link``: ``(bytes per second,
    codec {bits: values per second})`` from the mode's choice, or None (measured when needed)."""

    KEY = "halo_auto_bits"

    def __init__(self, budget: float, layers: int, link=None):
        self.budget, self.layers, self.link = float(budget), int(layers), link

    def before_epoch(self, hist: dict, exchangers) -> bool:
        """Apply a recorded choice, or turn calibration on; True while calibrating."""
        calibrating = self.KEY not in hist
        for ex in exchangers:
            if calibrating:
                ex.start_calibration()
            else:
                _apply(ex, hist[self.KEY])
        return calibrating

    def after_epoch(self, hist: dict, exchangers) -> dict:
        """Choose from this epoch's calibration (a collective), apply, record it in ``hist``; the
        epoch's traffic is counted again at the chosen widths (``halo_rows_bytes`` dropped)."""
        mine: dict = {}
        for ex in exchangers:
            for k, v in ex.end_calibration().items():
                mine[k] = [a + b for a, b in zip(mine[k], v)] if k in mine else list(v)
                mine[k][2] = v[2]
        every = comm.all_gather_object(mine)
        if self.link is None:
            from graphdist.gnn.plan_time import codec_rates
            bw, _ = measure_link()
            self.link = (bw, comm.all_gather_object(codec_rates() if comm.world()[0] == 0 else None)[0])
        bw, codec = self.link
        choice = choose_bits(every, self.budget, bw, codec, self.layers)
        hist[self.KEY] = choice
        hist.pop("halo_rows_bytes", None)
        for ex in exchangers:
            _apply(ex, choice)
        return choice


def _apply(ex, choice: dict) -> None:
    ex.set_widths({(d, t): int(b) for d in ("forward", "backward") for t, b in enumerate(choice[d])})
