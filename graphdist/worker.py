"""Entry point of a worker started by :func:`graphdist.launch.launch`::

    python -m graphdist.worker MODULE:FUNCTION MODULE:CONFIG_CLASS CONFIG_JSON

rebuilds the config from JSON and calls ``FUNCTION(config)`` under the CLI's error policy, then
leaves as any Python program does (the job's function destroyed its process groups,
:func:`graphdist.runtime.shutdown`, so nothing of them is left for interpreter teardown).
"""
from __future__ import annotations

import importlib
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


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
