"""The ``graphdist`` console script.

Each subcommand lives in its own module ``graphdist/cli/cmd_<name>.py`` exposing
``register(subparsers)``, which adds its parser and sets ``func=handler(args) -> int``.
Modules are discovered in name order, so a command appears exactly when its module exists.
Any :class:`~graphdist.errors.GraphdistError` becomes one line on stderr and exit code 2
(:func:`graphdist.launch.guarded`). Handlers are thin: they build the command's typed config
from the flags (:mod:`graphdist.config`) and call a library function.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``graphdist: error: CMD: ...``) that end with where the flags
    are listed (``run graphdist CMD --help``), and exit code 2."""

    entered: list = [""]
    """The prog of the innermost (sub)command parser entered last: a flag no parser took is
    reported by the top-level parser, but belongs to that command."""

    def parse_known_args(self, args=None, namespace=None):
        _Parser.entered[0] = self.prog
        return super().parse_known_args(args, namespace)

    def error(self, message):  # noqa: D401
        prog = _Parser.entered[0] if message.startswith("unrecognized arguments") else self.prog
        cmd = prog.removeprefix("graphdist").strip()
        sys.stderr.write(f"graphdist: error: {cmd or 'usage'}: {message} (run {' '.join(['graphdist', cmd]).strip()} "
                         "--help)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from graphdist import __version__
    p = _Parser(prog="graphdist", description="Distributed full-batch GNN and sharded DLRM training.")
    p.add_argument("--version", action="version", version=f"graphdist {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    import graphdist.cli as pkg
    for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if m.name.startswith("cmd_"):
            importlib.import_module(f"graphdist.cli.{m.name}").register(sub)
    return p


def quiet_cpp_logs() -> None:
    """torch's C++ log lines (a TCPStore peer gone or a rendezvous endpoint not answering, each
    with 30-40 stack frames) say what graphdist then says in one line, where every failure ends;
    off unless the user chose a level (``TORCH_CPP_LOG_LEVEL``). Set before torch is imported,
    inherited by the workers."""
    import os
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")


def main(argv: list[str] | None = None) -> int:
    from graphdist.proc import end_with_parent, started_by_an_agent
    if started_by_an_agent():  # a worker of torchrun: it ends with its agent, never outlives it
        end_with_parent()
    quiet_cpp_logs()
    from graphdist.launch import guarded
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, --version, or a flag error already printed as one line
        return int(e.code or 0)
    try:
        return guarded(args.func, args)
    except BrokenPipeError:  # `graphdist ... | head`: the reader is gone, nothing left to say
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def run() -> int:
    """The ``graphdist`` command and ``python -m graphdist``: :func:`main`, then the exit of a
    process that ran a job (:func:`graphdist.launch.leave`)."""
    rc = main()
    from graphdist.launch import leave
    return leave(rc)


if __name__ == "__main__":  # python -m graphdist.cli
    raise SystemExit(run())
