"""LightGCN training on k ranks: the embedding table row-sharded along the graph partition.

Per epoch on every rank::

    sample    the BPR triples of the users this rank owns (functions of seed, epoch and the
              global sample index: k ranks draw what one process draws)
    plan      which item rows each batch needs from which peer: one all-to-all of ids per epoch
    per batch propagate L layers (halo exchange per layer, forward and backward), the remote
              item rows by one all-to-all (gradients return the same way), BPR + L2, Adam on
              the own rows
    end       one all-reduce: per-batch losses, traffic, and any rank's stop request

Evaluation (every ``eval_every`` epochs and after the last one): full ranking of all items for
each rank's own users (:class:`graphdist.rec.metrics.RankingEval`). Checkpoints: each rank's rows
and Adam state under its own keys (:class:`graphdist.checkpoint.Checkpointer`), the history in
the snapshot's meta; ``resume`` continues to the same result (sampling needs no RNG state).
SIGINT / SIGTERM stop at the end of an epoch on every rank (SIGTERM writes a checkpoint first).
"""
from __future__ import annotations

import hashlib
import signal
import statistics
from dataclasses import asdict

import torch

from graphdist import comm
from graphdist.checkpoint import Checkpointer, interrupted
from graphdist.errors import USER_ERRORS, ArtifactError, ConfigError, MissingFileError
from graphdist.rec.config import RecConfig
from graphdist.rec.metrics import RankingEval
from graphdist.rec.model import LightGCNShard, bpr_step, halo_exchanger, init_embeddings, lightgcn_adjacency, plan_epoch
from graphdist.rec.sampling import sample_epoch
from graphdist.halo.exchange import CommStats
from graphdist.halo.setup import check_plan
from graphdist.rec.setup import load_local, rank_data
from graphdist.runtime import (GracefulStop, Timer, env_world, get_logger, init_distributed, peak_memory_bytes,
                               set_mmap_threshold)

__all__ = ["train", "fit"]


def train(cfg: RecConfig) -> dict:
    """Run training on this rank (the process group is created if needed); returns the report."""
    cfg.validate()
    if env_world()[0] == 0:  # under torchrun nobody checked before the workers started
        cfg.check_outputs()
    if cfg.malloc_mmap_mb > 0 and cfg.device != "cuda":
        set_mmap_threshold(cfg.malloc_mmap_mb)
    ctx = init_distributed(cfg.device, cfg.timeout_s)
    ratings, lg, pinfo = load_local(cfg, ctx.rank, ctx.world_size)
    return fit(cfg, ratings, lg, pinfo, ctx)


