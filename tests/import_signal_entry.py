"""Stop a launched job by Ctrl-C while its workers are still importing (tests only)::

    python -m tests.import_signal_entry MARKER

Each worker imports this module to rebuild its config; there, importing takes long (it writes
MARKER, then sleeps), as scipy or torch do on a cold machine. Once MARKER exists the launching
process gets SIGINT, as from a terminal, and its agent forwards it to the importing workers: the
job must end with graphdist's one line, exit 130, and no traceback.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass

if os.environ.get("RANK") is not None and os.environ.get("IMPORT_SIGNAL_MARKER"):
    open(os.environ["IMPORT_SIGNAL_MARKER"] + os.environ["RANK"], "w").close()
    time.sleep(60)  # a slow import, ended by the forwarded SIGINT


@dataclass
class Cfg:
    report: str = ""
    """unused"""


def work(cfg: Cfg) -> int:
    return 0


def main(marker: str) -> int:
    from graphdist.launch import launch
    from tests import import_signal_entry as me  # the workers import it by name, not as __main__

    def ctrl_c():
        t0 = time.monotonic()
        while not all(os.path.exists(marker + r) for r in "01") and time.monotonic() - t0 < 120:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    os.environ["IMPORT_SIGNAL_MARKER"] = marker
    threading.Thread(target=ctrl_c, daemon=True).start()
    return launch(2, me.work, me.Cfg())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
