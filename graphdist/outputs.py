"""What trained models write for users' tools: a folder of Parquet files, one per rank, and a manifest.

    OUT/
      part-00000.parquet ...   one file per rank: the rows that rank computed (its own nodes,
                               its own users), written by that rank alone
      _manifest.json           written last, by rank 0: command, checkpoint, graph fingerprint,
                               model, columns (name -> type), rows (total and per file)

The whole folder is one table for pandas (``pd.read_parquet("OUT")``), pyarrow
(``pyarrow.dataset.dataset("OUT")``: both leave out names starting with ``_``, the manifest's as
Spark's ``_SUCCESS``), polars (``pl.read_parquet("OUT/*.parquet")``) and DuckDB
(``SELECT ... FROM 'OUT/*.parquet'``); ids are int64 or strings
(:mod:`graphdist.ids`), vectors fixed-size lists of float32 (:func:`vectors`).

Writing is atomic for the whole folder: every rank writes its file into a hidden sibling
``.OUT.tmp-*`` (each file fsynced), rank 0 writes ``_manifest.json`` last and renames the folder
into place (an existing ``OUT`` is moved aside first, with ``--overwrite``, and removed after the
swap). A crash leaves the old ``OUT`` or none, never one that reads as complete. The API, for
every command that writes such a folder (``infer``, ``recommend``, ``score``)::

    check_out(out, overwrite)                     # before any work: one line if OUT will not do
    w = PartsWriter(out, overwrite)               # collective: rank 0 makes the temporary folder
    w.write(table)                                # this rank's rows (a pyarrow.Table), or
    w.write_batches(schema, batches)              #   in slices, never the whole table at once
    manifest = w.close({"command": "infer", ...}) # collective: rank 0 publishes, all get the manifest
    w.abort()                                     # on failure (PartsWriter is a context manager)

With ``group=None`` the writer works at world size 1 without a process group (one process).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from graphdist.errors import ConfigError

__all__ = ["check_out", "PartsWriter", "part_name", "vectors", "id_array", "read_manifest", "begin_dir", "swap_into", "write_model_dir",
           "MANIFEST",
           "FORMAT_VERSION", "ROWS_PER_GROUP", "WRITER_BYTES"]

MANIFEST = "_manifest.json"
FORMAT_VERSION = 1
"""The manifest's ``format_version``."""
ROWS_PER_GROUP = 1 << 16
"""Rows per Parquet row group (and per slice converted at once)."""
WRITER_BYTES = 96 * 2 ** 20
"""pyarrow and its Parquet writer, loaded at the first write (libraries, mimalloc's pool): a rank's
resident set grew by 117 MiB writing 20,000 rows of 8 logits and 256 floats (21 MB) and by 164 MiB
writing 100,000 (row groups of 65,536 rows, 70 MB): 96 MiB plus one row group, rounded up
(SBM, 2 x 256, k = 1, 2026-12-06; BENCHMARKS.md "After training: outputs")."""


def part_name(rank: int) -> str:
    """``part-RRRRR.parquet``."""
    return f"part-{rank:05d}.parquet"