def fit(cfg: RecConfig, ratings, lg, pinfo: dict, ctx, callbacks=()) -> dict:
    """Train on this rank's part; every rank returns the report.

    ``callbacks``: functions ``cb(epoch, history) -> bool`` called on every rank after each epoch;
    returning True stops training there (checkpointed when ``checkpoint_dir`` is set)."""
    rank, ws, dev = ctx.rank, ctx.world_size, ctx.device
    log = get_logger()
    if cfg.halo_bits < 32 and ws == 1:
        raise ConfigError(f"--halo-bits {cfg.halo_bits} quantises the halo exchange, but a 1-part job has "
                          "none; use --halo-bits 32 or train on k >= 2 parts")
    check_plan(lg, cfg.halo)
    rd = rank_data(ratings, lg)
    U, N = ratings.num_users, ratings.num_nodes
    model = LightGCNShard(init_embeddings(rd.owned, N, cfg.dim, cfg.init_std, cfg.seed), cfg.layers).to(dev)
    adj = lightgcn_adjacency(lg, dev, cfg.halo)
    halo = halo_exchanger(lg, dev, cfg.halo, cfg.halo_bits, cfg.seed)
    opt = torch.optim.Adam([model.weight], lr=cfg.lr)
    evaluator = RankingEval(ratings, rd, cfg.topk, dev)
    popular = evaluator.popularity()
    part_id = _partition_id(rd.owned)
    hist = {"losses": [], "epoch_s": [], "halo_bytes": [], "item_bytes": [], "eval": []}
    start = 0
    ckpt = Checkpointer(cfg.checkpoint_dir, cfg.keep_checkpoints) if cfg.checkpoint_dir else None
    if cfg.resume:
        start, hist = _load(ckpt, cfg, ws, rank, lg.fingerprint, part_id, model, opt)
        log.info(f"resumed from epoch {start} in {cfg.checkpoint_dir}")

    from tqdm import tqdm
    bar = tqdm(total=cfg.epochs, initial=start, desc="train-rec", unit="epoch",
               disable=not (ctx.is_rank0 and cfg.progress), dynamic_ncols=True)
    rows = CommStats()
    epoch, saved = start, start
    try:
        with GracefulStop() as signalled:
            for epoch in range(start + 1, cfg.epochs + 1):
                halo.stats.reset()
                halo.set_step(epoch)  # quantisation noise keyed by (seed, epoch, rank, n-th exchange)
                rows.reset()
                with Timer(dev) as t:
                    samples = sample_epoch(rd.index, cfg.seed, epoch, cfg.batch_size)
                    plans = plan_epoch(samples, rd, U, rank, ws, dev, stats=rows)
                    nb = len(plans)
                    m = torch.zeros(nb + 3, dtype=torch.float64, device=dev)  # losses, traffic, stop
                    for b, p in enumerate(plans):
                        m[b] = bpr_step(model, adj, halo, p, cfg.l2, opt, rows)
                sig = {None: 0.0, signal.SIGINT: 1.0}.get(signalled.signum, 1000.0)
                m[nb:] = torch.tensor([halo.stats.bytes, rows.bytes, sig], dtype=torch.float64)
                comm.all_reduce_sum(m)
                hist["losses"].append(float(m[:nb].mean()) if nb else float("nan"))
                hist["epoch_s"].append(t.seconds)
                hist["halo_bytes"].append(int(m[nb]))
                hist["item_bytes"].append(int(m[nb + 1]))
                post = {"loss": f"{hist['losses'][-1]:.4f}"}
                if cfg.eval_every and epoch % cfg.eval_every == 0 and epoch != cfg.epochs:
                    r = _evaluate(model, adj, halo, evaluator)
                    hist["eval"].append([epoch, r["recall"], r["ndcg"]])
                    post[f"recall@{cfg.topk}"] = f"{r['recall']:.4f}"
                bar.update(1)
                bar.set_postfix(post)
                stop = any([bool(cb(epoch, hist)) for cb in callbacks])
                term = float(m[nb + 2]) >= 1000.0  # some rank got SIGTERM: checkpoint before stopping
                last = epoch == cfg.epochs or stop or term
                if ckpt is not None and (epoch % cfg.checkpoint_every == 0 or last):
                    _save(ckpt, cfg, rank, lg.fingerprint, part_id, epoch, model, opt, hist)
                    saved = epoch
                if float(m[nb + 2]) > 0:
                    bar.close()
                    raise interrupted(signal.SIGTERM if term else signal.SIGINT, f"epoch {epoch} of {cfg.epochs}",
                                      ckpt, saved, cfg.checkpoint_dir)
                if stop:
                    break
            with Timer(dev) as te:
                final = _evaluate(model, adj, halo, evaluator)
    except USER_ERRORS:
        raise
    except Exception as e:  # noqa: BLE001 - a failed collective names the peer; anything else is itself
        bar.close()
        if comm.is_collective_failure(e):
            comm.raise_peer_failure(e, f"epoch {epoch}")
        raise
    bar.close()
    if not hist["eval"] or hist["eval"][-1][0] != epoch:
        hist["eval"].append([epoch, final["recall"], final["ndcg"]])
    peaks = comm.all_gather_object(peak_memory_bytes(dev))
    K = cfg.topk
    mean = lambda xs: int(sum(xs) / len(xs)) if xs else 0  # noqa: E731
    return {
        f"recall@{K}": final["recall"],
        f"ndcg@{K}": final["ndcg"],
        "losses": hist["losses"],
        "time/epoch_s": statistics.median(hist["epoch_s"]) if hist["epoch_s"] else None,
        "time/eval_s": te.seconds,
        "comm/halo_bytes_per_epoch": mean(hist["halo_bytes"]),
        "comm/item_bytes_per_epoch": mean(hist["item_bytes"]),
        "comm/halo": cfg.halo if ws > 1 else "none",
        "comm/halo_bits": cfg.halo_bits,
        "mem/peak_bytes": max(peaks),
        "mem/peak_bytes_per_rank": peaks,
        "world_size": ws,
        "partition": pinfo,
        f"popularity/recall@{K}": popular["recall"],
        f"popularity/ndcg@{K}": popular["ndcg"],
        "eval": [{"epoch": e, f"recall@{K}": r, f"ndcg@{K}": n} for e, r, n in hist["eval"]],
        "eval_users": final["users"],
        "epochs_run": len(hist["losses"]),
        "data": {k: v for k, v in ratings.summary().items() if k in ("users", "items", "train", "test")},
        "device": str(dev),
        "config": asdict(cfg),
    }


