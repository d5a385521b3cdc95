"""``graphdist recommend``: top-K items per user from a ``train-rec`` checkpoint, in the ratings
file's own ids.

    graphdist recommend (SPEC | --partition DIR) --checkpoint-dir D --top-k K --out OUT [--users FILE]

On any number of ranks: each rank loads its part, reads the table rows of the nodes it owns
from the checkpoint by node id (whatever partition or world size wrote it; embeddings only, no
Adam moments), propagates once (LightGCN's layer mean, exact 32-bit halo rows), and ranks all
items for its own users exactly as evaluation does (:class:`graphdist.rec.metrics.RingTopK`:
item shards passed around the ring, score = dot product, training items excluded, ties by the
lowest item id). Its users' rows go to its own Parquet file (:mod:`graphdist.outputs`)::

    user_id   the ratings file's user id (int64, or the string written)
    rank      int64, 1..K
    item_id   the ratings file's item id
    score     float32, the dot product of the final user and item vectors

Item ids are resolved by their owners (one request and one reply all-to-all), so no rank holds
the whole id map. ``--users FILE`` (one id per line) limits the users; ids not in the data are
refused in one line naming the first few.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np
import torch

from graphdist.errors import ArtifactError, ConfigError
from graphdist.launch import Nodes
from partitioners import METHODS

__all__ = ["RecommendConfig", "run", "worker", "recommend", "load_part", "propagate", "LoadedPart", "TrainedPart",
           "summary_line"]


@dataclass
class RecommendConfig:
    """Everything one ``graphdist recommend`` run needs (the same on every rank)."""

    halo_bits: ClassVar[int] = 32  # (the job checks read it: float32 rows)

    spec: str | None = field(default=None, metadata={"positional": True, "metavar": "SPEC"})
    """interaction data (ratings:FILE, lightgcn:DIR, rec-synth:...), partitioned in-process"""
    partition: str | None = field(default=None, metadata={"metavar": "DIR"})
    """recommender partition artifact (each rank reads only its part, interactions and ids)"""
    checkpoint_dir: str = field(default="", metadata={"required": True, "metavar": "DIR"})
    """the train-rec run's --checkpoint-dir (its latest snapshot)"""
    top_k: int = field(default=0, metadata={"required": True, "metavar": "K"})
    """items per user"""
    out: str = field(default="", metadata={"required": True, "metavar": "DIR"})
    """output folder: one part-RRRRR.parquet per rank and _manifest.json"""
    users: str | None = field(default=None, metadata={"metavar": "FILE"})
    """recommend for these users only: one user id per line, as in the ratings file, or the first
    column of a Parquet file (default: every user)"""
    exclude: str | None = field(default=None, metadata={"metavar": "FILE"})
    """leave these interactions out of the lists too, besides the training's (e.g. the ones since
    training): a rating log, text or Parquet, with the ratings file's ids (graphdist.rec.exclude)"""
    overwrite: bool = False
    """replace an existing, non-empty --out"""
    parts: int | None = None
    """number of parts K when partitioning SPEC in-process (= number of workers; default: --nproc)"""
    method: Literal[METHODS] = "auto"
    """partition method when partitioning in-process"""
    seed: int = 0
    """seed of the in-process partition"""
    nproc: int | None = None
    """start N local workers (default: the number of parts, divided by --nnodes); ignored under torchrun"""
    nodes: Nodes = field(default_factory=Nodes)
    """multi-node jobs"""
    report: str | None = field(default=None, metadata={"metavar": "FILE"})
    """write the JSON report here (rank 0): rows, times, peak memory per rank"""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto (CUDA when available), cpu or cuda"""
    timeout_s: float = field(default=300.0, metadata={"flag": "--timeout"})
    """collective timeout in seconds"""
    malloc_mmap_mb: int = 4
    """CPU: tensors above N MiB get their own mmap, so freed memory returns to the OS at once"""
    summary: bool = field(default=True, metadata={"cli": False})
    """print the one-line summary on rank 0"""

    def validate(self) -> None:
        from graphdist.config import check_choices
        check_choices(self)
        self.nodes.validate()
        if not self.spec and not self.partition:
            raise ConfigError("give the interaction data SPEC or --partition DIR")
        if not self.checkpoint_dir or not self.out:
            raise ConfigError("--checkpoint-dir and --out are required")
        if self.top_k < 1:
            raise ConfigError(f"--top-k must be >= 1, got {self.top_k}")
        from pathlib import Path
        for flag, path in (("--users", self.users), ("--exclude", self.exclude)):
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"{flag} {path}: no such file")

    def check_outputs(self) -> None:
        from graphdist.fileio import check_output_file
        from graphdist.outputs import check_out
        check_out(self.out, self.overwrite)
        if self.report:
            check_output_file(self.report, "--report")


def run(cfg: RecommendConfig) -> dict | None:
    """Check ``cfg``, its outputs and its checkpoint, then recommend here or on local workers."""
    from graphdist.partition.job import workers_for
    from graphdist.launch import run_job
    from graphdist.procgroup import pick_backend
    from graphdist.trained import open_checkpoint
    cfg.validate()
    cfg.check_outputs()
    open_checkpoint(cfg.checkpoint_dir).require("rec", "recommend")
    _, dev_type = pick_backend(cfg.device)
    return run_job(worker, cfg, workers_for(cfg, dev_type), cfg.nodes)


def worker(cfg: RecommendConfig) -> dict:
    from graphdist.launch import rank_main
    return rank_main(recommend, cfg, summary_line)


def rec_config(settings: dict, **where):
    """The training's :class:`~graphdist.rec.config.RecConfig` from its recorded settings, with the
    data source ``where`` and the exact exchange (plain float32 rows, one round)."""
    from graphdist.rec.config import RecConfig
    names = {f.name for f in dataclasses.fields(RecConfig)}
    kw = {k: v for k, v in settings.items() if k in names and k != "nodes"}
    kw.update(halo="plain", halo_bits=32, eval_halo_bits=32, halo_rounds=1, resume=False, checkpoint_dir=None,
              report=None, tensorboard=None, summary=False, progress=False)
    kw.update(where)
    return RecConfig(**kw)


@dataclass
class TrainedPart:
    """A rank's share of a trained recommender: what ``recommend`` and ``export`` use."""

    rd: object
    """The rank's :class:`~graphdist.rec.rank.RankData`."""
    final: torch.Tensor
    """``[n_own, D]`` LightGCN's final (layer-mean) vectors of the owned nodes (local row order)."""
    user_ids: np.ndarray
    """The input's ids of the owned users, ascending user index."""
    item_ids: np.ndarray
    """The input's ids of the owned items, ascending item index."""
    kinds: tuple[str, str]
    """:func:`graphdist.ids.id_type` of users and items (the same on every rank)."""

    def own(self, items: bool) -> np.ndarray:
        """Owned users (or items) by global index (item index for items), ascending."""
        return owned_of(self.rd, items)


