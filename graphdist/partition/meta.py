"""``meta.json``, the record every part of an artifact is checked against: its format version, the
figures of the partition and the SHA-256 of every file (:mod:`graphdist.partition.artifact` writes
it; :mod:`graphdist.partition.parts` checks a part file against it before reading one)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from graphdist.errors import ArtifactError

FORMAT_VERSION = 3
"""2: part files carry the pre/post-aggregation (mvc) layout; meta.json records SHA-256 hashes;
3: part format 3 (int32 local columns, memory-mapped); ``params.assignment`` names the file of a
partition given with ``--assignment``."""
META = "meta.json"

def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def check_hash(meta: dict, directory, name: str) -> None:
    """Refuse ``directory/name`` unless its SHA-256 is the one ``meta.json`` recorded."""
    want = (meta.get("sha256") or {}).get(name)
    path = Path(directory) / name
    if want is None:
        raise ArtifactError(f"{Path(directory) / META}: no hash recorded for {name}; {rebuild_hint(meta, directory)}")
    got = file_sha256(path)
    if got != want:
        raise ArtifactError(f"{path} was changed after partitioning (sha256 {got[:12]}, meta.json has "
                            f"{want[:12]}); {rebuild_hint(meta, directory)}")


def rebuild_hint(meta: dict, directory) -> str:
    """``rebuild it with: graphdist partition SPEC --parts K --method M --out DIR``."""
    p = meta.get("params") or {}
    spec = p.get("spec") or meta.get("graph") or "SPEC"
    k = meta.get("k", p.get("k", "K"))
    if p.get("assignment"):
        return f"rebuild it with: graphdist partition {spec} --assignment {p['assignment']} --parts {k} --out {directory}"
    method = meta.get("method") or "M"
    hosts = f" --hosts {p['hosts']}" if int(p.get("hosts", 1)) > 1 else ""
    return f"rebuild it with: graphdist partition {spec} --parts {k} --method {method}{hosts} --out {directory}"


def read_meta(directory) -> dict:
    """``meta.json`` of a complete artifact (ArtifactError if missing, incomplete or foreign)."""
    d = Path(directory)
    if not d.is_dir():
        raise ArtifactError(f"{d}: partition artifact not found (run `graphdist partition ... --out {d}`)")
    if not (d / META).exists():
        raise ArtifactError(f"{d}: incomplete partition artifact (no {META}); re-run `graphdist partition`")
    try:
        meta = json.loads((d / META).read_text())
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{d / META}: unreadable ({e})") from None
    ver = meta.get("format_version") if isinstance(meta, dict) else None
    if ver != FORMAT_VERSION:
        raise ArtifactError(f"{d}: partition artifact format {ver}, this graphdist reads format {FORMAT_VERSION}; "
                            + rebuild_hint(meta if isinstance(meta, dict) else {}, d))
    for key in ("fingerprint", "num_nodes", "k"):
        if key not in meta:
            raise ArtifactError(f"{d / META}: missing key '{key}'")
    return meta
