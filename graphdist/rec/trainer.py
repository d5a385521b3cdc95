"""LightGCN training on k ranks: the embedding table row-sharded along the graph partition.

Per epoch on every rank::

    sample    the BPR triples of the users this rank owns (functions of seed, epoch and the
              global sample index: k ranks draw what one process draws)
    schedule  which item rows each batch needs from which peer: one all-to-all of ids per epoch
    per batch propagate L layers (halo exchange per layer, forward and backward), the remote
              item rows by one all-to-all (gradients return the same way), BPR + L2, Adam on
              the own rows
    end       one all-reduce: per-batch losses and traffic

Evaluation (every ``eval_every`` epochs and after the last one, 32-bit halo rows unless
``--eval-halo-bits``): full ranking of all items for each rank's own users
(:class:`graphdist.rec.metrics.RankingEval`). The epochs run in the one training loop
(:func:`graphdist.loop.run_loop`): checkpoints hold each rank's rows and Adam state under its own
keys and the history; ``resume`` continues to the same result (sampling needs no RNG state).
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import asdict

import torch

from graphdist import comm
from graphdist.adam import Adam
from graphdist.checkpoint import partition_id, resuming, with_recorded
from graphdist.exchange.exchanger import CommStats
from graphdist.partition.job import check_halo_bits
from graphdist.partition.regroup import parts_for_world
from graphdist.exchange.rounds import in_rounds
from graphdist.partition.setup import check_layout
from graphdist.loop import LoopConfig, Task, run_loop
from graphdist.rec.config import RecConfig
from graphdist.rec.data import Ratings
from graphdist.rec.memory import check_rank_fits, exchange_rounds
from graphdist.rec.metrics import RankingEval
from graphdist.rec.model import (LightGCNShard, bpr_step, halo_exchanger, init_embeddings, lightgcn_adjacency,
                                 schedule_epoch)
from graphdist.rec.sampling import sample_epoch
from graphdist.rec.rank import rank_data
from graphdist.rec.setup import load_local
from graphdist.log import get_logger
from graphdist.memory import peak_memory_bytes
from graphdist.procgroup import start_rank
from graphdist.timer import Timer

__all__ = ["train", "fit"]


def train(cfg: RecConfig) -> dict:
    """Run training on this rank (the process group is created if needed); returns the report."""
    ctx = start_rank(cfg)
    cfg, regrouped = parts_for_world(cfg, ctx.world_size)  # --nnodes MIN:MAX on fewer nodes
    if regrouped and ctx.rank == 0:
        get_logger().warning(regrouped)
    ratings, lg, pinfo = load_local(cfg, ctx.rank, ctx.world_size)
    pinfo = {**pinfo, "regrouped": regrouped} if regrouped else pinfo
    boxes = [ratings], [lg]
    del ratings, lg
    return fit(cfg, *boxes, pinfo, ctx)  # fit takes both out of their boxes: it holds the only references


def fit(cfg: RecConfig, ratings, lg, pinfo: dict, ctx, callbacks=()) -> dict:
    """Train on this rank's part; every rank returns the report.

    ``callbacks``: functions ``cb(epoch, history) -> bool`` called on every rank after each epoch;
    returning True stops training there (checkpointed when ``checkpoint_dir`` is set).
    ``ratings`` and ``lg`` may each come in a one-element list, which fit empties: then nothing
    else holds them, and the interaction part and the part's graph are freed once the sampling
    index, the adjacency and the exchange are built from them (they are not needed to train)."""
    ratings = ratings.pop() if isinstance(ratings, list) else ratings
    lg = lg.pop() if isinstance(lg, list) else lg
    check_halo_bits(cfg, ctx.world_size)
    check_layout(lg, cfg.halo)
    rd = rank_data(ratings, lg) if isinstance(ratings, Ratings) else ratings.rank_data(lg)
    del ratings
    cfg, run = _build(cfg, lg, rd, ctx.device)
    evaluator = RankingEval(rd, cfg.topk, ctx.device, eval_users=cfg.eval_users, seed=cfg.seed)
    need = check_rank_fits(lg, rd, cfg, int(evaluator.users.numel()))  # before any step: one line if not
    _say_if_untested(rd, cfg.topk, ctx.rank)
    fingerprint = lg.fingerprint
    del lg  # the adjacency and the exchange hold what training needs of the part
    nb = rd.index.num_batches(cfg.batch_size)
    epochs = cfg.epochs if cfg.steps is None else min(cfg.epochs, -(-cfg.steps // nb))
    task = _RecTask(cfg, run.model, run.opt, run.adj, run.halo, run.halo_eval, rd, rd.num_users, ctx.rank,
                    ctx.world_size, ctx.device, evaluator, nb)
    lc = LoopConfig(total=epochs, unit="epoch", desc="train-rec", checkpoint_dir=cfg.checkpoint_dir,
                    checkpoint_every=cfg.checkpoint_every, keep_checkpoints=cfg.keep_checkpoints,
                    resume=resuming(cfg), tensorboard=cfg.tensorboard, progress=cfg.progress and ctx.is_rank0,
                    settings=cfg, identity={"fingerprint": fingerprint},
                    recorded={"partition_id": partition_id(rd.owned)}, reshard=True)
    task.total = epochs
    res = run_loop(task, lc, callbacks)
    with Timer(ctx.device) as te:
        final = _evaluate(run.model, run.adj, run.halo_eval, evaluator)
    if not task.history["eval"] or task.history["eval"][-1][0] != res.done:
        task.history["eval"].append([res.done, final["recall"], final["ndcg"]])
    return _report(cfg, task.history, res, final, te.seconds, run, rd, evaluator, nb, need, pinfo, ctx)


@dataclasses.dataclass
class _Run:
    """What a rank trains with: its rows of the table, the adjacency and the exchangers."""

    model: LightGCNShard
    opt: Adam
    adj: object
    halo: object
    halo_eval: object


def _build(cfg, lg, rd, dev):
    """``(cfg with the rounds resolved, the run)``: the own rows of the table (keyed initial
    values), the adjacency, the exchanger (and evaluation's, 32-bit unless ``--eval-halo-bits``),
    in the rounds that fit (a resumed run keeps the checkpointed choice)."""
    model = LightGCNShard(init_embeddings(rd.owned, cfg.dim, cfg.init_std, cfg.seed), cfg.layers).to(dev)
    adj = lightgcn_adjacency(lg, dev, cfg.halo)
    halo = halo_exchanger(lg, dev, cfg.halo, cfg.halo_bits, cfg.seed)
    halo_eval = halo if cfg.eval_halo_bits == cfg.halo_bits else halo_exchanger(
        lg, dev, cfg.halo, cfg.eval_halo_bits, cfg.seed + 1)
    cfg = with_recorded(cfg, "halo_rounds")  # resumed: the rounds the checkpointed run chose
    rounds = exchange_rounds(cfg, halo.n_send, halo.n_recv) if halo.active else 1
    cfg = dataclasses.replace(cfg, halo_rounds=rounds)  # checkpoints record what was chosen
    if rounds > 1:  # the exchange's buffers in slices
        get_logger().info(f"halo exchange in {rounds} rounds (--halo-rounds)")
        in_rounds(rounds, adj, halo, halo_eval)
    opt = Adam([model.weight], lr=cfg.lr)  # torch.optim.Adam's arithmetic, without torch.optim's imports
    return cfg, _Run(model, opt, adj, halo, halo_eval)


def _report(cfg, hist, res, final, eval_s, run, rd, evaluator, nb, need, pinfo, ctx) -> dict:
    """The report every rank returns (rank 0's is written)."""
    peaks = comm.all_gather_json(peak_memory_bytes(ctx.device))
    popular = evaluator.popularity()
    steps = hist.get("steps") or [nb] * len(hist["losses"])
    K = cfg.topk
    mean = lambda xs: int(sum(xs) / len(xs)) if xs else 0  # noqa: E731
    per_step = lambda xs: sum(xs) / max(sum(steps[len(steps) - len(xs):]), 1)  # noqa: E731
    return {
        f"recall@{K}": final["recall"],
        f"ndcg@{K}": final["ndcg"],
        "losses": hist["losses"],
        "time/epoch_s": statistics.median(hist["epoch_s"]) if hist["epoch_s"] else None,
        "time/step_s": statistics.median([t / n for t, n in zip(hist["epoch_s"], steps) if n]) if any(steps) else None,
        "steps": sum(steps),
        "steps_cap": cfg.steps,
        "time/eval_s": eval_s,
        "comm/halo_bytes_per_epoch": mean(hist["halo_bytes"]),
        "comm/item_bytes_per_epoch": mean(hist["item_bytes"]),
        "comm/halo_bytes_per_step": per_step(hist["halo_bytes"]),
        "comm/item_bytes_per_step": per_step(hist["item_bytes"]),
        "comm/halo": cfg.halo if ctx.world_size > 1 else "none",
        "comm/halo_bits": cfg.halo_bits,
        "comm/halo_rounds": run.halo.rounds,
        "comm/eval_halo_bits": cfg.eval_halo_bits,
        "mem/peak_bytes": max(peaks),
        "mem/peak_bytes_per_rank": peaks,
        "mem/estimate_bytes_per_rank": comm.all_gather_json(need),
        "world_size": ctx.world_size,
        "partition": pinfo,
        f"popularity/recall@{K}": popular["recall"],
        f"popularity/ndcg@{K}": popular["ndcg"],
        "eval": [{"epoch": e, f"recall@{K}": r, f"ndcg@{K}": n} for e, r, n in hist["eval"]],
        "eval_users": final["users"],
        "eval_users_sampled": cfg.eval_users is not None,
        "eval/item_rows_peak": evaluator.stats.get("peak_item_rows"),
        "epochs_run": len(hist["losses"]),
        "run/resharded_from": res.resharded_from,
        "data": {"users": rd.num_users, "items": int(rd.item_owner.size), "train": rd.index.num_samples,
                 "test": sum(comm.all_gather_json(int(rd.test.shape[0])))},
        "device": str(ctx.device),
        "config": asdict(cfg),
    }


class _RecTask(Task):
    """One epoch: the own users' triples, their batch schedules (one all-to-all of ids), a BPR step
    per batch, then one all-reduce of the batch losses and the traffic; evaluation every
    ``eval_every`` epochs."""

    def __init__(self, cfg, model, opt, adj, halo, halo_eval, rd, num_users, rank, ws, dev, evaluator, nb):
        self.cfg, self.model, self.opt, self.adj, self.halo, self.halo_eval = cfg, model, opt, adj, halo, halo_eval
        self.rd, self.U, self.rank, self.ws, self.dev, self.evaluator = rd, num_users, rank, ws, dev, evaluator
        self.nb = nb
        self.history = {"losses": [], "epoch_s": [], "steps": [], "halo_bytes": [], "item_bytes": [], "eval": []}
        self.rows = CommStats()

    def run(self, units):
        cfg, hist, halo, rows = self.cfg, self.history, self.halo, self.rows
        for epoch in units:
            halo.stats.reset()
            halo.set_step(epoch)  # quantisation noise keyed by (seed, epoch, rank, n-th exchange)
            rows.reset()
            with Timer(self.dev) as t:
                cap = None if cfg.steps is None else cfg.steps - (epoch - 1) * self.nb
                samples = sample_epoch(self.rd.index, cfg.seed, epoch, cfg.batch_size, max_batches=cap)
                schedule = schedule_epoch(samples, self.rd, self.U, self.rank, self.ws, self.dev, stats=rows)
                nb = len(schedule)
                m = torch.zeros(nb + 2, dtype=torch.float64, device=self.dev)  # losses, traffic
                for b, p in enumerate(schedule):
                    m[b] = bpr_step(self.model, self.adj, halo, p, cfg.l2, self.opt, rows)
            m[nb:] = torch.tensor([halo.stats.bytes, rows.bytes], dtype=torch.float64)
            comm.all_reduce_sum(m)
            hist["losses"].append(float(m[:nb].mean()) if nb else float("nan"))
            hist["epoch_s"].append(t.seconds)
            hist["steps"].append(nb)
            hist["halo_bytes"].append(int(m[nb]))
            hist["item_bytes"].append(int(m[nb + 1]))
            post = {"loss": f"{hist['losses'][-1]:.4f}"}
            if cfg.eval_every and epoch % cfg.eval_every == 0 and epoch != self.total:
                r = _evaluate(self.model, self.adj, self.halo_eval, self.evaluator)
                hist["eval"].append([epoch, r["recall"], r["ndcg"]])
                post[f"recall@{cfg.topk}"] = f"{r['recall']:.4f}"
            yield post

    def state(self) -> dict:
        """This rank's rows, their global node ids and their Adam moments under rank-specific
        keys (sharded, each stored by its owner); Adam's step count is the same everywhere
        (stored once)."""
        w = self.model.weight
        st = self.opt.state_of(w)  # Adam's initial state before the first step
        r = self.rank
        return {f"ids.rank{r}": self.rd.owned.to(torch.int64), f"embedding.rank{r}": w.detach(),
                f"adam_exp_avg.rank{r}": st["exp_avg"], f"adam_exp_avg_sq.rank{r}": st["exp_avg_sq"],
                "adam_step": st["step"]}

    optional = ("ids.rank",)  # checkpoints written before resharding: the same partition still resumes

    def load_resharded(self, ckpt, snap, was: dict, now: dict) -> None:
        """The rows (and Adam moments) of this rank's nodes, from the shards of another partition
        (:func:`graphdist.rec.reshard.load_rows`)."""
        from graphdist.rec.reshard import load_rows
        load_rows(ckpt, snap, was, now, self.state(), self.rd.owned)

    def resharded(self, was: dict) -> None:
        for k in ("halo_bytes", "item_bytes"):  # the old partition's traffic
            self.history[k] = []


def _say_if_untested(rd, k: int, rank: int) -> None:
    """One line (rank 0) before training when no rank holds a test interaction: recall and ndcg
    cannot be measured then (nan in the report). A small log meets it first: each user's test
    share is ``round(test x its interactions)``, none for a user with 2 at the default 0.2."""
    if sum(comm.all_gather_json(int(rd.test.shape[0]))) == 0 and rank == 0:
        get_logger().warning(f"warning: the data has no test interactions, so recall@{k} and ndcg@{k} are not "
                             "measured (nan in the report): a user's test share is round(test x its "
                             "interactions), none below 3 at the default test=0.2; give the spec a larger "
                             "test= (or split=FILE naming test interactions)")


@torch.no_grad()
def _evaluate(model, adj, halo, evaluator) -> dict:
    saved = halo.stats.bytes, halo.stats.rows  # evaluation traffic is not training traffic
    out = evaluator(model(adj, halo))
    halo.stats.bytes, halo.stats.rows = saved
    return out
