"""A simulated network link, so that a network can be modelled on one host (``--link-gbps``).

On one host the ranks' halo rows move through shared memory, so communication is nearly free
and any method that trades exactness for fewer bytes or hidden latency looks useless. A
:class:`Link` delays the *arrival* of every halo exchange::

    start   = max(post time, when this rank's previous exchange left the link)
    arrival = start + latency + (bytes sent + bytes received) * 8 / (gbps * 1e9)

Both terms were measured on real links (hosts as network namespaces, tbf-capped veth, gloo;
``benchmarks/link_probe.py``, BENCHMARKS.md "Real hosts"): a gloo all-to-all of 2-7 MB each way
took about (sent + received) / rate (0.053-0.061 Gbit/s each way on a 0.1 Gbit/s cap, 0.39-0.44
on 1 Gbit/s) while one direction alone ran at the cap, so the two directions do not overlap;
and exchanges in flight together (stale halos post several) share the link one after another
instead of each getting all of it.
``Pending.wait()`` returns no earlier than the arrival, so compute done while the rows are "in
flight" hides the delay exactly as it would hide a real transfer: an exchange posted early
(stale halos) or moving fewer bytes (boundary sampling, quantised rows) waits less. Only the
halo exchanges are delayed; the small collectives (gradient all-reduce, metrics) are not.
"""
from __future__ import annotations

import time

__all__ = ["Link"]


class Link:
    """A link of ``gbps`` gigabits per second (0 = infinitely fast) and ``latency_us``
    microseconds per exchange; ``active`` is False when both are 0 (no delay at all)."""

    def __init__(self, gbps: float = 0.0, latency_us: float = 0.0):
        if gbps < 0 or latency_us < 0:
            raise ValueError(f"a link needs gbps >= 0 and latency_us >= 0, got {gbps} and {latency_us}")
        self.gbps, self.latency_us = float(gbps), float(latency_us)
        self.active = self.gbps > 0 or self.latency_us > 0
        self.waited_s = 0.0
        """Seconds spent waiting for simulated arrivals beyond the real transfer (all exchanges)."""
        self.free_at = 0.0
        """:func:`time.perf_counter` value when the last exchange posted leaves the link."""

    def seconds(self, nbytes: int) -> float:
        """Simulated transfer time of one exchange moving ``nbytes`` (the larger direction)."""
        wire = nbytes * 8.0 / (self.gbps * 1e9) if self.gbps > 0 else 0.0
        return self.latency_us * 1e-6 + wire

    def post(self, t0: float, sent: int, received: int) -> float:
        """An exchange posted at ``t0`` moving ``sent`` and ``received`` bytes: queued behind
        the exchanges already on the link; returns its arrival (a perf_counter value)."""
        start = max(t0, self.free_at)
        nbytes = sent + received
        self.free_at = start + (nbytes * 8.0 / (self.gbps * 1e9) if self.gbps > 0 else 0.0)
        return start + self.seconds(nbytes)

    def hold_until(self, arrival: float) -> None:
        """Return no earlier than ``arrival`` (from :meth:`post`)."""
        if not self.active:
            return
        left = arrival - time.perf_counter()
        if left > 0:
            self.waited_s += left
            time.sleep(left)

    def hold(self, t0: float, nbytes: int) -> None:
        """Return no earlier than ``t0`` (a :func:`time.perf_counter` value) plus the transfer time."""
        if not self.active:
            return
        left = t0 + self.seconds(nbytes) - time.perf_counter()
        if left > 0:
            self.waited_s += left
            time.sleep(left)

    def describe(self) -> str:
        return "none" if not self.active else f"{self.gbps:g} Gbit/s, {self.latency_us:g} us"
