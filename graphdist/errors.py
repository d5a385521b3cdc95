"""One exception family for everything graphdist reports to a user.

The CLI turns any of :data:`USER_ERRORS` (a :class:`GraphdistError`, or a partitioner's
``PartitionError``) into one line on stderr and exit code 2; anything else is a bug and keeps
its traceback.
"""
from __future__ import annotations


class GraphdistError(Exception):
    """Base class: a user-facing problem (bad input, bad flag, mismatched artifact)."""


class SpecError(GraphdistError):
    """A dataset spec string (``kind:arguments``) is malformed or names an unknown kind/argument."""


class DataFormatError(GraphdistError):
    """A data file's content is wrong; the message names the file and, where known, the line."""

    def __init__(self, path, message: str, line: int | None = None):
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


class MissingFileError(GraphdistError):
    """A file the input needs does not exist; the message says which and how to obtain it."""


class ConfigError(GraphdistError):
    """A flag or config value is out of range or inconsistent with another."""


class ArtifactError(GraphdistError):
    """A partition artifact or checkpoint does not match (fingerprint, k, format version)."""


class MissingDependencyError(GraphdistError):
    """A package the requested feature needs is not installed; the message gives the install command."""


class DistributedError(GraphdistError):
    """A distributed run cannot start or a peer failed (names the rank where known)."""


class JobFailed(GraphdistError):
    """The workers of a launched job ended with a user error or an interruption, which they
    already printed (one line each, rank 0 for errors every rank shares); the launching process
    exits with ``exit_code`` and prints nothing more."""

    def __init__(self, exit_code: int):
        super().__init__(f"the job's workers stopped with exit code {exit_code}")
        self.exit_code = int(exit_code)


class Interrupted(GraphdistError):
    """Training stopped on SIGINT/SIGTERM at a step boundary; the message says where it stopped
    and which checkpoint ``--resume`` continues from. Exit code 128 + the signal number."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + int(signum)


def __getattr__(name: str):
    """``USER_ERRORS`` = ``(GraphdistError, partitioners.PartitionError)``: errors a user can cause,
    printed as one line with exit code 2. Built on first use, so that ``import graphdist`` does
    not import partitioners (and torch) before the CLI has set up the environment."""
    if name == "USER_ERRORS":
        from partitioners.errors import PartitionError
        return (GraphdistError, PartitionError)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
