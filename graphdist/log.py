"""graphdist's log: INFO from rank 0 only, warnings and errors from every rank (prefixed with the
rank when the job has several)."""
from __future__ import annotations

import logging
import sys

from graphdist.proc import env_world

__all__ = ["get_logger"]


class _Rank0Filter(logging.Filter):
    def filter(self, record):  # other ranks only say warnings and errors
        return env_world()[0] == 0 or record.levelno >= logging.WARNING


class _Stderr(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when a record is emitted (not the one
    of the moment the logger was made), so a redirected or captured stderr gets the lines."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ assigns it
        pass


def get_logger(name: str = "graphdist") -> logging.Logger:
    """A logger that prints INFO on rank 0 only and warnings on every rank (prefixed)."""
    log = logging.getLogger(name)
    if not getattr(log, "graphdist_handler", False):
        h = _Stderr()
        rank = env_world()[0]
        h.setFormatter(logging.Formatter(f"[rank {rank}] %(message)s" if env_world()[1] > 1 else "%(message)s"))
        h.addFilter(_Rank0Filter())
        log.addHandler(h)
        log.setLevel(logging.INFO)
        log.propagate = False
        log.graphdist_handler = True
    return log
