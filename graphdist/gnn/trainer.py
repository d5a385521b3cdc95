"""Full-batch GNN training on k ranks: one part per rank, halo exchange, data-parallel weights.

A run reads top to bottom (:func:`fit`)::

    facts = gather_facts(cfg, part, ctx)     # every part's statistics, memory, link (collective)
    dec   = decide(cfg, facts)               # everything the run decides, with the reason for each
    inputs = prepare(cfg, part, device)      # owned rows in locality order, features, labels, masks
    net   = build_net(cfg, dec, part, ...)   # graphdist's own GCN / SAGE, or a PyG model
    loop  = run_loop(GCNTask(...), ...)      # epochs, checkpoints, signals, resume
    report(...)                              # the report, with dec as ``run/decisions``

The model is graphdist's own GCN / SAGE (``--model gcn|sage``:
:class:`~graphdist.gnn.net.BuiltinNet`) or a PyG model run through :mod:`graphdist.gnn.pyg` (any
other ``--model``); both go through the one epoch of :class:`~graphdist.gnn.task.GCNTask`.
Dropout masks are functions of (seed, epoch, layer, global node id), so k ranks compute exactly
what one process computes, dropout included; ``resume`` continues bit for bit.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

import torch

from graphdist import comm
from graphdist.adam import Adam
from graphdist.checkpoint import partition_id, resuming
from graphdist.errors import ConfigError
from graphdist.exchange.quant import rel_error as quant_rel_error
from graphdist.gnn.config import BUILTIN_MODELS, GCNConfig
from graphdist.gnn.decide import decide
from graphdist.gnn.facts import gather_facts
from graphdist.gnn.net import build_net
from graphdist.gnn.task import GCNTask, best_epoch
from graphdist.loop import LoopConfig, run_loop
from graphdist.partition.job import check_halo_bits
from graphdist.partition.order import BLOCK_BYTES, block_count
from graphdist.partition.regroup import parts_for_world
from graphdist.partition.setup import check_layout, load_local
from graphdist.log import get_logger
from graphdist.memory import peak_memory_bytes
from graphdist.procgroup import start_rank
from graphdist.timer import Timer

__all__ = ["GCNConfig", "train", "fit", "prepare", "Inputs"]


def train(cfg: GCNConfig) -> dict:
    """Run training on this rank (the process group is created if needed); returns the report."""
    ctx = start_rank(cfg)
    cfg, regrouped = parts_for_world(cfg, ctx.world_size)  # --nnodes MIN:MAX on fewer nodes
    if regrouped and ctx.rank == 0:
        get_logger().warning(regrouped)
    lg, pinfo = load_local(cfg, ctx.rank, ctx.world_size)
    pinfo = {**pinfo, "regrouped": regrouped} if regrouped else pinfo
    box = [lg]
    del lg
    return fit(cfg, box, pinfo, ctx)  # fit takes the part out of the box: it holds the only reference


def fit(cfg: GCNConfig, lg, pinfo: dict, ctx, callbacks=()) -> dict:
    """Train on this rank's :class:`~graphdist.partition.local.LocalGraph`; every rank returns the report.

    ``callbacks``: functions ``cb(epoch, history) -> bool`` called on every rank after each epoch
    (same arguments everywhere); returning True stops training there, as early stopping does
    (the epoch is checkpointed when ``checkpoint_dir`` is set). ``lg`` may come in a one-element
    list, which fit empties: then nothing else holds the loaded part, and its memory (a mapped
    part file) is freed once the part is reordered and the adjacency built."""
    if isinstance(lg, list):
        lg = lg.pop()
    check_halo_bits(cfg, ctx.world_size)
    dec = decide(cfg, gather_facts(cfg, lg, ctx))
    dec.check()
    for line in dec.lines():
        get_logger().info(line)
    cfg = dec.applied(cfg)
    lg, inp = prepare(cfg, lg, ctx.device)
    net = build_net(cfg, dec, lg, inp.x, inp.ids, inp.n_classes, ctx.device)
    lg = lg.without_edges()  # the adjacency and the exchangers hold what training needs
    opt = Adam(net.param_groups(cfg.weight_decay, not cfg.weight_decay_all), lr=cfg.lr)  # torch.optim's, without its imports
    task = GCNTask(cfg, net, opt, inp.y, inp.ids, inp.masks, inp.counts, ctx.device, _auto_bits(cfg, dec))
    res = run_loop(task, _loop_config(cfg, ctx, inp, lg), callbacks)
    if getattr(net, "stale", None) is not None:
        net.stale.drain()  # no exchange left in flight
    return report(cfg, dec, net, task, res, pinfo, ctx)


@dataclass
class Inputs:
    """A rank's node data on its device, in the part's (reordered) row order."""

    x: torch.Tensor
    y: torch.Tensor
    ids: torch.Tensor
    """global ids of the owned rows"""
    masks: list
    """train, val, test masks"""
    counts: torch.Tensor
    """global train, val, test counts (float64)"""
    n_classes: int


def prepare(cfg, lg, dev):
    """``(part, inputs)``: the part's owned rows in locality order (``--reorder``: every result is
    order-free; blocks sized for the widest product; the order kept in ``--checkpoint-dir``, so a
    resume or ``graphdist infer`` of the same parts reads it) and its node data on ``dev``, normalised as
    ``--row-normalize`` says; the global class and mask counts (collectives)."""
    width = max(lg.x.shape[1], cfg.hidden)
    blocks = block_count(lg.num_owned, width) if cfg.reorder == "blocks" else 1
    with Timer() as t_order:  # kept in the checkpoint folder: a resume reads it (minutes of METIS at scale)
        lg = lg.reordered(cfg.reorder, width, kept=cfg.checkpoint_dir)
    if blocks > 1:
        how = "kept in --checkpoint-dir, read" if lg.order_kept else "computed"
        get_logger().info(f"--reorder blocks: rank 0's {lg.num_owned:,} rows in {blocks} METIS blocks of at most "
                          f"{BLOCK_BYTES >> 20} MiB of {width}-column input rows, each in RCM order "
                          f"({how} in {t_order.seconds:.1f} s)")
    check_layout(lg, cfg.halo)
    x = lg.x / lg.x.sum(1, keepdim=True).clamp(min=1.0) if cfg.row_normalize else lg.x
    masks = [m.to(dev) if m is not None else torch.zeros_like(lg.train_mask, device=dev)
             for m in (lg.train_mask, lg.val_mask, lg.test_mask)]
    n_classes = int(comm.all_reduce_max(torch.tensor([lg.num_classes], device=dev)).item())
    counts = comm.all_reduce_sum(torch.stack([m.sum() for m in masks]).to(torch.float64))
    if float(counts[0]) == 0:
        raise ConfigError("the graph has no training nodes (train_mask is empty)")
    return lg, Inputs(x.to(dev), lg.y.to(dev), lg.owned.to(dev), masks, counts, n_classes)


def _auto_bits(cfg, dec):
    """``--halo auto``'s widths per layer (:class:`graphdist.gnn.auto.AutoBits`), where decided."""
    if dec["bits"] != "auto":
        return None
    from graphdist.gnn.auto import AutoBits
    est = dec.estimates
    link = (est["link"]["bytes_per_s"], est["rates"]["codec"]) if est else None  # None: a resumed mode
    return AutoBits(cfg.halo_error, cfg.layers, link)


