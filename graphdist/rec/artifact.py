"""Recommender partition artifacts: ``graphdist partition ratings:|lightgcn:|rec-synth:...``
writes the user-item graph's artifact (:mod:`graphdist.partition.artifact`) plus one interaction
file per part, and ``train-rec --partition DIR`` (no SPEC needed) reads on each rank
``meta.json``, its part file and its interaction file only::

    DIR/rec_00000.pt ...   {"train": int64 [n, 2], "test": int64 [m, 2]}: the (user, item)
                           pairs of the users the part owns, sorted; hashed in meta.json
    DIR/users_00000.npy    the ratings file's ids of the part's users / items (ascending index;
    DIR/items_00000.npy    absent where the index is the id: LightGCN files, rec-synth)
    meta.json "rec"        {"users", "items", "train", "test", "valid_users", "files", "ids"}

Every file is checked against the SHA-256 that ``meta.json`` recorded, the part's graph
fingerprint against the artifact's; given a SPEC as well, the artifact must also be cut from it
(the graph fingerprints agree).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from graphdist.errors import ArtifactError

__all__ = ["partition_ratings", "load_rec_part", "check_rec_artifact", "RecPart", "is_ratings_spec", "load_rec_ids",
           "ID_FILES"]

REC_FILE = "rec_{:05d}.pt"
ID_FILES = {"users": "users_{:05d}.npy", "items": "items_{:05d}.npy"}
"""Per part, the ratings file's ids of its owned users / items (where the ids are not the index)."""


def is_ratings_spec(spec: str) -> bool:
    """Whether ``spec`` names interaction data (``ratings``, ``lightgcn``, ``rec-synth``)."""
    from graphdist.specs import KINDS
    name = spec.split(":", 1)[0].strip().lower() if isinstance(spec, str) else ""
    return name in KINDS and KINDS[name].domain == "ratings"


def _writer(ratings):
    """The ``extra`` of :func:`graphdist.partition.artifact.write_artifact`: one file per part."""
    def write(tmp: Path, a: torch.Tensor, k: int):
        from graphdist.fileio import atomic_torch_save
        U = ratings.num_users
        part_of_user = a[:U].numpy()
        train, test = ratings.train.numpy(), ratings.test.numpy()
        pt, ps = part_of_user[train[:, 0]], part_of_user[test[:, 0]] if test.size else np.zeros(0, np.int64)
        files = []
        for r in range(k):
            name = REC_FILE.format(r)
            atomic_torch_save({"train": torch.from_numpy(np.ascontiguousarray(train[pt == r])),
                               "test": torch.from_numpy(np.ascontiguousarray(test[ps == r]).reshape(-1, 2))},
                              tmp / name)
            files.append(name)
        deg = np.bincount(train[:, 0], minlength=U)
        ids, id_files = _write_ids(tmp, ratings, a, k)
        value = {"users": U, "items": ratings.num_items, "train": int(train.shape[0]), "test": int(test.shape[0]),
                 "valid_users": int(((deg > 0) & (deg < ratings.num_items)).sum()), "files": files, "ids": ids}
        return "rec", value, files + id_files
    return write


def _write_ids(tmp: Path, ratings, a: torch.Tensor, k: int) -> tuple[dict, list[str]]:
    """Per part, the ratings file's ids of its owned users and items (ascending index;
    :data:`ID_FILES`), where the ids are not the index; ``meta["rec"]["ids"]`` says which."""
    from graphdist.ids import INDEX, id_type, save_ids
    U = ratings.num_users
    part = a.numpy()
    kinds = {"users": id_type(ratings.user_ids), "items": id_type(ratings.item_ids)}
    files = []
    for what, ids, sel in (("users", ratings.user_ids, part[:U]), ("items", ratings.item_ids, part[U:])):
        if kinds[what] == INDEX:
            continue
        for r in range(k):
            name = ID_FILES[what].format(r)
            save_ids(tmp / name, np.asarray(ids)[sel == r])
            files.append(name)
    return {**kinds, "files": files}, files


def load_rec_ids(directory, rank: int, meta: dict | None = None) -> tuple:
    """``(user ids, item ids)`` of part ``rank``'s owned users and items (ascending index,
    hash-checked; None where the index is the id). An artifact written before graphdist kept
    the ratings file's ids is refused in one line with the command that rebuilds it."""
    from graphdist.partition.artifact import check_hash, rebuild_hint
    from graphdist.ids import INDEX, load_ids
    d = Path(directory)
    meta = check_rec_artifact(d) if meta is None else meta
    kinds = meta["rec"].get("ids")
    if not isinstance(kinds, dict):
        raise ArtifactError(f"{d}: the artifact does not record the ratings file's user and item ids (written by an "
                            f"older graphdist); {rebuild_hint(meta, d)}")
    out = []
    for what in ("users", "items"):
        if kinds.get(what, INDEX) == INDEX:
            out.append(None)
            continue
        name = ID_FILES[what].format(rank)
        check_hash(meta, d, name)
        out.append(load_ids(d / name))
    return tuple(out)


