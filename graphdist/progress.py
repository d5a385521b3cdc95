"""A run's progress: tqdm's bar on a terminal, plain lines in a log.

A bar redraws itself with carriage returns, so in a file (``graphdist train-gcn ... 2> run.log``,
a batch system's log, the test bed's prefixed output) each redraw is kept: thousands of bar
states on one line, and nothing a ``tail -f`` can read until the run ends. When the stream is
not a terminal, :func:`progress` writes one line at each tenth of the run and at least every
:data:`EVERY_S` seconds while it advances, plus one at the end, each a whole line::

    train-gcn: epoch 300/3000 (10%), 37.4 epoch/s, 1m12s left, loss=0.0216, val=1.000

(where it is, how fast, how long is left, and the values a bar would show).
"""
from __future__ import annotations

import sys
import time

__all__ = ["progress", "LogLines", "EVERY_S"]

EVERY_S = 60.0
"""In a log, a line at least this often (seconds) while the run advances, between the tenths."""


def progress(total: int, *, desc: str, unit: str, initial: int = 0, enabled: bool = True, stream=None):
    """A progress display with tqdm's ``update(n)`` / ``set_postfix(dict)`` / ``close()``: tqdm's
    bar when ``stream`` (default stderr) is a terminal, :class:`LogLines` otherwise, a disabled
    bar when not ``enabled``."""
    from tqdm import tqdm
    stream = sys.stderr if stream is None else stream
    if not enabled:
        return tqdm(total=total, disable=True)
    if _is_terminal(stream):
        return tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, file=stream)
    return LogLines(total, desc=desc, unit=unit, initial=initial, stream=stream)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or stream-like object without a terminal
        return False


class LogLines:
    """Progress as whole lines (see the module docstring); the clock only chooses when a line in
    between the tenths is written, never what a line says about the run's position."""

    def __init__(self, total: int, *, desc: str, unit: str, initial: int = 0, stream=None, clock=time.monotonic):
        self.total, self.desc, self.unit = int(total), desc, unit
        self.n = self.start = self.shown = int(initial)
        self.stream = sys.stderr if stream is None else stream
        self.clock = clock
        self.t0 = self.t_shown = clock()
        self.postfix: dict = {}
        self.closed = False

    def set_postfix(self, values: dict | None = None, **kw) -> None:
        self.postfix = {**(values or {}), **kw}

    def update(self, n: int = 1) -> None:
        before, self.n = self.n, self.n + int(n)
        tenth = self._tenth(self.n) > self._tenth(before)
        if tenth or self.clock() - self.t_shown >= EVERY_S:
            self._line()

    def close(self) -> None:
        if not self.closed and self.n > self.shown:
            self._line()
        self.closed = True

    def _tenth(self, n: int) -> int:
        return 10 * n // self.total if self.total > 0 else 0

    def _line(self) -> None:
        now = self.clock()
        parts = [f"{self.unit} {self.n}/{self.total} ({100 * self.n // max(self.total, 1)}%)"]
        dt, done = now - self.t0, self.n - self.start
        if dt > 0 and done > 0:
            rate = done / dt
            parts.append(f"{rate:.3g} {self.unit}/s")
            if self.n < self.total:
                parts.append(f"{_span((self.total - self.n) / rate)} left")
        parts += [f"{k}={_fmt(v)}" for k, v in self.postfix.items()]
        self.stream.write(f"{self.desc}: {', '.join(parts)}\n")
        self.stream.flush()
        self.shown, self.t_shown = self.n, now


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _span(seconds: float) -> str:
    s = int(round(seconds))
    if s < 1:
        return "<1s"
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