def _loop_config(cfg, ctx, inp: Inputs, lg) -> LoopConfig:
    """The loop's settings. Weights and Adam state are the same on every rank: a snapshot loads onto
    any number of ranks and any partition of the same graph (resharding); the held halo rows of
    --halo-staleness belong to the cut of the partition that wrote them (GCNTask.load_resharded)."""
    return LoopConfig(total=cfg.epochs, unit="epoch", desc="train-gcn", reshard=True,
                      recorded={"partition_id": partition_id(inp.ids)}, checkpoint_dir=cfg.checkpoint_dir,
                      checkpoint_every=cfg.checkpoint_every, keep_checkpoints=cfg.keep_checkpoints,
                      resume=resuming(cfg), tensorboard=cfg.tensorboard, progress=cfg.progress and ctx.is_rank0,
                      settings=cfg, identity={"fingerprint": lg.fingerprint},
                      about={"num_classes": inp.n_classes, "class_names": lg.class_names})


def report(cfg, dec, net, task, res, pinfo: dict, ctx) -> dict:
    """The run's report (every rank returns it; rank 0's is written): results, traffic, memory,
    the decisions and the settings."""
    hist, dev = task.history, ctx.device
    layers = net.halo_layers()
    if cfg.model not in BUILTIN_MODELS:
        get_logger().info("halo per layer: " + "; ".join(f"{d['layer']} ({d['class']}) {d['halo']}: {d['why']}"
                                                          for d in layers))
    best = best_epoch(hist["val_acc"])
    chosen = hist.get("halo_auto_bits")
    quantised = cfg.halo_bits < 32 or (chosen is not None and min(chosen["forward"] + chosen["backward"]) < 32)
    return {
        "test_acc": hist["test_acc"][best] if hist["test_acc"] else None,
        "best_val_acc": hist["val_acc"][best] if hist["val_acc"] else None,
        "best_epoch": best + 1,
        "losses": hist["losses"],
        "time/epoch_s": statistics.median(hist["epoch_s"]) if hist["epoch_s"] else None,
        **_traffic(cfg, dec, net, hist, res),
        "comm/halo_rel_error": quant_rel_error(*net.error_sources(), dev) if quantised else None,
        "halo/layers": layers,
        **_peaks(dev),
        "world_size": ctx.world_size,
        "partition": pinfo,
        "epochs_run": len(hist["losses"]),
        "run/resharded_from": res.resharded_from,
        "run/decisions": dec.as_dict(),
        "final/train_acc": hist["train_acc"][-1] if hist["train_acc"] else None,
        "val_acc": hist["val_acc"],
        "device": str(dev),
        "config": asdict(cfg),
    }


