"""Full-batch GCN/SAGE training on k ranks: one part per rank, halo exchange, data-parallel weights.

Per epoch on every rank::

    train:  logits = GNN(x_owned, A_local, halo_exchanger)     [n_own, C]
            loss   = Σ_{owned train} CE / N_train(global)       (so Σ_ranks loss = 1-device loss)
            backward (halo grads go home), all-reduce weight grads, Adam step
    eval:   no dropout forward; (loss_sum, correct train/val/test) all-reduced in one tensor

Dropout masks are functions of (seed, epoch, layer, global node id), so k ranks compute exactly
what one process computes, dropout included. Checkpoints: :class:`graphdist.checkpoint.Checkpointer`
snapshots (weights, Adam state, history in the snapshot's meta); ``resume`` continues
bit-for-bit. SIGINT / SIGTERM stop at the end of an epoch on every rank (SIGTERM writes a
checkpoint first) with :class:`~graphdist.errors.Interrupted`.
"""
from __future__ import annotations

import signal
import statistics
from dataclasses import asdict

import torch
import torch.nn.functional as F

from graphdist import comm
from graphdist.checkpoint import Checkpointer, interrupted
from graphdist.errors import USER_ERRORS, ArtifactError, ConfigError, MissingFileError
from graphdist.gnn.config import GCNConfig
from graphdist.gnn.models import GNN
from graphdist.halo.exchange import HaloExchanger
from graphdist.halo.setup import check_plan, load_local
from graphdist.halo.spmm import SparseAdj
from graphdist.runtime import (GracefulStop, Timer, env_world, get_logger, init_distributed, peak_memory_bytes,
                               set_mmap_threshold)


def train(cfg: GCNConfig) -> dict:
    """Run training on this rank (the process group is created if needed); returns the report."""
    cfg.validate()
    if env_world()[0] == 0:  # under torchrun nobody checked before the workers started
        cfg.check_outputs()
    if cfg.malloc_mmap_mb > 0 and cfg.device != "cuda":
        set_mmap_threshold(cfg.malloc_mmap_mb)
    ctx = init_distributed(cfg.device, cfg.timeout_s)
    lg, pinfo = load_local(cfg, ctx.rank, ctx.world_size)
    return fit(cfg, lg, pinfo, ctx)