def owned_of(rd, items: bool) -> np.ndarray:
    """The users (or items) a rank's :class:`~graphdist.rec.rank.RankData` owns, by global index
    (item index for items), ascending."""
    o = np.sort(rd.owned.numpy())
    U = rd.num_users
    return o[o >= U] - U if items else o[o < U]


@dataclass
class LoadedPart:
    """A rank's part as :func:`load_part` leaves it: what propagating needs, before the table is read."""

    rd: object
    """The rank's :class:`~graphdist.rec.rank.RankData`."""
    user_ids: np.ndarray
    item_ids: np.ndarray
    kinds: tuple[str, str]
    adj: object
    """LightGCN's normalised adjacency of the owned rows (plain layout)."""
    halo: object
    """Its exact (32-bit, one round) halo exchange."""
    layers: int
    halo_rows: int
    """Halo rows of the part."""


def load_part(cfg, tr, ctx, where: str) -> LoadedPart:
    """Load this rank's part (collective), check it is the checkpoint's graph and build its
    propagation; the part and the interaction data are let go."""
    from graphdist.ids import id_type, take
    from graphdist.rec.data import Ratings
    from graphdist.rec.model import halo_exchanger, lightgcn_adjacency
    from graphdist.rec.rank import rank_data
    from graphdist.rec.setup import load_local
    rcfg = rec_config(tr.settings, spec=cfg.spec, partition=cfg.partition, parts=cfg.parts, method=cfg.method,
                      seed=cfg.seed, device=cfg.device)
    source, lg, _ = load_local(rcfg, ctx.rank, ctx.world_size)
    tr.check_fingerprint(lg.fingerprint, where, "give the data the training had, its options included: a rating "
                         "log's test=, split=, seed= and min_rating= choose the training interactions")
    rd = rank_data(source, lg) if isinstance(source, Ratings) else source.rank_data(lg)
    owned = np.sort(rd.owned.numpy())
    U = rd.num_users
    users, items = owned[owned < U], owned[owned >= U] - U
    if isinstance(source, Ratings):
        uid, iid = take(source.user_ids, users), take(source.item_ids, items)
        kinds = (id_type(source.user_ids), id_type(source.item_ids))
    else:
        from graphdist.rec.artifact import load_rec_ids
        u, i = load_rec_ids(cfg.partition, ctx.rank)
        uid, iid = take(u, users) if u is None else u, take(i, items) if i is None else i
        if len(uid) != users.size or len(iid) != items.size:
            raise ArtifactError(f"{cfg.partition}: part {ctx.rank} holds {users.size} users and {items.size} items "
                                f"but {len(uid)} and {len(iid)} ids")
        kinds = (id_type(u), id_type(i))
    del source
    adj = lightgcn_adjacency(lg, ctx.device, "plain")
    halo = halo_exchanger(lg, ctx.device, "plain", 32, rcfg.seed)
    return LoadedPart(rd, uid, iid, kinds, adj, halo, rcfg.layers, int(lg.num_halo))


