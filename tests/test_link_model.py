"""The simulated link's model (graphdist.exchange.link): both directions of an exchange share the
link (sent + received bytes), and exchanges in flight together queue one after another; the
figures behind it are measured on real links (BENCHMARKS.md, "Real hosts")."""
from __future__ import annotations

import pytest

from graphdist.exchange.link import Link


def test_both_directions_count():
    link = Link(1.0)  # 125 MB/s
    assert link.post(10.0, 62_500_000, 62_500_000) == pytest.approx(11.0)  # 0.5 + 0.5 s
    assert Link(1.0).post(10.0, 125_000_000, 0) == pytest.approx(11.0)


def test_exchanges_in_flight_queue_and_latency_does_not_occupy_the_link():
    link = Link(1.0, latency_us=1000)
    a = link.post(0.0, 125_000_000, 0)  # on the link 0 .. 1 s, arrives at 1.001
    b = link.post(0.5, 62_500_000, 0)   # posted while a is on the link: starts at 1 s
    c = link.post(5.0, 12_500_000, 0)   # the link is free again: starts when posted
    assert (a, b, c) == (pytest.approx(1.001), pytest.approx(1.501), pytest.approx(5.101))


def test_no_link_no_delay():
    link = Link(0.0)
    assert not link.active and link.post(3.0, 10**9, 10**9) == pytest.approx(3.0)
    link.hold_until(1e12)  # inactive: returns at once
    assert link.waited_s == 0.0
