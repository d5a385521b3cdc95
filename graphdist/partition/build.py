"""A partition artifact built by k ranks together, so that no rank holds the whole graph.

    graphdist partition edgelist:FILE[,features=X.npy,labels=Y.npy] --assignment A.npy --nproc K --out DIR

Given the same assignment, the result is byte for byte the artifact one process writes
(``graphdist partition SPEC --assignment A.npy --out DIR``, :mod:`graphdist.partition.artifact`):
``assignment.npy`` and every part file are equal, and so is ``meta.json`` but for the time it
was written. Rank ``r`` of ``k``:

1. reads its shard of the edge list: bytes ``[r S/k, (r+1) S/k)`` in whole lines
   (:func:`graphdist.data.table.shard`; a Parquet file: its row groups ``[r G/k, (r+1) G/k)``);
   error messages name the file's own line (or row) numbers;
2. learns the node ids: the distinct ids of every shard, merged (ascending original id, as the
   one-process loader numbers them; word ids as the strings written, in UTF-8 order:
   :mod:`graphdist.partition.edges`);
3. sends every edge ``u -> v`` (and ``v -> u`` unless ``directed``) to the owner of ``v``: one
   all-to-all; the owner drops repeats and sorts its rows, which are then exactly the rows of
   the one-process CSR;
4. solves the cover of the cut into its part (:func:`partitioners.cover.part_cover`, the block
   the one-process cover solves for it) and tells each peer which of that peer's rows it needs
   (``[u, raw]``) and which partial sums it wants (``[v, u]`` for every edge summed): one
   all-to-all each; the replies make each rank's send layouts;
5. writes its own part file into the artifact's temporary directory (rank 0 makes it; on
   several nodes ``--out`` must be on a file system they all mount). Rank 0 writes
   ``assignment.npy`` and ``meta.json`` and renames the directory into place.

The graph's fingerprint is hashed on rank 0 by streaming the rows from their owners in blocks of
:data:`BLOCK_EDGES` edges (:class:`graphdist.data.graph.Fingerprint`), never the whole CSR.

Memory per rank: its shard, its in-edges (about E/k plus the cut), and a few node-sized arrays
(the id table, the assignment, the global degrees): O(E/k + N); word ids make the id table N
times the widest id's bytes, and the shard's fields their bytes. Node data is read from ``.npy``
files memory-mapped, only the owned rows (rank 0 streams them for the fingerprint).
``features=degree`` works; ``random:`` node data cannot be split (one N x F random stream) and
is refused with a one-line error.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from graphdist import comm, failures
from graphdist.errors import ConfigError, DataFormatError, GraphdistError

__all__ = ["build_worker", "build_artifact", "check_build_request", "BLOCK_EDGES"]

BLOCK_EDGES = 1 << 21
"""Edges per block when rank 0 streams the rows for the fingerprint (rank 0 holds about six
int64 arrays of a block at once: 96 MiB at 2M edges; 1 << 24 cost 0.18 GiB more on rank 0 than
on the others at 20M edges, `benchmarks/build_memory.py`)."""


def check_build_request(cfg) -> None:
    """What a k-rank build needs, checked before any worker starts: an uncompressed edge list
    (text, or Parquet: its row groups are the shards) and ``--assignment``, node data from files or
    the degrees."""
    from graphdist.specs import parse_spec
    if cfg.assignment is None:
        raise ConfigError("--nproc builds the artifact from a given partition: add --assignment FILE "
                          "(e.g. from dKaMinPar, ParMETIS or `graphdist partition ... --parts K` on a smaller box)")
    spec = parse_spec(cfg.spec, "graph")
    if spec.kind.name != "edgelist":
        raise ConfigError(f"--nproc reads an edge list in shards; {cfg.spec!r} is a {spec.kind.name} spec "
                          "(use edgelist:FILE, or partition without --nproc)")
    if spec.path.suffix == ".gz":
        raise ConfigError(f"{spec.path}: a gzip file cannot be read in shards; gunzip it first")
    for key in ("features", "labels"):
        if str(spec.options[key]).startswith("random:"):
            raise ConfigError(f"{key}={spec.options[key]} draws one random stream over all nodes, which ranks "
                              f"cannot split; give {key}=FILE.npy" + (" or features=degree" if key == "features" else ""))
    f = str(spec.options["features"])
    if f and f != "degree" and not f.endswith(".npy"):
        raise ConfigError(f"features={f}: the k-worker build (--nproc) reads features from a .npy (memory-mapped, "
                          "each rank its own rows), not a table keyed by id, which every rank would read whole: "
                          "build without --nproc, or give the features as a .npy in the order of the sorted ids")


def build_worker(cfg) -> dict:
    """This rank's share of the build (the process group comes from the environment); returns,
    on every rank, the summary the CLI prints (rank 0 also leaves it for the launcher)."""
    import os

    from graphdist.launch import RESULT_ENV
    from graphdist.fileio import atomic_write_json
    from graphdist.procgroup import init_distributed, shutdown
    try:
        init_distributed("cpu")
        out = build_artifact(cfg)
    except BaseException as e:
        failures.publish_failure(e)
        raise
    finally:
        shutdown()
    if out["rank"] == 0 and os.environ.get(RESULT_ENV):
        atomic_write_json(os.environ[RESULT_ENV], out)
    return out


def _log(rank: int, msg: str) -> None:
    if rank == 0:
        from graphdist.log import get_logger
        get_logger().info(msg)


def build_artifact(cfg) -> dict:
    """This rank's share of the build in an existing process group of k ranks (k = the
    assignment's parts); returns the summary on every rank."""
    from graphdist.partition.assignment import read_assignment
    from graphdist.specs import parse_spec
    t0 = time.perf_counter()
    rank, k = comm.world()
    spec = parse_spec(cfg.spec, "graph")
    opts = spec.options
    from graphdist.partition.edges import read_edges
    src, dst, n, ids = read_edges(spec.path, rank, k)
    labels, names = _labels(opts, ids, n, spec.path)  # [N]: memory-mapped from a .npy, or from a table by id
    a, k_given = read_assignment(cfg.assignment, n, cfg.parts)
    if k_given != k:
        raise ConfigError(f"--assignment {cfg.assignment} has k={k_given} parts but {k} workers build it "
                          f"(world size must equal k)")
    _log(rank, f"build: {n:,} nodes; shards read ({time.perf_counter() - t0:.1f} s)")
    owned, indptr, cols = _own_rows(src, dst, a, rank, k, n, directed=bool(opts["directed"]),
                                    self_loops=bool(opts["self_loops"]))
    del src, dst
    own_ids = ids[owned]  # the input's ids of the owned nodes (graphdist.ids), kept in the part's id file
    if own_ids.dtype.kind == "S":  # word ids, as UTF-8 bytes (checked when read)
        own_ids = np.char.decode(own_ids, "utf-8").astype(str)
    del ids
    indeg, loops, outdeg = _degrees(owned, indptr, cols, n, need_out=opts["features"] == "degree")
    err = node = None
    try:  # a bad row of this rank's nodes (a nan feature): said alike by every rank, not by one
        node = _node_data(opts, owned, n, indeg, outdeg, spec.path, labels, own_ids)
    except GraphdistError as e:
        err = str(e)
    first = next((e for e in comm.all_gather_json(err) if e), None)
    if first is not None:
        raise GraphdistError(first)
    x, y, num_classes, masks = node
    fp = _fingerprint(n, a, owned, indptr, cols, indeg, opts, outdeg, masks, labels)
    _log(rank, f"build: rows shuffled, fingerprint {fp} ({time.perf_counter() - t0:.1f} s)")
    from graphdist.partition.rank_layout import local_part
    lg, stats = local_part(rank, k, n, a, owned, indptr, cols, indeg - loops, x, y, num_classes, fp,
                           masks=[m[owned] for m in masks] if masks else None,
                           class_names=None if names is None else names.tolist())
    del indptr, cols, x, y
    quality = _quality(a, k, n, indeg, stats)
    return _write(cfg, lg, stats, quality, a, n, fp, spec, time.perf_counter() - t0, own_ids)