def propagate(tr, lp: LoadedPart, device) -> TrainedPart:
    """Read the checkpoint's rows of the part's nodes and propagate once (collective); the
    adjacency and the exchange are let go."""
    from graphdist.rec.model import LightGCNShard
    rows = load_table(tr, lp.rd.owned)
    with torch.no_grad():
        final = LightGCNShard(rows.to(device), lp.layers)(lp.adj, lp.halo)
    lp.adj = lp.halo = None
    return TrainedPart(lp.rd, final, lp.user_ids, lp.item_ids, lp.kinds)


def load_table(tr, owned: torch.Tensor) -> torch.Tensor:
    """The checkpoint's table rows of the global nodes ``owned`` (in that order), read by node id
    from the shards of whatever ranks wrote it, one old shard at a time (no Adam moments)."""
    lay = tr.layout()
    old = int(tr.meta.get("world_size", 1))
    if any(f"ids.rank{j}" not in lay for j in range(old)):
        raise ArtifactError(f"--checkpoint-dir {tr.root}: its table rows were saved without their node ids (written "
                            "before resharding existed); recommend needs them")
    dim = lay["embedding.rank0"][1]
    ids = owned.to(torch.int64).numpy()
    order = np.argsort(ids, kind="stable")
    srt = ids[order]
    out = torch.empty(ids.size, dim)
    filled = np.zeros(ids.size, dtype=bool)
    for j in range(old):
        n_j = lay[f"ids.rank{j}"][0]
        part = {f"ids.rank{j}": torch.empty(n_j, dtype=torch.int64), f"embedding.rank{j}": torch.empty(n_j, dim)}
        tr.load(part)
        got = part[f"ids.rank{j}"].numpy()
        at = np.minimum(np.searchsorted(srt, got), max(ids.size - 1, 0))
        hit = srt[at] == got if ids.size else np.zeros(got.size, dtype=bool)
        out[torch.from_numpy(order[at[hit]])] = part[f"embedding.rank{j}"][torch.from_numpy(np.flatnonzero(hit))]
        filled[order[at[hit]]] = True
    if not filled.all():
        raise ArtifactError(f"--checkpoint-dir {tr.root} has no rows for {int((~filled).sum())} of this rank's nodes: "
                            "not a checkpoint of this graph")
    return out


def recommend(cfg: RecommendConfig) -> dict:
    """This rank's recommendations (joins the process group); every rank returns the report."""
    from graphdist import comm
    from graphdist.memory import peak_memory_bytes
    from graphdist.rec.metrics import RingTopK
    from graphdist.rec.exclude import read_exclusions
    from graphdist.rec.recommend_memory import check_recommend_fits
    from graphdist.procgroup import start_rank
    from graphdist.timer import Timer
    from graphdist.trained import open_checkpoint
    ctx = start_rank(cfg)
    tr = open_checkpoint(cfg.checkpoint_dir)
    tr.require("rec", "recommend")
    with Timer() as t_load:
        lp = load_part(cfg, tr, ctx, cfg.spec or cfg.partition)
        users, uid = owned_of(lp.rd, items=False), lp.user_ids
        if cfg.users:
            keep = requested_users(cfg.users, uid, lp.kinds[0])
            users, uid = users[keep], uid[keep]
        ex = read_exclusions(cfg.exclude, uid)
        fits = check_recommend_fits(tr, lp, users, cfg.top_k + ex.most, ctx.device)
        tp = propagate(tr, lp, ctx.device)
    with Timer(ctx.device) as t_rank:
        ring = RingTopK(tp.rd, users, cfg.top_k + ex.most, ctx.device)
        scores, items = ring.top_of(tp.final)
    scores, items = scores.cpu().numpy(), items.cpu().numpy()
    valid = np.isfinite(scores)
    item_ids = resolve_items(items[valid], tp)
    valid, item_ids = ex.drop(valid, item_ids, cfg.top_k)
    with Timer() as t_write:
        man = _write(cfg, tr, tp, uid, scores, valid, item_ids)
    peaks = comm.all_gather_json(peak_memory_bytes(ctx.device))
    return {"out": cfg.out, "rows": man["rows"], "users": int(sum(comm.all_gather_json(int(users.size)))),
            "top_k": cfg.top_k, "checkpoint": str(tr.snap), "time/load_s": t_load.seconds,
            "time/rank_s": t_rank.seconds, "time/write_s": t_write.seconds,
            "eval/item_rows_peak": ring.stats.get("peak_item_rows"), "mem/peak_bytes": int(max(peaks)),
            "mem/peak_bytes_per_rank": peaks, "mem/estimate_bytes_per_rank": fits["need_bytes_per_rank"],
            "exclude/pairs": ex.pairs, "exclude/unmatched_pairs": ex.unmatched,
            "world_size": ctx.world_size, "device": str(ctx.device)}


