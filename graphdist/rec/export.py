"""``graphdist export`` of a ``train-rec`` checkpoint: LightGCN's final user and item vectors, with
the ratings file's own ids, for a vector index.

    DIR/users.parquet   user_id, embedding (list<float32>[D]): the layer mean of the propagated table
    DIR/items.parquet   item_id, embedding
    DIR/model.json      dim, layers, score = dot product, the checkpoint

The vectors are the ones ``recommend`` ranks with (:func:`graphdist.rec.recommend.load_part`,
:func:`~graphdist.rec.recommend.propagate`),
so a brute-force top-K over them, training items excluded and ties by the lowest item id, gives
its lists. They propagate over the interaction graph, so the data is needed: ``SPEC`` or
``--partition DIR``, on any number of ranks. Each rank writes its users' and items' rows into
the temporary folder; rank 0 streams them into the two files, writes ``model.json`` and swaps the
folder into place (:func:`graphdist.outputs.swap_into`).
"""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np

from graphdist.errors import ConfigError

__all__ = ["export_rec"]

FILES = ("users.parquet", "items.parquet", "model.json")


def export_rec(tr, cfg) -> dict:
    """Write ``cfg.out`` (:class:`graphdist.trained.ExportConfig`) from the recommender checkpoint
    ``tr``: here, or on ``--nproc`` local workers; returns what was written."""
    from graphdist.partition.job import workers_for
    from graphdist.launch import run_job
    from graphdist.procgroup import pick_backend
    if not cfg.spec and not cfg.partition:
        raise ConfigError(f"--checkpoint-dir {cfg.checkpoint_dir} is a recommender's: its final vectors propagate over "
                          "the interaction graph, so give its SPEC or --partition DIR")
    _, dev_type = pick_backend(cfg.device)
    return run_job(worker, dataclasses.replace(cfg, summary=False), workers_for(cfg, dev_type), cfg.nodes)


def worker(cfg) -> dict:
    from graphdist.launch import rank_main
    return rank_main(export_rank, cfg, lambda rep: "")


def export_rank(cfg) -> dict:
    """This rank's share (joins the process group); every rank returns the summary."""
    from graphdist import comm
    from graphdist.outputs import begin_dir
    from graphdist.rec.recommend import load_part, propagate
    from graphdist.rec.recommend_memory import check_export_fits
    from graphdist.procgroup import start_rank
    from graphdist.trained import open_checkpoint
    ctx = start_rank(cfg)
    tr = open_checkpoint(cfg.checkpoint_dir)
    tr.require("rec", "export")
    lp = load_part(cfg, tr, ctx, cfg.spec or cfg.partition)
    check_export_fits(tr, lp, ctx.device)
    tp = propagate(tr, lp, ctx.device)
    tmp = begin_dir(cfg.out) if ctx.rank == 0 else None
    tmp = Path(comm.all_gather_json(str(tmp) if tmp else None)[0])
    err = None
    try:
        for name, items, ids in (("users", False, tp.user_ids), ("items", True, tp.item_ids)):
            own = tp.own(items)
            rows = tp.final.index_select(0, _rows(tp, own, items)).cpu()
            _write_rows(tmp / f".{name}-{ctx.rank:05d}.parquet", name[:-1] + "_id", ids, rows)
    except OSError as e:
        err = f"--out {cfg.out}: rank {ctx.rank} could not write ({e.strerror or e})"
    errs = [e for e in comm.all_gather_json(err) if e]
    counts = comm.all_gather_json([int(tp.own(False).size), int(tp.own(True).size)])
    if errs:
        if ctx.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise ConfigError(errs[0])
    if ctx.rank == 0:
        _finish(cfg, tr, tp, tmp, comm.world()[1])
    comm.barrier()
    return {"out": str(cfg.out), "files": list(FILES), "model": "lightgcn",
            "users": sum(c[0] for c in counts), "items": sum(c[1] for c in counts)}


def _rows(tp, own: np.ndarray, items: bool):
    import torch
    glob = own + tp.rd.num_users if items else own
    return torch.from_numpy(tp.rd.local_rows(glob)).to(tp.final.device)


def _write_rows(path: Path, id_name: str, ids, rows) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from graphdist.fileio import fsync_file
    from graphdist.outputs import id_array, vectors
    pq.write_table(pa.table({id_name: id_array(ids), "embedding": vectors(rows)}), path, compression="snappy",
                   use_dictionary=[id_name])
    fsync_file(path)


def _finish(cfg, tr, tp, tmp: Path, world: int) -> None:
    """Rank 0: the ranks' files streamed into one per kind, then model.json; the folder swapped in."""
    import pyarrow.parquet as pq

    from graphdist.fileio import atomic_write_json, fsync_file
    from graphdist.outputs import swap_into
    try:
        for name in ("users", "items"):
            parts = [tmp / f".{name}-{r:05d}.parquet" for r in range(world)]
            schema = pq.read_schema(parts[0])
            with pq.ParquetWriter(tmp / f"{name}.parquet", schema, compression="snappy",
                                  use_dictionary=[schema.names[0]]) as w:
                for p in parts:
                    for b in pq.ParquetFile(p).iter_batches():
                        w.write_batch(b)
                    p.unlink()
            fsync_file(tmp / f"{name}.parquet")
        atomic_write_json(tmp / "model.json", {
            "trainer": "rec", "model": "lightgcn", "dim": int(tp.final.shape[1]),
            "layers": int(tr.settings.get("layers", 0)), "score": "dot product of user and item embedding",
            "vectors": "final: mean of the table and its propagations, layers 0..L",
            "ids": {"users": tp.kinds[0], "items": tp.kinds[1]}, "checkpoint": str(tr.snap), "step": tr.step,
            "fingerprint": tr.fingerprint})
        swap_into(tmp, cfg.out, cfg.overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
