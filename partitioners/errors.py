"""The one exception partitioners raise for bad input (k out of range, unknown method, ...).

It derives from ``graphdist.errors.ConfigError`` when graphdist is importable (so the CLI prints
one line and exits 2) and from ``ValueError`` always; partitioners itself never needs graphdist.
"""
from __future__ import annotations

try:  # soft dependency: the error family only, no other graphdist import
    from graphdist.errors import ConfigError as _Base
except ImportError:  # pragma: no cover - partitioners used standalone
    _Base = Exception


class PartitionError(_Base, ValueError):
    """Bad partitioning input: the message names the offending value and the allowed range."""


class MissingBackendError(PartitionError):
    """An optional partitioning library is not installed; the message gives the pip command."""