def _peaks(dev) -> dict:
    peaks = comm.all_gather_json(peak_memory_bytes(dev))
    return {"mem/peak_bytes": int(max(peaks)), "mem/peak_bytes_per_rank": peaks}


def _traffic(cfg, dec, net, hist: dict, res) -> dict:
    """The exchange's report keys. Per-epoch traffic is fixed by the plan and taken from the
    history, so a resumed run with no epochs left still reports it."""
    stats = hist.get("halo_rows_bytes", [0, 0])
    if "halo_rows_bytes_sum" in hist:  # sampled boundaries: the traffic differs per epoch, the mean
        rows, nbytes, n = hist["halo_rows_bytes_sum"]
        stats = [rows / max(n, 1), nbytes / max(n, 1)]
    chosen = hist.get("halo_auto_bits")
    link = getattr(net, "link", None)
    route = getattr(net, "route", None)
    return {
        "comm/halo_bytes_per_epoch": int(stats[1]),
        "comm/halo_rows_per_epoch": int(stats[0]),
        "comm/halo": cfg.halo,
        "comm/halo_auto": _halo_auto(cfg, dec, chosen),
        "comm/halo_bits": _widths(chosen) if chosen is not None else cfg.halo_bits,
        "comm/halo_rounds": cfg.halo_rounds,
        "comm/halo_route": "hosts" if route is not None and route.routed else "direct",
        "comm/halo_bytes_between_hosts_per_epoch": hist.get("halo_host_bytes"),
        "comm/input_halo": "resident" if getattr(net, "held", None) is not None else "exchange",
        "comm/eval_halo_bits": cfg.eval_halo_bits,
        "comm/halo_staleness": cfg.halo_staleness,
        "comm/boundary_rate": cfg.boundary_rate,
        "comm/link": "simulated " + link.describe() if link else "none (real transfers only)",
        "comm/link_gbps": cfg.link_gbps,
        "time/link_wait_s_per_epoch": link.waited_s / max(res.done - res.start, 1) if link else 0.0,
    }


def _halo_auto(cfg, dec, chosen) -> dict | None:
    """``comm/halo_auto``: what ``--halo auto``'s choice rests on (None without ``--halo auto``)."""
    if dec.choices["halo"]["asked"] != "auto":
        return None
    est = dec.estimates or {}
    out = {"chosen": dec["halo"], "why": dec.choices["halo"]["why"], "modes": est.get("modes", {})}
    if est:
        link = est["link"]
        out.update({"link": link["source"], "link_bytes_per_s": link["bytes_per_s"],
                    "link_latency_s": link["latency_s"],
                    "rates": {"spmm_entries_cols_per_s": est["rates"]["spmm"], "dense_flops_per_s": est["rates"]["dense"],
                              "codec_values_per_s": est["rates"]["codec"]}})
    if chosen is not None:
        out["bits"] = chosen
    return out


def _widths(chosen: dict):
    """``--halo auto``'s widths as ``comm/halo_bits``: one number when every layer and direction
    got the same width, else ``{"forward": [bits per layer], "backward": [...]}``."""
    every = set(chosen["forward"]) | set(chosen["backward"])
    return every.pop() if len(every) == 1 else {d: list(chosen[d]) for d in ("forward", "backward")}
