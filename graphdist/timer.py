"""Wall-clock timing of a block, GPU work included."""
from __future__ import annotations

import time

import torch

__all__ = ["Timer"]


class Timer:
    """Wall-clock timer; syncs CUDA so GPU work is counted. ``with Timer() as t: ...; t.seconds``."""

    def __init__(self, device: torch.device | None = None):
        self.device = device
        self.seconds = 0.0

    def _sync(self):
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __enter__(self):
        self._sync()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self._sync()
        self.seconds = time.perf_counter() - self._t0
        return False