def requested_users(path: str, own_ids: np.ndarray, kind: str) -> np.ndarray:
    """Which of this rank's users (ids ``own_ids``) the ``--users`` file names; ids no rank has are
    refused in one line naming the first few (collective: one all-reduce of a flag per id)."""
    from graphdist import comm
    from graphdist.ids import as_requested
    from graphdist.data import parquet
    if parquet.is_parquet(path):  # its first column
        toks = [str(v) for v in parquet.first_column(path)]
    else:
        with open(path, encoding="utf-8") as f:
            toks = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    req, ok = as_requested(toks, kind)
    found = np.isin(req, own_ids) & ok
    hit = torch.from_numpy(found.astype(np.int64))
    comm.all_reduce_max(hit)
    missing = [t for t, h in zip(toks, hit.numpy()) if not h]
    if missing:
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise ConfigError(f"--users {path}: {len(missing)} of its {len(toks)} ids are not users of the data: "
                          f"{', '.join(missing[:5])}{more}")
    return np.isin(own_ids, req[ok])


def resolve_items(items: np.ndarray, tp: TrainedPart) -> np.ndarray:
    """The input's ids of item indices ``items``, asked of their owners (collective: the index
    is the id without a word)."""
    from graphdist import comm
    from graphdist.ids import INDEX, decode, encode, width
    kind = tp.kinds[1]
    if kind == INDEX:
        return items.astype(np.int64)
    uniq, inv = np.unique(items, return_inverse=True)
    owner = tp.rd.item_owner[uniq].astype(np.int64)
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=comm.world()[1])
    asked, got = comm.all_to_all_varied(torch.from_numpy(uniq[order].astype(np.int64)), counts.tolist())
    mine = tp.own(items=True)
    pos = np.searchsorted(mine, asked.numpy())
    w = int(comm.all_reduce_max(torch.tensor([width(tp.item_ids)])).item())
    back, _ = comm.all_to_all_varied(encode(tp.item_ids[pos], w), got)
    ids = decode(back, kind)
    out = np.empty(uniq.size, dtype=ids.dtype)
    out[order] = ids
    return out[inv.reshape(-1)]


def _write(cfg, tr, tp, uid, scores, valid, item_ids) -> dict:
    """This rank's rows (user by user, rank 1..K) into the output folder; returns the manifest."""
    import pyarrow as pa

    from graphdist.outputs import PartsWriter, id_array
    per = valid.sum(1)
    rank = (np.cumsum(valid, 1) - 1)[valid] + 1
    string = lambda k: pa.string() if k == "string" else pa.int64()  # noqa: E731
    schema = pa.schema([("user_id", string(tp.kinds[0])), ("rank", pa.int64()), ("item_id", string(tp.kinds[1])),
                        ("score", pa.float32())])
    table = pa.table([id_array(np.repeat(uid, per)), pa.array(rank.astype(np.int64)), id_array(item_ids),
                      pa.array(scores[valid].astype(np.float32))], schema=schema)
    model = {"model": "lightgcn", "dim": int(tp.final.shape[1]), "layers": int(tr.settings.get("layers", 0)),
             "top_k": cfg.top_k}
    with PartsWriter(cfg.out, cfg.overwrite) as w:
        w.write(table)
        return w.close({"command": "recommend", **tr.describe(), "model": model})


def summary_line(rep: dict) -> str:
    short = rep["rows"] < rep["top_k"] * rep["users"]  # a user with fewer than K items left to recommend
    rows = f"{rep['rows']:,} rows" + (f", fewer than {rep['top_k']} for users with fewer unseen items" if short else "")
    return (f"recommend: top {rep['top_k']} for {rep['users']:,} users -> {rep['out']} ({rows}); "
            f"ranking {rep['time/rank_s']:.2f} s, peak mem {rep['mem/peak_bytes'] / 2**20:.0f} MiB/rank, "
            f"world size {rep['world_size']}")
