"""Entry point of a worker started by :func:`graphdist.launch.launch`::

    python -m graphdist.worker MODULE:FUNCTION MODULE:CONFIG_CLASS CONFIG_JSON

rebuilds the config from JSON and calls ``FUNCTION(config)`` under the CLI's error policy, then
leaves as any Python program does (the job's function destroyed its process groups,
:func:`graphdist.procgroup.shutdown`, so nothing of them is left for interpreter teardown), except
after a failed collective: then it leaves at once (``os._exit``, its output flushed), never
tearing down a group whose threads may wait on a dead peer (:func:`graphdist.failures.broken`).

Nothing heavy is imported before the worker is bound to its agent's life
(:func:`graphdist.proc.end_with_parent`) and a Ctrl-C is caught: a signal forwarded by the agent
while this worker is still importing torch or scipy ends it with graphdist's one line (rank 0),
exit 130, and no traceback.
"""
from __future__ import annotations

import importlib
import os
import sys


def _resolve(path: str):
    mod, name = path.split(":")
    obj = importlib.import_module(mod)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def main(argv: list[str]) -> int:
    from graphdist import config as config_mod
    from graphdist.launch import guarded
    fn_path, cls_path, text = argv
    cfg = config_mod.from_json(_resolve(cls_path), text)
    return guarded(_resolve(fn_path), cfg)


def _start(argv: list[str]) -> int:
    from graphdist.proc import end_with_parent
    end_with_parent()
    try:
        rc = main(argv)
    except KeyboardInterrupt:  # before the job's body (and its error policy) started: importing
        if os.environ.get("RANK", "0") == "0":
            sys.stderr.write("graphdist: interrupted (Ctrl-C)\n")
        return 130
    from graphdist.launch import leave
    return leave(rc)


if __name__ == "__main__":
    raise SystemExit(_start(sys.argv[1:]))
