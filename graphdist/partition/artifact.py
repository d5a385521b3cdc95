"""Partition artifact directory: what ``graphdist partition`` writes and training reads.

    DIR/
      meta.json          format_version, fingerprint, num_nodes, num_edges, k, method,
                         params, quality, time, parts (summary of the per-part files),
                         sha256 (of assignment.npy and of every part file)
      assignment.npy     int64 [N]: part of every node, in the loader's node order
      part_00000.pt ...  one file per rank (graphdist.partition.parts.write_parts)
      ids_00000.npy ...  per part, the input's own ids of its owned nodes (graphdist.ids; absent
                         where the node index is the id: meta.json "ids" says which)
      rec_00000.pt ...   recommender artifacts only: each part's own users' train/test
                         interactions (graphdist.rec.artifact; meta.json "rec" has the sizes)

Writing is atomic: everything goes into a temporary sibling directory, ``meta.json`` last,
then one ``rename`` puts it in place (an existing artifact is moved aside first and removed
after the swap). A killed run leaves only a ``.DIR.tmp-*`` sibling, never a ``DIR`` that reads
as complete; a directory without ``meta.json`` is reported as incomplete.

Reading checks what was written: ``assignment.npy`` and each part file must have the SHA-256
recorded in ``meta.json`` (a replaced file is refused, never read with stale figures), and an
artifact of another format version is refused with the command that rebuilds it.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from graphdist.errors import ArtifactError
from graphdist.partition.meta import FORMAT_VERSION, META, check_hash, file_sha256, read_meta, rebuild_hint
from graphdist.partition.parts import write_parts

ASSIGNMENT = "assignment.npy"

__all__ = ["write_artifact", "begin_artifact", "artifact_meta", "finish_artifact", "read_artifact", "read_meta",
           "check_artifact", "check_hash", "file_sha256", "rebuild_hint", "Artifact", "FORMAT_VERSION", "META",
           "write_ids", "read_part_ids"]


class Artifact(tuple):
    """``(meta, assignment)`` as read from disk. Unpacks as a pair; indexing with a string
    (``art["k"]``) and ``.get`` read ``meta`` directly, so it also serves as the meta dict."""

    def __new__(cls, meta: dict, assignment: torch.Tensor):
        return super().__new__(cls, (meta, assignment))

    @property
    def meta(self) -> dict:
        return tuple.__getitem__(self, 0)

    @property
    def assignment(self) -> torch.Tensor:
        return tuple.__getitem__(self, 1)

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.meta[key]
        return tuple.__getitem__(self, key)

    def __contains__(self, key):
        return key in self.meta if isinstance(key, str) else tuple.__contains__(self, key)

    def get(self, key, default=None):
        return self.meta.get(key, default)

    def keys(self):
        return self.meta.keys()


def write_artifact(out_dir, graph, assignment, *, method: str, params: dict, quality: dict,
                   seconds: float, k: int | None = None, extra=None) -> Path:
    """Write the artifact for ``graph`` split by ``assignment`` into ``out_dir`` atomically.

    ``k`` defaults to ``params["k"]`` or ``max(assignment) + 1``. ``extra(tmp_dir, assignment,
    k) -> (key, meta_value, file names)`` writes a workload's own per-part files (the
    recommender's interactions, :mod:`graphdist.rec.artifact`) beside the parts: they are hashed
    like the part files and ``meta[key]`` describes them. Refuses to replace a non-empty
    directory that is not an artifact. Returns the final path."""
    out = Path(out_dir)
    a = torch.as_tensor(assignment).to(torch.int64).contiguous()
    n = int(graph.num_nodes)
    if k is None:
        k = int(params.get("k", int(a.max()) + 1 if a.numel() else 1))
    _check_assignment(a, n, k, out)
    tmp = begin_artifact(out)
    try:
        np.save(tmp / ASSIGNMENT, a.numpy())
        parts = write_parts(tmp, graph, a, k)
        meta = artifact_meta(fingerprint=graph.fingerprint, graph=getattr(graph, "name", "") or "", num_nodes=n,
                             num_edges=int(graph.num_edges), k=int(k), method=method, params=params,
                             quality=quality, seconds=seconds, parts=parts)
        meta["ids"], id_files = write_ids(tmp, getattr(graph, "node_ids", None), a, int(k))
        files = [ASSIGNMENT] + parts["files"] + id_files
        if extra is not None:
            key, value, more = extra(tmp, a, int(k))
            meta[key] = value
            files += list(more)
        finish_artifact(tmp, out, meta, files)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def write_ids(tmp: Path, node_ids, a: torch.Tensor, k: int) -> tuple[dict, list[str]]:
    """``(meta["ids"], files)``: per part the ids of its owned nodes in ascending node index
    (:data:`graphdist.ids.ID_FILE`), or ``{"type": "index"}`` and no file where the index is
    the id (:mod:`graphdist.ids`)."""
    from graphdist.ids import ID_FILE, INDEX, id_type, save_ids
    kind = id_type(node_ids)
    if kind == INDEX:
        return {"type": INDEX}, []
    ids, part = np.asarray(node_ids), a.numpy()
    files = [ID_FILE.format(r) for r in range(k)]
    for r, name in enumerate(files):
        save_ids(Path(tmp) / name, ids[part == r])
    return {"type": kind, "files": files}, files


def read_part_ids(directory, rank: int, meta: dict | None = None):
    """The ids of part ``rank``'s owned nodes (ascending node index, hash-checked), or None where
    the index is the id. An artifact written before graphdist kept the input's ids is refused in
    one line with the command that rebuilds it."""
    from graphdist.ids import ID_FILE, INDEX, load_ids
    d = Path(directory)
    meta = read_meta(d) if meta is None else meta
    ids = meta.get("ids")
    if not isinstance(ids, dict) or "type" not in ids:
        raise ArtifactError(f"{d}: the artifact does not record the input's node ids (written by an older graphdist), "
                            f"so outputs could not be keyed by them; {rebuild_hint(meta, d)}")
    if ids["type"] == INDEX:
        return None
    name = ID_FILE.format(rank)
    check_hash(meta, d, name)
    try:
        return load_ids(d / name)
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{d / name}: unreadable ({e})") from None


def begin_artifact(out: Path) -> Path:
    """The temporary sibling directory an artifact for ``out`` is written into (after checking
    that ``out`` is absent, empty or an artifact, which it may replace)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / META).exists())):
        raise ArtifactError(f"{out} exists and is not a partition artifact (no {META}); "
                            "choose another --out or remove it")
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))