@torch.no_grad()
def _evaluate(model, adj, halo, evaluator) -> dict:
    saved = halo.stats.bytes, halo.stats.rows  # evaluation traffic is not training traffic
    out = evaluator(model(adj, halo))
    halo.stats.bytes, halo.stats.rows = saved
    return out


def _partition_id(owned: torch.Tensor) -> str:
    """Which rows each rank owns, as one hash (a checkpoint only fits the same partition)."""
    mine = hashlib.blake2b(owned.cpu().numpy().tobytes(), digest_size=8).hexdigest()
    return hashlib.blake2b("/".join(comm.all_gather_object(mine)).encode(), digest_size=8).hexdigest()


_RUN_KEYS = ("dim", "layers", "batch_size", "l2", "init_std", "seed")
"""Config fields a checkpoint must agree with to be resumed."""


def _state(model, opt, rank: int) -> dict:
    """This rank's rows and their Adam moments under rank-specific keys (sharded, each stored
    by its owner); Adam's step count is the same everywhere (stored once)."""
    st = opt.state[model.weight]
    if not st:  # before the first step: Adam's initial state
        st.update(step=torch.tensor(0.0), exp_avg=torch.zeros_like(model.weight),
                  exp_avg_sq=torch.zeros_like(model.weight))
    return {f"embedding.rank{rank}": model.weight.detach(), f"adam_exp_avg.rank{rank}": st["exp_avg"],
            f"adam_exp_avg_sq.rank{rank}": st["exp_avg_sq"], "adam_step": st["step"]}


def _save(ckpt, cfg, rank, fingerprint, part_id, epoch, model, opt, hist) -> None:
    meta = {"epoch": epoch, "fingerprint": fingerprint, "partition_id": part_id, "hist": hist,
            **{k: getattr(cfg, k) for k in _RUN_KEYS}}
    ckpt.save(epoch, _state(model, opt, rank), meta)


def _load(ckpt, cfg, ws, rank, fingerprint, part_id, model, opt) -> tuple[int, dict]:
    """Restore rows and Adam state; returns ``(epochs done, history)``."""
    snap = ckpt.latest()
    if snap is None:
        raise MissingFileError(f"--resume: no checkpoint in {cfg.checkpoint_dir} (no 'latest' file)")
    meta = ckpt.read_meta(snap)
    if meta.get("world_size") != ws:
        raise ArtifactError(f"checkpoint {snap} was written by {meta.get('world_size')} ranks, this run has {ws}")
    if meta.get("fingerprint") != fingerprint:
        raise ArtifactError(f"checkpoint {snap} is for graph fingerprint {meta.get('fingerprint')}, "
                            f"this run's graph has {fingerprint}")
    if meta.get("partition_id") != part_id:
        raise ArtifactError(f"checkpoint {snap} was written with another partition of the graph (partition id "
                            f"{meta.get('partition_id')}, this run has {part_id}); resume with the same parts")
    for k in _RUN_KEYS:
        if meta.get(k) != getattr(cfg, k):
            raise ArtifactError(f"checkpoint {snap} has {k}={meta.get(k)!r} but this run has {getattr(cfg, k)!r}")
    ckpt.load(snap, _state(model, opt, rank))
    return int(meta["epoch"]), meta["hist"]