def fit(cfg: GCNConfig, lg, pinfo: dict, ctx, callbacks=()) -> dict:
    """Train on this rank's :class:`~graphdist.halo.plan.LocalGraph`; every rank returns the report.

    ``callbacks``: functions ``cb(epoch, history) -> bool`` called on every rank after each epoch
    (same arguments everywhere); returning True stops training there, as early stopping does
    (the epoch is checkpointed when ``checkpoint_dir`` is set)."""
    rank, ws, dev = ctx.rank, ctx.world_size, ctx.device
    log = get_logger()
    if cfg.halo_bits < 32 and ws == 1:
        raise ConfigError(f"--halo-bits {cfg.halo_bits} quantises the halo exchange, but a 1-part job has "
                          "none; use --halo-bits 32 or train on k >= 2 parts")
    lg = lg.reordered(cfg.reorder)  # owned rows in locality order; every result is order-free
    x = lg.x
    if x is None or lg.y is None or lg.train_mask is None:
        raise ConfigError("the graph needs features x, labels y and a train mask to train a GCN; for a "
                          "graph without node data add ,features=degree (or ,features=random:64) and "
                          ",labels=random:8 to an edgelist or npz spec")
    check_plan(lg, cfg.halo)
    if cfg.row_normalize:
        x = x / x.sum(1, keepdim=True).clamp(min=1.0)
    x, y, ids = x.to(dev), lg.y.to(dev), lg.owned.to(dev)
    masks = [m.to(dev) if m is not None else torch.zeros_like(lg.train_mask, device=dev)
             for m in (lg.train_mask, lg.val_mask, lg.test_mask)]
    n_classes = int(comm.all_reduce_max(torch.tensor([lg.num_classes], device=dev)).item())
    adj = SparseAdj.for_model(lg, cfg.model, dev, halo=cfg.halo)
    ex = HaloExchanger.from_local_graph(lg, dev, halo=cfg.halo, bits=cfg.halo_bits, seed=cfg.seed)
    counts = comm.all_reduce_sum(torch.stack([m.sum() for m in masks]).to(torch.float64))
    n_train = float(counts[0])
    if n_train == 0:
        raise ConfigError("the graph has no training nodes (train_mask is empty)")

    torch.manual_seed(cfg.seed)
    model = GNN(cfg.model, x.shape[1], cfg.hidden, n_classes, cfg.layers, cfg.dropout, cfg.batch_norm,
                seed=cfg.seed, label_classes=n_classes if cfg.label_rate > 0 else 0).to(dev)
    comm.broadcast_module(model)
    opt = torch.optim.Adam(model.param_groups(cfg.weight_decay, not cfg.weight_decay_all), lr=cfg.lr)
    hist = {"losses": [], "val_acc": [], "test_acc": [], "train_acc": [], "epoch_s": []}
    start = 0
    ckpt = Checkpointer(cfg.checkpoint_dir, cfg.keep_checkpoints) if cfg.checkpoint_dir else None
    if cfg.resume:
        start, hist = _load(ckpt, cfg, ws, lg.fingerprint, model, opt)
        log.info(f"resumed from epoch {start} in {cfg.checkpoint_dir}")

    from tqdm import tqdm
    bar = tqdm(total=cfg.epochs, initial=start, desc="train-gcn", unit="epoch",
               disable=not (ctx.is_rank0 and cfg.progress), dynamic_ncols=True)
    epoch, saved = start, start
    try:
        with GracefulStop() as signalled:
            for epoch in range(start + 1, cfg.epochs + 1):
                ex.stats.reset()
                ex.set_step(epoch)
                ex.measure = epoch == start + 1 or epoch % 10 == 0  # quantisation error, now and then
                with Timer(dev) as t:
                    model.train()
                    opt.zero_grad(set_to_none=True)
                    ex.start_pass()
                    tm, labels_in, denom = _label_split(cfg, masks[0], y, ids, epoch, n_train)
                    out = model(x, adj, ex, ids=ids, step=epoch, labels=labels_in)
                    loss = F.cross_entropy(out[tm], y[tm], reduction="sum") / denom
                    loss.backward()
                    comm.all_reduce_grads(model.parameters())
                    opt.step()
                    model.eval()
                    with torch.no_grad():
                        ex.start_pass()
                        known = torch.where(masks[0], y, -1) if cfg.label_rate > 0 else None
                        pred = model(x, adj, ex, labels=known).argmax(1)
                        ok = pred == y
                        # the last entry carries this rank's stop request to every rank
                        sig = {None: 0.0, signal.SIGINT: 1.0}.get(signalled.signum, 1000.0)
                        m = torch.stack([loss.detach().double() * n_train] +  # mean loss, times n_train
                                        [(ok & mk).sum().double() for mk in masks] +
                                        [torch.tensor(sig, dtype=torch.float64, device=dev)])
                        comm.all_reduce_sum(m)
                if epoch == start + 1:  # traffic per epoch is fixed by the plan: all ranks' sum, once
                    tot = comm.all_reduce_sum(torch.tensor([ex.stats.rows, ex.stats.bytes], dtype=torch.float64,
                                                           device=dev))
                    hist["halo_rows_bytes"] = [int(v) for v in tot.tolist()]  # checkpointed with the history
                accs = [float(m[i + 1] / counts[i]) if counts[i] > 0 else float("nan") for i in range(3)]
                hist["losses"].append(float(m[0]) / n_train)
                hist["train_acc"].append(accs[0])
                hist["val_acc"].append(accs[1])
                hist["test_acc"].append(accs[2])
                hist["epoch_s"].append(t.seconds)
                bar.update(1)
                bar.set_postfix(loss=f"{hist['losses'][-1]:.4f}", val=f"{accs[1]:.3f}")
                stop = _early_stop(hist["val_acc"], cfg.patience)
                stop = any([bool(cb(epoch, hist)) for cb in callbacks]) or stop
                term = float(m[4]) >= 1000.0  # some rank got SIGTERM: checkpoint before stopping
                last = epoch == cfg.epochs or stop or term
                if ckpt is not None and (epoch % cfg.checkpoint_every == 0 or last):
                    _save(ckpt, cfg, lg.fingerprint, epoch, model, opt, hist)
                    saved = epoch
                if float(m[4]) > 0:
                    bar.close()
                    raise interrupted(signal.SIGTERM if term else signal.SIGINT, f"epoch {epoch} of {cfg.epochs}",
                                      ckpt, saved, cfg.checkpoint_dir)
                if stop:
                    break
    except USER_ERRORS:
        raise
    except Exception as e:  # noqa: BLE001 - a failed collective names the peer; anything else is itself
        bar.close()
        if comm.is_collective_failure(e):
            comm.raise_peer_failure(e, f"epoch {epoch}")
        raise
    bar.close()

    # per-epoch halo traffic is fixed by the plan; taken from the history so that a resumed run
    # with no epochs left still reports it
    stats = hist.get("halo_rows_bytes", [0, 0])
    peak = comm.all_reduce_max(torch.tensor([float(peak_memory_bytes(dev))], dtype=torch.float64, device=dev))
    peaks = comm.all_gather_object(peak_memory_bytes(dev))
    best = _best(hist["val_acc"])
    rel_error = _rel_error(ex, len(model.convs), dev) if cfg.halo_bits < 32 else None
    return {
        "test_acc": hist["test_acc"][best] if hist["test_acc"] else None,
        "best_val_acc": hist["val_acc"][best] if hist["val_acc"] else None,
        "best_epoch": best + 1,
        "losses": hist["losses"],
        "time/epoch_s": statistics.median(hist["epoch_s"]) if hist["epoch_s"] else None,
        "comm/halo_bytes_per_epoch": int(stats[1]),
        "comm/halo_rows_per_epoch": int(stats[0]),
        "comm/halo": cfg.halo,
        "comm/halo_bits": cfg.halo_bits,
        "comm/halo_rel_error": rel_error,
        "mem/peak_bytes": int(peak.item()),
        "mem/peak_bytes_per_rank": peaks,
        "world_size": ws,
        "partition": pinfo,
        "epochs_run": len(hist["losses"]),
        "final/train_acc": hist["train_acc"][-1] if hist["train_acc"] else None,
        "val_acc": hist["val_acc"],
        "device": str(dev),
        "config": asdict(cfg),
    }


