"""Stop a launched job by a signal while the rendezvous keep-alive thread is inside a heartbeat
(tests only)::

    python -m tests.keepalive_entry MARKER

The heartbeat of torch's rendezvous handler is slowed from outside (it writes MARKER, then
holds the handler until :func:`graphdist.launch.launch` has returned, at most 8 s), and rank 0
sends the launcher SIGINT once MARKER exists: the launcher must let go of the handler with no
traceback ("cannot join current thread") and exit 130.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass


@dataclass
class Cfg:
    marker: str = ""
    """file the slowed heartbeat writes; rank 0 signals the launcher once it exists"""


def work(cfg: Cfg) -> int:
    if os.environ.get("RANK") == "0":
        t0 = time.monotonic()
        while not os.path.exists(cfg.marker) and time.monotonic() - t0 < 120:
            time.sleep(0.05)
        os.kill(os.getppid(), signal.SIGINT)
    time.sleep(120)  # the launcher's forwarded SIGINT ends this (KeyboardInterrupt: exit 130)
    return 0


def main(marker: str) -> int:
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr
    left = threading.Event()

    def slow_keep_alive(self):
        open(marker, "w").close()
        left.wait(8.0)  # the thread holds `self` (the handler) until launch() returned

    dr.DynamicRendezvousHandler._keep_alive = slow_keep_alive
    from graphdist.launch import launch
    from tests import keepalive_entry as me  # the workers import it by name, not as __main__
    code = launch(2, me.work, me.Cfg(marker=marker))
    left.set()
    time.sleep(1.0)  # the keep-alive thread, if still running, lets go of the handler now
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