def _own_rows(src, dst, a, rank: int, k: int, n: int, *, directed: bool, self_loops: bool):
    """Every edge goes to the owner of its destination; returns this rank's ``(owned ids int64,
    indptr int64, sources in global ids)``: its rows of the one-process CSR, exactly."""
    from graphdist.data.graph import csr_from_coo, np_ids
    if not self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    rows, cols = (dst, src) if directed else (np.concatenate([dst, src]), np.concatenate([src, dst]))
    del src, dst
    to = a[rows]
    order = np.argsort(to, kind="stable")
    send = torch.from_numpy(np.stack([rows[order], cols[order]], 1).astype(np.int64))
    del rows, cols, order
    got, _ = comm.all_to_all_varied(send, np.bincount(to, minlength=k).tolist())
    del send, to
    got = got.numpy()
    owned = np.flatnonzero(a == rank).astype(np.int64)
    local_row = np.searchsorted(owned, got[:, 0])
    indptr, cols = csr_from_coo(local_row, np_ids(got[:, 1], max(n, 1)), owned.size, n)
    return owned, indptr.numpy(), cols.numpy()


def _degrees(owned, indptr, cols, n: int, *, need_out: bool):
    """Global ``(in-degree, self-loops, out-degree or None)`` of every node (int64 [N] each,
    summed over ranks)."""
    deg = np.diff(indptr)
    rows = np.repeat(np.arange(owned.size), deg)
    loop_rows = rows[cols == owned[rows]]
    del rows
    vec = torch.zeros(2 if not need_out else 3, n, dtype=torch.int64)
    vec[0, owned] = torch.from_numpy(deg)
    vec[1, owned] = torch.from_numpy(np.bincount(loop_rows, minlength=owned.size))
    if need_out:
        vec[2] = torch.from_numpy(np.bincount(cols, minlength=n))
    comm.all_reduce_sum(vec)
    v = vec.numpy()
    return v[0], v[1], (v[2] if need_out else None)


