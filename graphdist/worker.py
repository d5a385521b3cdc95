"""Entry point of a worker started by :func:`graphdist.launch.launch`::

    python -m graphdist.worker MODULE:FUNCTION MODULE:CONFIG_CLASS CONFIG_JSON

rebuilds the config from JSON and calls ``FUNCTION(config)`` under the CLI's error policy.
"""
from __future__ import annotations

import importlib
import logging
import os
import sys

from graphdist import config as config_mod
from graphdist.launch import guarded


def _resolve(path: str):
    mod, name = path.split(":")
    obj = importlib.import_module(mod)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def main(argv: list[str]) -> int:
    fn_path, cls_path, text = argv
    cfg = config_mod.from_json(_resolve(cls_path), text)
    return guarded(_resolve(fn_path), cfg)


def _exit(code: int) -> None:
    """Leave without interpreter finalisation. The work is done and every file was written
    atomically; what finalisation would add is the teardown of gloo's C++ threads, which can
    abort a finished worker ("terminate called without an active exception", seen in about 1 run
    in 20 of a resumed 2-rank job on a loaded 2-core box) and turn a finished job into a failed
    one."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main(sys.argv[1:]))