def _label_split(cfg, train, y, ids, epoch: int, n_train: float):
    """``(nodes the loss is taken on, labels fed to the input (-1 = none), loss divisor)``. With
    ``label_rate`` a share of the training nodes, drawn by (seed, epoch, global id), feeds its
    label in and the loss is on the rest (divided by their global count, so k ranks = 1)."""
    if cfg.label_rate <= 0:
        return train, None, n_train
    from graphdist.halo.keyed import key32, keyed_bits
    draw = keyed_bits(ids, 1, key32(cfg.seed, epoch, 0x1AB))[:, 0]
    prop = train & (draw < int(cfg.label_rate * (1 << 32)) - (1 << 31))
    sup = train & ~prop
    denom = float(comm.all_reduce_sum(sup.sum().double().reshape(1))[0])
    return sup, torch.where(prop, y, -1), max(denom, 1.0)


def _rel_error(ex, layers: int, dev) -> dict:
    """Relative error ``||x_hat - x|| / ||x||`` of the quantised halo rows per layer, over all
    ranks and the measured epochs: ``{"forward": [...], "backward": [...]}`` (None where a layer
    sent nothing in that direction)."""
    sums = torch.zeros(2, layers, 2, dtype=torch.float64)
    for (direction, tag), (e2, n2) in ex.stats.errors.items():
        if tag < layers:
            sums[0 if direction == "forward" else 1, tag] += torch.tensor([e2, n2], dtype=torch.float64)
    sums = comm.all_reduce_sum(sums.to(dev)).cpu()
    out = {}
    for i, name in enumerate(("forward", "backward")):
        out[name] = [float((sums[i, j, 0] / sums[i, j, 1]).sqrt()) if sums[i, j, 1] > 0 else None
                     for j in range(layers)]
    return out


_RUN_KEYS = ("model", "layers", "hidden", "batch_norm", "seed", "label_rate")
"""Config fields a checkpoint must agree with to be resumed."""
_RUN_DEFAULTS = {"label_rate": 0.0}
"""What a checkpoint written before a key existed had (it resumes as that)."""


def _state(model, opt) -> dict:
    """Weights and Adam state (replicated: stored once). Dropout is keyed by (seed, epoch, layer,
    node), so no RNG state is needed to resume exactly."""
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(model, opt)
    return {"model": msd, "optim": osd}


def _save(ckpt, cfg, fingerprint, epoch, model, opt, hist) -> None:
    meta = {"epoch": epoch, "fingerprint": fingerprint, "hist": hist,
            **{k: getattr(cfg, k) for k in _RUN_KEYS}}
    ckpt.save(epoch, _state(model, opt), meta)


def _load(ckpt, cfg, ws, fingerprint, model, opt) -> tuple[int, dict]:
    """Restore weights and Adam state; returns ``(epochs done, history)``."""
    from torch.distributed.checkpoint.state_dict import set_state_dict
    snap = ckpt.latest()
    if snap is None:
        raise MissingFileError(f"--resume: no checkpoint in {cfg.checkpoint_dir} (no 'latest' file)")
    meta = ckpt.read_meta(snap)
    if meta.get("world_size") != ws:
        raise ArtifactError(f"checkpoint {snap} was written by {meta.get('world_size')} ranks, this run has {ws}")
    if meta.get("fingerprint") != fingerprint:
        raise ArtifactError(f"checkpoint {snap} is for graph fingerprint {meta.get('fingerprint')}, "
                            f"this run's graph has {fingerprint}")
    for k in _RUN_KEYS:
        if meta.get(k, _RUN_DEFAULTS.get(k)) != getattr(cfg, k):
            raise ArtifactError(f"checkpoint {snap} has {k}={meta.get(k)!r} but this run has {getattr(cfg, k)!r}")
    state = _state(model, opt)
    ckpt.load(snap, state)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return int(meta["epoch"]), meta["hist"]


def _best(val: list[float]) -> int:
    best, bv = 0, -1.0
    for i, v in enumerate(val):
        if v == v and v > bv:  # first epoch with the highest validation accuracy
            best, bv = i, v
    return best


def _early_stop(val: list[float], patience: int) -> bool:
    return patience > 0 and len(val) - 1 - _best(val) >= patience




__all__ = ["GCNConfig", "train", "fit"]