def _labels(opts, ids, n: int, path):
    """``(the whole graph's labels [N], class names or None)`` (None, None without ``labels=``): a
    ``.npy`` memory-mapped (read whole where it holds class names), or a table keyed by the ids
    (:mod:`graphdist.data.node_tables`: N int64, like the id table every rank holds; features
    keyed by id, N x F on every rank, are refused before the build starts). Every rank reads the
    whole labels, so every rank numbers the classes alike."""
    from graphdist.data.files import load_npy
    from graphdist.specs import resolve_path
    if not opts["labels"]:
        return None, None
    lpath = resolve_path(opts["labels"], what="labels file")
    if lpath.suffix != ".npy":
        from graphdist.data import parquet
        from graphdist.data.node_tables import labels_by_id
        return (parquet.labels_by_id if parquet.is_parquet(lpath) else labels_by_id)(lpath, ids, path.name)
    ym, names = load_npy(lpath, mmap=True).reshape(-1), None
    if ym.shape[0] != n:
        raise DataFormatError(opts["labels"], f"has {ym.shape[0]} labels but {path.name} has {n} distinct nodes")
    if ym.dtype.kind in "USf":  # names, or numbers that must be integers: as the loader reads them
        from graphdist.data.node_tables import class_index
        ym, names = class_index(ym, opts["labels"])
    return ym, names


def _node_data(opts, owned, n: int, indeg, outdeg, path, ym, own_ids):
    """``(x [n_own, F] float32 | None, y [n_own] int64 | None, classes, the whole graph's
    train/val/test masks [N] or None)`` as the loader makes them (``ym``: :func:`_labels`)."""
    from graphdist.data.files import check_finite, degree_features, load_npy
    from graphdist.specs import resolve_path
    x = y = masks = None
    if opts["features"] == "degree":
        x = degree_features(indeg[owned], outdeg[owned])
    elif opts["features"]:
        xm = _npy_rows(resolve_path(opts["features"], what="features file"), n, path, "rows")
        x = torch.from_numpy(np.asarray(xm[owned], dtype=np.float32))
        check_finite(x.numpy(), opts["features"], own_ids, rows=owned)  # the loader's line, for this rank's rows
        if x.dim() == 1:
            x = x[:, None]
    classes = 0
    if ym is not None:
        y = torch.from_numpy(ym[owned].astype(np.int64))
        classes = int(ym.max()) + 1 if ym.size else 0
        if opts["train"] > 0:  # the loader's draw, over the whole graph's labels
            from graphdist.data.synthetic import label_splits
            masks = [m.numpy() for m in label_splits(ym, opts["train"], opts["val"], opts["seed"])]
    return x, y, classes, masks