def partition_ratings(cfg) -> dict:
    """``graphdist partition`` for interaction specs (``cfg``: a
    :class:`graphdist.partition.tools.PartitionConfig`): load, partition the user-item graph (or read
    ``--assignment``), write the artifact with the per-part interactions. Returns what
    :func:`graphdist.partition.tools.partition_to_artifact` returns."""
    from graphdist.partition.artifact import write_artifact
    from graphdist.partition.budget import check_fits
    from graphdist.partition.assignment import check_parts, read_assignment
    from graphdist.partition.tools import check_request
    from graphdist.rec.data import load_ratings
    from partitioners import partition, quality
    check_request(cfg)
    ratings = load_ratings(cfg.spec)
    g = ratings.graph
    if cfg.assignment is not None:
        a, k = read_assignment(cfg.assignment, g.num_nodes, cfg.parts)
        method, seconds = "given", 0.0
        check_fits(g, method, k)
        params = {"k": k, "spec": cfg.spec, "assignment": str(cfg.assignment)}
    else:
        k, method = int(cfg.parts), cfg.method
        check_parts(k, g.num_nodes)
        check_fits(g, method, k)
        t0 = time.perf_counter()
        a = (torch.zeros(g.num_nodes, dtype=torch.int64) if k == 1 else
             partition(g, k, method=method, imbalance=cfg.imbalance, seed=cfg.seed, balance=cfg.balance,
                       hosts=cfg.hosts))
        seconds = time.perf_counter() - t0
        params = {"k": k, "imbalance": cfg.imbalance, "seed": cfg.seed,
                  "balance": cfg.balance or ("both" if method == "auto" else "nodes"), "spec": cfg.spec,
                  "hosts": cfg.hosts}
    q = quality(g, a, k=k)
    out = write_artifact(cfg.out, g, a, method=method, params=params, quality=q, seconds=seconds, k=k,
                         extra=_writer(ratings))
    return {"graph": g, "quality": q, "seconds": seconds, "out": out, "k": k, "method": method}


@dataclass
class RecPart:
    """One rank's interactions from an artifact and the global sizes."""

    train: np.ndarray
    test: np.ndarray
    num_users: int
    num_items: int
    num_samples: int
    num_valid: int

    def rank_data(self, lg):
        """The rank's :class:`~graphdist.rec.setup.RankData` (collective)."""
        from graphdist.rec.rank import rank_data_of_part
        return rank_data_of_part(lg, self.num_users, self.num_items, self.train, self.test,
                                 self.num_samples, self.num_valid)


def check_rec_artifact(directory) -> dict:
    """``meta.json`` of a recommender artifact (one-line ArtifactError for anything else)."""
    from graphdist.partition.artifact import read_meta
    d = Path(directory)
    meta = read_meta(d)
    rec = meta.get("rec")
    if not isinstance(rec, dict) or "files" not in rec:
        raise ArtifactError(f"{d}: not a recommender artifact (no interactions in meta.json); rebuild it with: "
                            f"graphdist partition ratings:...|lightgcn:...|rec-synth:... --parts K --out {d}")
    return meta


def load_rec_part(cfg, rank: int, world_size: int):
    """``(RecPart, LocalGraph, partition info)`` of this rank from ``cfg.partition``: reads
    ``meta.json``, ``part_<rank>.pt`` and ``rec_<rank>.pt`` only (each hash-checked), plus the
    SPEC when one is given (to check that the artifact was cut from it)."""
    from graphdist.partition.artifact import check_hash
    from graphdist.partition.setup import load_local
    d = Path(cfg.partition)
    meta = check_rec_artifact(d)
    rec = meta["rec"]
    graph = None
    if cfg.spec:
        from graphdist.rec.data import load_ratings
        graph = load_ratings(cfg.spec).graph
    lg, info = load_local(cfg, rank, world_size, graph=graph)
    name = REC_FILE.format(rank)
    t, problem = None, None
    try:
        if name not in rec["files"] or not (d / name).exists():
            raise ArtifactError(f"{d / name}: interaction file of part {rank} not found (re-run `graphdist partition`)")
        check_hash(meta, d, name)
        try:
            t = torch.load(d / name, map_location="cpu", weights_only=True, mmap=True)
        except Exception as e:  # noqa: BLE001
            raise ArtifactError(f"{d / name}: cannot read interaction file: {e}") from e
    except ArtifactError as e:
        problem = str(e)
    # every rank learns of a bad file before the first collective of training (one line, not a
    # peer's "collective failed")
    from graphdist import comm
    bad = [p for p in comm.all_gather_object(problem) if p]
    if bad:
        raise ArtifactError(bad[0])
    part = RecPart(t["train"].numpy(), t["test"].numpy(), int(rec["users"]), int(rec["items"]), int(rec["train"]),
                   int(rec["valid_users"]))
    return part, lg, info