def artifact_meta(*, fingerprint: str, graph: str, num_nodes: int, num_edges: int, k: int, method: str,
                  params: dict, quality: dict, seconds: float, parts: dict) -> dict:
    """``meta.json``'s content, less the hashes (:func:`finish_artifact` adds them)."""
    return {
        "format_version": FORMAT_VERSION,
        "fingerprint": fingerprint,
        "graph": graph,
        "num_nodes": int(num_nodes),
        "num_edges": int(num_edges),
        "k": int(k),
        "method": method,
        "params": params,
        "quality": quality,
        "time": {"partition_s": float(seconds),
                 "written_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "parts": parts,
    }


def finish_artifact(tmp: Path, out: Path, meta: dict, files: list[str], known: dict | None = None) -> None:
    """Hash ``files`` of ``tmp`` into ``meta`` (but those whose hash is ``known``: the k-rank
    build hashes each part on the rank that wrote it), write ``meta.json`` last (fsynced: its
    presence marks a complete artifact), then swap ``tmp`` into ``out`` (an old artifact is
    moved aside first and removed after the swap)."""
    tmp, out = Path(tmp), Path(out)
    known = known or {}
    meta["sha256"] = {name: known[name] if name in known else file_sha256(tmp / name) for name in files}
    with open(tmp / META, "w") as f:
        json.dump(meta, f, indent=2, sort_keys=False, default=_json_default)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rmdir(old)
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (np.ndarray, torch.Tensor)):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _check_assignment(a: torch.Tensor, n: int, k: int, where) -> None:
    if a.dim() != 1 or a.numel() != n:
        raise ArtifactError(f"{where}: assignment has {a.numel()} entries but the graph has {n} nodes")
    if n and int(a.min()) < 0:
        raise ArtifactError(f"{where}: assignment has a negative part id ({int(a.min())})")
    if n and int(a.max()) >= k:
        raise ArtifactError(f"{where}: assignment has part id {int(a.max())} >= k={k}")


def read_artifact(directory) -> Artifact:
    """``(meta, assignment LongTensor[N])`` of the artifact at ``directory``, validated
    (length N, ids in ``[0, k)``). The result also indexes like ``meta`` (``art["k"]``)."""
    d = Path(directory)
    meta = read_meta(d)
    path = d / ASSIGNMENT
    if not path.exists():
        raise ArtifactError(f"{d}: incomplete partition artifact (no {ASSIGNMENT})")
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path}: unreadable ({e})") from None
    a = torch.from_numpy(np.ascontiguousarray(arr).astype(np.int64, copy=False))
    _check_assignment(a, int(meta["num_nodes"]), int(meta["k"]), path)
    check_hash(meta, d, ASSIGNMENT)
    return Artifact(meta, a)


def check_artifact(meta, graph=None, k: int | None = None) -> None:
    """Raise ArtifactError (naming both values) if ``meta`` was not cut from ``graph`` or does
    not have ``k`` parts."""
    if graph is not None:
        fp = graph.fingerprint
        if meta["fingerprint"] != fp:
            raise ArtifactError(f"partition was cut from a graph with fingerprint {meta['fingerprint']} "
                                f"but this graph has fingerprint {fp}")
        if int(meta["num_nodes"]) != int(graph.num_nodes):
            raise ArtifactError(f"partition has {meta['num_nodes']} nodes but the graph has {graph.num_nodes}")
    if k is not None and int(meta["k"]) != int(k):
        raise ArtifactError(f"partition has k={meta['k']} parts but {k} were requested")
