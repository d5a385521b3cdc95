"""A checkpoint writer for tests/test_checkpoint_crash.py (tests only), run in a forked process
(:func:`graphdist.testing.fork`): ``main(root, stop_at, scenario, conn)``.

Saves step 1 (every value 1.0), then saves a second snapshot (``new``: step 2 with 2.0;
``same``: step 1 again with 3.0, the snapshot ``latest`` names) while every file-system step of
the save (directory creation, DCP's write, fsync, rename, removal) is counted; before the
STOP_AT-th one it says ``PAUSED`` and waits to be killed (SIGKILL from the test). With a
STOP_AT beyond the last step it says ``DONE <steps>``. It says it on ``conn``
(:func:`graphdist.testing.pipe`).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
import warnings


def main(root: str, stop_at: int, scenario: str, conn) -> None:
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed.checkpoint as dcp

    import graphdist.checkpoint as ck
    import graphdist.fileio as fio
    c = ck.Checkpointer(root, keep=2)
    c.save(1, {"w": torch.full((64,), 1.0)}, {"history": {"v": 1}})
    count = [0]

    def hook(real):
        def wrapped(*a, **k):
            count[0] += 1
            if count[0] == stop_at:
                conn.send("PAUSED")
                time.sleep(600)
            return real(*a, **k)
        return wrapped
    fake_os = type(sys)("os_hooked")
    fake_os.__dict__.update(os.__dict__)
    for name in ("replace", "fsync", "mkdir", "rmdir", "unlink"):
        setattr(fake_os, name, hook(getattr(os, name)))
    fake_shutil = type(sys)("shutil_hooked")
    fake_shutil.__dict__.update(shutil.__dict__)
    fake_shutil.rmtree = hook(shutil.rmtree)
    ck.os, fio.os, ck.shutil = fake_os, fake_os, fake_shutil
    dcp_save = dcp.save
    dcp.save = hook(dcp_save)
    step, value = (2, 2.0) if scenario == "new" else (1, 3.0)
    c.save(step, {"w": torch.full((64,), value)}, {"history": {"v": value}})
    conn.send(f"DONE {count[0]}")