def _npy_rows(p: Path, n: int, path: Path, what: str):
    from graphdist.data.files import load_npy
    m = load_npy(p, mmap=True)
    if m.ndim not in (1, 2) or m.shape[0] != n:
        raise DataFormatError(str(p), f"has {m.shape[0] if m.ndim else 0} {what} but {path.name} has {n} distinct nodes")
    return m


def _fingerprint(n: int, a, owned, indptr, cols, indeg, opts, outdeg, masks, ym) -> str:
    """:attr:`Graph.fingerprint` of the whole graph, hashed on rank 0 from the rows every rank
    streams to it in blocks of :data:`BLOCK_EDGES` (every rank takes part; all get the print)."""
    from graphdist.data.files import degree_features, load_npy
    from graphdist.data.graph import FINGERPRINT_FIELDS, Fingerprint
    from graphdist.specs import resolve_path
    rank, k = comm.world()
    gptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(indeg, out=gptr[1:])
    h = Fingerprint(n) if rank == 0 else None
    if h is not None:
        h.field("indptr", (n + 1,))
        h.update("indptr", gptr)
        h.field("indices", (int(gptr[-1]),))
    b0 = 0
    while b0 < n:
        b1 = int(np.searchsorted(gptr, gptr[b0] + BLOCK_EDGES, side="right")) - 1
        b1 = min(max(b1, b0 + 1), n)
        lo, hi = np.searchsorted(owned, [b0, b1])
        mine = torch.from_numpy(cols[indptr[lo]:indptr[hi]].astype(np.int64))
        got, _ = comm.all_to_all_varied(mine, [mine.numel()] + [0] * (k - 1))
        if h is not None:  # interleave the owners' rows back into row order
            rows = b0 + np.argsort(a[b0:b1], kind="stable")
            ln = indeg[rows]
            src_off = np.zeros(rows.size, dtype=np.int64)
            np.cumsum(ln[:-1], out=src_off[1:])
            pos = np.repeat(gptr[rows] - gptr[b0] - src_off, ln) + np.arange(int(ln.sum()))
            block = np.empty(int(ln.sum()), dtype=np.int64)
            block[pos] = got.numpy()
            h.update("indices", block)
        b0 = b1
    if h is not None:
        for name in FINGERPRINT_FIELDS[2:]:
            v = None
            if name == "x" and opts["features"] == "degree":
                v = degree_features(indeg, outdeg).numpy()
            elif name == "x" and opts["features"]:
                v = load_npy(resolve_path(opts["features"], what="features file"), mmap=True)
            elif name == "y" and ym is not None:
                v = ym
            elif name.endswith("_mask") and masks:
                v = masks[("train_mask", "val_mask", "test_mask").index(name)]
            shape = None if v is None else ((n, 1) if (name == "x" and v.ndim == 1) else tuple(v.shape))
            h.field(name, shape)
            if v is None:
                continue
            flat = v.reshape(n, -1) if name == "x" else v.reshape(-1)
            step = max(1, (1 << 22) // (flat.shape[1] if flat.ndim == 2 else 1))  # rows per block
            for i in range(0, n, step):
                blk = np.asarray(flat[i:i + step], dtype=np.float32 if name == "x" else
                                 bool if name.endswith("_mask") else np.int64)
                h.update(name, blk.reshape(-1))
    return comm.all_gather_json(h.hexdigest() if h is not None else None)[0]


def _quality(a, k: int, n: int, indeg, stats: list) -> dict:
    """:func:`partitioners.quality` from every part's counts, with the same values."""
    from partitioners.quality import imbalance
    e = int(indeg.sum())
    cut = sum(s["cut_edges"] for s in stats)
    vol = sum(s["halo_rows"] for s in stats)
    moved = sum(s["moved_rows"] for s in stats)
    return {
        "edge_cut": cut,
        "edge_cut_fraction": cut / e if e else 0.0,
        "comm_volume": vol,
        "max_recv": max(s["halo_rows"] for s in stats),
        "max_send": max(s["sent_rows"] for s in stats),
        "node_imbalance": imbalance(None, a, k),
        "edge_imbalance": imbalance(indeg.astype(np.float64), a, k),
        "replication_factor": (n + vol) / n if n else 1.0,
        "moved_rows": moved,
        "moved_max_recv": max(s["moved_rows"] for s in stats),
    }


def _write(cfg, lg, stats, quality, a, n: int, fp: str, spec, seconds: float, own_ids) -> dict:
    """Every rank writes its part into rank 0's temporary directory; rank 0 finishes the artifact."""
    import os
    import shutil
    import socket

    from graphdist.partition.artifact import (ASSIGNMENT, artifact_meta, begin_artifact, file_sha256,
                                         finish_artifact)
    from graphdist.partition.parts import part_path, save_part
    rank, k = comm.world()
    out = Path(cfg.out)
    tmp = begin_artifact(out) if rank == 0 else None
    tmp = Path(comm.all_gather_json(str(tmp) if tmp else None)[0])
    try:
        if not tmp.is_dir():
            raise ConfigError(f"--out {out}: rank {rank} on {socket.gethostname()} cannot see {tmp}, which rank 0 "
                              "made; a build on several nodes needs --out on a file system every node mounts")
        path = part_path(tmp, rank)
        save_part(lg, path)
        from graphdist.ids import ID_FILE, id_type, save_ids
        save_ids(tmp / ID_FILE.format(rank), own_ids)
        from graphdist.memory import peak_rss_bytes
        mine = {"bytes": path.stat().st_size, "sha256": file_sha256(path), **stats[rank],
                "ids_sha256": file_sha256(tmp / ID_FILE.format(rank)),
                "peak_rss_bytes": peak_rss_bytes()}  # the build's peak: its part is written
        every = comm.all_gather_json(mine)
        result = {"rank": rank, "out": str(out), "k": k, "nodes": n, "edges": sum(s["local_edges"] for s in every),
                  "quality": quality, "seconds": 0.0, "build_s": seconds,
                  "mem/peak_rss_bytes_per_rank": [s["peak_rss_bytes"] for s in every]}
        if rank == 0:
            np.save(tmp / ASSIGNMENT, a.astype(np.int64, copy=False))
            names = [part_path(tmp, r).name for r in range(k)]
            parts = {"parts": k, "files": names, "bytes": [s["bytes"] for s in every],
                     "owned_nodes": [s["owned_nodes"] for s in every], "halo_rows": [s["halo_rows"] for s in every],
                     "local_edges": [s["local_edges"] for s in every],
                     "halo_rows_total": int(sum(s["halo_rows"] for s in every)),
                     "moved_rows": [s["moved_rows"] for s in every]}
            params = {"k": k, "spec": cfg.spec, "assignment": str(cfg.assignment)}
            meta = artifact_meta(fingerprint=fp, graph=spec.text, num_nodes=n, num_edges=result["edges"], k=k,
                                 method="given", params=params, quality=quality, seconds=0.0, parts=parts)
            id_names = [ID_FILE.format(r) for r in range(k)]
            meta["ids"] = {"type": id_type(own_ids), "files": id_names}
            known = {nm: s["sha256"] for nm, s in zip(names, every)}
            known.update({nm: s["ids_sha256"] for nm, s in zip(id_names, every)})
            finish_artifact(tmp, out, meta, [ASSIGNMENT] + names + id_names, known=known)
        comm.barrier()
    except BaseException:
        if rank == 0 and tmp.is_dir() and os.path.basename(tmp).startswith("."):
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result
