"""The exceptions partitioners raise for bad input (k out of range, unknown method, ...).

Both are ``ValueError``s; partitioners never imports graphdist (dependencies point one way:
partitioners <- graphdist). graphdist treats them as user errors (``graphdist.errors.USER_ERRORS``:
one line, exit code 2).
"""
from __future__ import annotations


class PartitionError(ValueError):
    """Bad partitioning input: the message names the offending value and the allowed range."""


class MissingBackendError(PartitionError):
    """An optional partitioning library is not installed; the message gives the pip command."""
