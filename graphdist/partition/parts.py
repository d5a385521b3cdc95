"""Per-part files of a partition artifact: each rank loads only its own part.

    DIR/part_00000.pt  ...  DIR/part_{k-1:05d}.pt     (torch.save of a dict of tensors)

A rank maps its file (``torch.load(mmap=True)``): its tensors are pages of the file, read when
first touched, so loading a part never holds it twice in memory. Parts are written one at a
time: the partition command never holds every part's node data at once.

Each file holds one :class:`~graphdist.partition.local.LocalGraph` (see :mod:`graphdist.partition.local` for
the layout: owned global ids, local CSR over ``[owned | halo from peer 0 | ... ]``, the plain and
the pre-aggregation (mvc) exchange layouts, global degrees of all local columns, the part's
x/y/masks) plus ``format_version`` and the graph ``fingerprint``. Inside an artifact,
:func:`load_part` checks the file's SHA-256 against ``meta.json`` before reading it. ``meta.json`` and ``assignment.npy`` belong
to :mod:`graphdist.partition.artifact`, which calls :func:`write_parts` into its temp dir.
"""
from __future__ import annotations

from pathlib import Path

import torch

from graphdist.errors import ArtifactError, MissingFileError
from graphdist.fileio import atomic_torch_save
from graphdist.partition.meta import check_hash, read_meta
from graphdist.partition.layout import LocalGraph, SharedArrays, build_layout, checked_assignment, layout_stats, validate_layouts

PART_FORMAT_VERSION = 3
"""2: the mvc layout (halo_raw, send_raw, pre_rows, pre_ptr, pre_src, pre_dst and counts);
3: int32 local column ids (``indices``), files read memory-mapped."""
_NODE_DATA = ("x", "y", "train_mask", "val_mask", "test_mask")


def part_path(directory, rank: int) -> Path:
    return Path(directory) / f"part_{rank:05d}.pt"


def write_parts(directory, graph, assignment, k: int | None = None) -> dict:
    """Write ``part_%05d.pt`` for every part of ``graph`` under ``assignment`` (atomically).

    ``k`` defaults to ``max(assignment) + 1``. Returns a small JSON-able summary
    (``parts``, ``files``, per-part ``owned_nodes``/``halo_rows``/``local_edges``, ``bytes``).
    """
    a = torch.as_tensor(assignment).to(torch.int64)
    if k is None:
        k = int(a.max()) + 1 if a.numel() else 1
    a = checked_assignment(graph, a, k)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    sh = SharedArrays(graph, a, k)
    plans, sizes = [], []
    for r in range(k):
        p = build_layout(graph, a, r, k, shared=sh)
        dst = part_path(d, r)
        save_part(p, dst)
        sizes.append(dst.stat().st_size)
        for name in _NODE_DATA:  # written: only the exchange layout stays for the check below
            setattr(p, name, None)
        plans.append(p)
    del sh
    validate_layouts(plans)
    out = {"parts": k, "files": [part_path(d, r).name for r in range(k)], "bytes": sizes}
    out.update(layout_stats(plans))
    return out


def save_part(lg: LocalGraph, path) -> None:
    """One part file (atomically), with :data:`PART_FORMAT_VERSION`."""
    payload = lg.to_dict()
    payload["format_version"] = PART_FORMAT_VERSION
    atomic_torch_save(payload, path)


def load_part(directory, rank: int) -> LocalGraph:
    """Load part ``rank`` of the artifact at ``directory`` (only that part's file is read)."""
    path = part_path(directory, rank)
    if not path.exists():
        raise MissingFileError(f"{path}: part file for rank {rank} not found (re-run `graphdist partition`)")
    if (Path(directory) / "meta.json").exists():
        check_hash(read_meta(directory), directory, path.name)
    try:
        d = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # noqa: BLE001
        raise ArtifactError(f"{path}: cannot read part file: {e}") from e
    ver = d.pop("format_version", None)
    if ver != PART_FORMAT_VERSION:
        raise ArtifactError(f"{path}: part format {ver}, this graphdist reads format {PART_FORMAT_VERSION}; "
                            "rebuild the artifact with `graphdist partition`")
    if d.get("rank") != rank:
        raise ArtifactError(f"{path}: file holds part {d.get('rank')}, expected {rank}")
    return LocalGraph(**d)