def check_out(out, overwrite: bool, flag: str = "--out", overwrite_flag: str = "--overwrite") -> None:
    """Refuse, before any work, an output folder that will not do: a file, a non-empty folder
    without ``--overwrite``, or one that cannot be written (a probe file in its nearest existing
    ancestor; nothing is created). One :class:`~graphdist.errors.ConfigError` line naming ``flag`` and the path."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{flag} {out}: exists and is not a directory")
    if p.is_dir() and any(p.iterdir()) and not overwrite:
        raise ConfigError(f"{flag} {out}: exists and is not empty; add {overwrite_flag} to replace it, or choose another")
    parent = p.absolute().parent
    a = parent
    while not a.exists() and a != a.parent:
        a = a.parent
    if not a.is_dir():
        raise ConfigError(f"{flag} {out}: cannot write there ({a} is a file, not a directory)")
    try:  # a probe where the folder would be made (nothing is created before the work)
        with tempfile.NamedTemporaryFile(dir=a, prefix=f".{p.name}.probe-"):
            pass
    except OSError as e:
        raise ConfigError(f"{flag} {out}: cannot write there ({e.strerror or type(e).__name__})") from None


def id_array(ids):
    """A pyarrow column of ids: int64, or string where the ids are strings (:mod:`graphdist.ids`)."""
    import pyarrow as pa
    a = np.asarray(ids)
    if a.dtype.kind in "US":
        return pa.array(a.astype(str), type=pa.string())
    return pa.array(a.astype(np.int64, copy=False), type=pa.int64())


def vectors(rows):
    """A ``fixed_size_list<float32>[D]`` column from ``[n, D]`` rows (numpy or torch; no copy
    where they already are contiguous float32)."""
    import pyarrow as pa
    a = rows.detach().cpu().numpy() if hasattr(rows, "detach") else np.asarray(rows)
    a = np.ascontiguousarray(a, dtype=np.float32)
    d = a.shape[1] if a.ndim == 2 else 1
    return pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1), type=pa.float32()), d)


def _type_name(t) -> str:
    import pyarrow as pa
    name = {pa.float32(): "float32", pa.float64(): "float64"}
    if pa.types.is_fixed_size_list(t):
        return f"list<{name.get(t.value_type, str(t.value_type))}>[{t.list_size}]"
    return name.get(t, str(t))


class PartsWriter:
    """One output folder written by every rank of a job (see the module docstring). Collective
    in its constructor and :meth:`close`; ``group``: the process group (None: the default one,
    or one process without any)."""

    def __init__(self, out, overwrite: bool = False, group=None):
        from graphdist import comm
        self.out, self.overwrite, self.group = Path(out), bool(overwrite), group
        self.rank, self.world = _world(group)
        tmp = None
        if self.rank == 0:
            self.out.absolute().parent.mkdir(parents=True, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=f".{self.out.name}.tmp-", dir=self.out.absolute().parent)
        self.tmp = Path(comm.all_gather_json(tmp, group)[0] if self.world > 1 else tmp)
        self.info: dict | None = None

    def __enter__(self):
        return self

    def __exit__(self, tp, value, tb):
        if tp is not None:
            self.abort()
        return False

    @property
    def path(self) -> Path:
        """This rank's file in the temporary folder."""
        return self.tmp / part_name(self.rank)

    def write(self, table) -> dict:
        """This rank's rows: a ``pyarrow.Table``, written in row groups of :data:`ROWS_PER_GROUP`."""
        return self.write_batches(table.schema, table.to_batches(max_chunksize=ROWS_PER_GROUP))

    def write_batches(self, schema, batches) -> dict:
        """This rank's rows as record batches of ``schema`` (each converted when it is written,
        so a rank never holds its table twice); fsynced. Returns ``{"file", "rows", "bytes"}``."""
        import pyarrow.parquet as pq
        if not self.tmp.is_dir():
            raise ConfigError(f"--out {self.out}: rank {self.rank} cannot see {self.tmp}, which rank 0 made; a job "
                              "on several nodes needs --out on a file system every node mounts")
        import pyarrow as pa
        floats = [f.name for f in schema if not (_is_vector(f.type) or pa.types.is_floating(f.type))]
        rows = 0
        with pq.ParquetWriter(self.path, schema, compression="snappy", use_dictionary=floats,
                              write_statistics=floats) as w:
            for b in batches:
                w.write_batch(b, row_group_size=ROWS_PER_GROUP)
                rows += b.num_rows
        from graphdist.fileio import fsync_file
        fsync_file(self.path)
        self.info = {"file": part_name(self.rank), "rows": rows, "bytes": self.path.stat().st_size,
                     "columns": {f.name: _type_name(f.type) for f in schema}}
        return self.info

    def close(self, manifest: dict) -> dict:
        """Collective: every rank has written its file (a rank without rows writes an empty
        one); rank 0 writes ``_manifest.json`` (``manifest`` plus the columns, rows and files)
        and swaps the folder into place. Returns the manifest on every rank."""
        from graphdist import comm
        if self.info is None:
            raise ConfigError("PartsWriter.close before this rank wrote its file")
        parts = comm.all_gather_json(self.info, self.group) if self.world > 1 else [self.info]
        full = {"format_version": FORMAT_VERSION, **manifest, "columns": parts[0]["columns"],
                "rows": int(sum(p["rows"] for p in parts)),
                "parts": [{k: p[k] for k in ("file", "rows", "bytes")} for p in parts],
                "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        err = None
        if self.rank == 0:
            try:
                self._publish(full)
            except OSError as e:
                err = f"--out {self.out}: could not finish the output ({e.strerror or e})"
        if self.world > 1:
            err = comm.all_gather_json(err, self.group)[0]
        if err:
            self.abort()
            raise ConfigError(err)
        return full

    def _publish(self, manifest: dict) -> None:
        from graphdist.fileio import atomic_write_json
        atomic_write_json(self.tmp / MANIFEST, manifest)
        swap_into(self.tmp, self.out, self.overwrite)

    def abort(self) -> None:
        """Remove the temporary folder (rank 0; the others' files are in it)."""
        if self.rank == 0:
            shutil.rmtree(self.tmp, ignore_errors=True)


def begin_dir(out) -> Path:
    """A hidden temporary sibling of ``out`` to write a whole output folder into (then
    :func:`swap_into`)."""
    out = Path(out)
    out.absolute().parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.absolute().parent))


def swap_into(tmp, out, overwrite: bool) -> None:
    """Make the finished folder ``tmp`` (its files written and fsynced) ``out``: an existing
    ``out`` (empty, or replaced with ``overwrite``) is moved aside first and removed after the
    rename; the parent is fsynced, so the rename survives a power loss."""
    from graphdist.fileio import fsync_dir
    tmp, out = Path(tmp), Path(out)
    fsync_dir(tmp)
    old = None
    if out.exists():  # checked before any work: empty, or --overwrite
        if any(out.iterdir()) and not overwrite:
            raise OSError(f"{out} is not empty (written meanwhile by another job?)")
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.absolute().parent))
        os.rmdir(old)
        os.replace(out, old)
    os.replace(tmp, out)
    fsync_dir(out.absolute().parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_model_dir(out, overwrite: bool, state: dict, spec: dict, source: str) -> None:
    """An exported model's folder, whole or not at all: ``model.pt`` (``state``), ``model.json``
    (``spec``) and ``model.py`` (``source``), written into :func:`begin_dir` and swapped into ``out``."""
    from graphdist.fileio import atomic_torch_save, atomic_write_json, atomic_write_text
    tmp = begin_dir(out)
    try:
        atomic_torch_save(state, tmp / "model.pt")
        atomic_write_json(tmp / "model.json", spec)
        atomic_write_text(tmp / "model.py", source)
        swap_into(tmp, out, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _is_vector(t) -> bool:
    import pyarrow as pa
    return pa.types.is_fixed_size_list(t) or pa.types.is_list(t)


def _world(group) -> tuple[int, int]:
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1
    from graphdist import comm
    return comm.world(group)


def read_manifest(out) -> dict:
    """``OUT/_manifest.json`` of a complete output folder."""
    p = Path(out) / MANIFEST
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{p}: not a complete graphdist output ({e})") from None
