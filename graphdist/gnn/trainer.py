"""Full-batch GNN training on k ranks: one part per rank, halo exchange, data-parallel weights.

The model is graphdist's own GCN / SAGE (``--model gcn|sage``: :class:`BuiltinNet`) or a PyG
model run through :mod:`graphdist.gnn.pyg` (any other ``--model``:
:class:`graphdist.gnn.pyg.net.PygNet`); both go through the one epoch of :class:`GCNTask`.

Per epoch on every rank::

    train:  logits = GNN(x_owned, A_local, halo_exchanger)     [n_own, C]
            loss   = Σ_{owned train} CE / N_train(global)       (so Σ_ranks loss = 1-device loss)
            backward (halo grads go home), all-reduce weight grads, Adam step
    eval:   no dropout forward, 32-bit halo rows unless --eval-halo-bits; (loss_sum, correct
            train/val/test) all-reduced in one tensor

Dropout masks are functions of (seed, epoch, layer, global node id), so k ranks compute exactly
what one process computes, dropout included (for a PyG model: the dropout it takes through
``drop=``, see :mod:`graphdist.gnn.pyg.models`). The epochs run in the one training loop
(:func:`graphdist.loop.run_loop`: progress, signals, checkpoints (weights, Adam state, history),
resume with the settings check, early stopping); ``resume`` continues bit-for-bit.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import asdict

import torch
import torch.nn.functional as F

from graphdist import comm
from graphdist.checkpoint import partition_id, resuming, with_recorded
from graphdist.errors import ConfigError
from graphdist.gnn.config import BUILTIN_MODELS, GCNConfig
from graphdist.gnn.models import GNN, held_input
from graphdist.gnn.plan import check_fits, input_held_why_not
from graphdist.exchange.boundary import BoundarySampler
from graphdist.exchange.exchanger import HaloExchanger
from graphdist.partition.job import check_halo_bits
from graphdist.partition.order import BLOCK_BYTES, block_count
from graphdist.exchange.link import Link
from graphdist.exchange.quant import rel_error as quant_rel_error
from graphdist.partition.regroup import parts_for_world
from graphdist.exchange.resident import ResidentHalo
from graphdist.exchange.route import gather_route
from graphdist.exchange.rounds import in_rounds
from graphdist.exchange.stale import STALE_RESHARD, Staleness
from graphdist.partition.setup import check_layout, load_local
from graphdist.exchange.spmm import SparseAdj
from graphdist.loop import LoopConfig, Task, run_loop
from graphdist.runtime import Timer, get_logger, peak_memory_bytes, start_rank


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


def _auto_line(plan: dict) -> str:
    if "modes" not in plan or not plan["modes"]:
        return plan.get("why", "")
    est = ", ".join(f"{m} {d['time/epoch_s']:.3g} s" for m, d in plan["modes"].items())
    link = plan.get("link", "")
    return f"predicted epoch {est}; link {plan.get('link_bytes_per_s', 0) * 8 / 1e9:.3g} Gbit/s {link}"


def fit(cfg: GCNConfig, lg, pinfo: dict, ctx, callbacks=()) -> dict:
    """Train on this rank's :class:`~graphdist.partition.layout.LocalGraph`; every rank returns the report.

    ``callbacks``: functions ``cb(epoch, history) -> bool`` called on every rank after each epoch
    (same arguments everywhere); returning True stops training there, as early stopping does
    (the epoch is checkpointed when ``checkpoint_dir`` is set). ``lg`` may come in a one-element
    list, which fit empties: then nothing else holds the loaded part, and its memory (a mapped
    part file) is freed once the part is reordered and the adjacency built."""
    if isinstance(lg, list):
        lg = lg.pop()
    ws, dev = ctx.world_size, ctx.device
    check_halo_bits(cfg, ws)
    halo_auto = auto_bits = None
    if cfg.halo == "auto":  # resolved before anything is built; the checkpoint records the choice
        from graphdist.gnn.auto import AutoBits, choose_halo, resumed_choice
        n_cls = int(comm.all_reduce_max(torch.tensor([lg.num_classes])).item())
        mode, halo_auto = resumed_choice(cfg) or choose_halo(cfg, lg, n_cls)
        if cfg.halo_bits == 32 and cfg.halo_error > 0 and ws > 1 and cfg.model in BUILTIN_MODELS and \
                comm.backend() in ("gloo", "nccl"):  # and a width per layer after the first epoch
            link = (halo_auto["link_bytes_per_s"], halo_auto["rates"]["codec_values_per_s"]) \
                if "rates" in halo_auto else None
            auto_bits = AutoBits(cfg.halo_error, cfg.layers, link)
        cfg = dataclasses.replace(cfg, halo=mode)
        get_logger().info(f"--halo auto: {mode} ({_auto_line(halo_auto)})")
    cfg = with_recorded(cfg, "halo_rounds")  # resumed: the rounds the checkpointed run chose
    rounds = 1 if ws == 1 else (cfg.halo_rounds or 1)
    why_not = input_held_why_not(cfg, ws) or (
        "--halo auto chooses the first layer's wire width" if auto_bits is not None else None)
    if dev.type != "cuda" and cfg.model in BUILTIN_MODELS:  # plan models graphdist's own models
        try:
            rounds = check_fits(cfg, lg, ws)  # host memory: one line instead of an out-of-memory kill
        except ConfigError as e:
            if why_not is not None:
                raise
            cfg, why_not = dataclasses.replace(cfg, input_halo="exchange"), f"the held rows do not fit ({e})"
            rounds = check_fits(cfg, lg, ws)
    if rounds > 1 and cfg.halo_route == "hosts":
        raise ConfigError(f"--halo-route hosts moves each exchange in one round, but this job needs {rounds} "
                          "--halo-rounds to fit memory: use --halo-route direct, or more ranks")
    cfg = dataclasses.replace(cfg, halo_rounds=rounds)
    if why_not is not None and why_not.startswith("the held rows do not fit"):
        get_logger().info(f"--input-halo resident: {why_not}; the input halo rows are exchanged every epoch")
    if rounds > 1:
        get_logger().info(f"halo exchange in {rounds} rounds (--halo-rounds)")
    # owned rows in locality order (every result is order-free); blocks sized for the widest product
    width = max(lg.x.shape[1] if lg.x is not None else 0, cfg.hidden)
    blocks = block_count(lg.num_owned, width) if cfg.reorder == "blocks" else 1
    with Timer() as t_order:
        lg = lg.reordered(cfg.reorder, width)
    if blocks > 1:
        get_logger().info(f"--reorder blocks: rank 0's {lg.num_owned:,} rows in {blocks} METIS blocks of at most "
                          f"{BLOCK_BYTES >> 20} MiB of {width}-column input rows, each in RCM order "
                          f"({t_order.seconds:.1f} s)")
    x = lg.x
    if x is None or lg.y is None or lg.train_mask is None:
        raise ConfigError("the graph needs features x, labels y and a train mask to train a GCN; for a "
                          "graph without node data add ,features=degree (or ,features=random:64) and "
                          ",labels=random:8 to an edgelist or npz spec")
    check_layout(lg, cfg.halo)
    if cfg.row_normalize:
        x = x / x.sum(1, keepdim=True).clamp(min=1.0)
    x, y, ids = x.to(dev), lg.y.to(dev), lg.owned.to(dev)
    masks = [m.to(dev) if m is not None else torch.zeros_like(lg.train_mask, device=dev)
             for m in (lg.train_mask, lg.val_mask, lg.test_mask)]
    n_classes = int(comm.all_reduce_max(torch.tensor([lg.num_classes], device=dev)).item())
    counts = comm.all_reduce_sum(torch.stack([m.sum() for m in masks]).to(torch.float64))
    n_train = float(counts[0])
    if n_train == 0:
        raise ConfigError("the graph has no training nodes (train_mask is empty)")
    f0 = cfg.hidden if cfg.layers > 1 else n_classes  # the first layer's width
    if why_not is None and not (held_input(x.shape[1], f0, True) or held_input(x.shape[1], f0, False)):
        why_not = "the first layer applies its linear first: its rows change every step"
    if cfg.model in BUILTIN_MODELS:
        net = BuiltinNet(cfg, lg, x, ids, n_classes, dev, separate_eval=auto_bits is not None,
                         held=why_not is None)
    else:
        if cfg.halo_staleness or cfg.link_gbps > 0 or cfg.boundary_rate < 1.0:
            raise ConfigError(f"--model {cfg.model}: --halo-staleness, --boundary-rate and --link-gbps work with the built-in "
                              f"models ({', '.join(BUILTIN_MODELS)}) only")
        from graphdist.gnn.pyg.net import PygNet
        net = PygNet(cfg, lg, x, n_classes, dev)
    lg = lg.without_edges()  # the adjacency and the exchangers hold what training needs
    opt = torch.optim.Adam(net.param_groups(cfg.weight_decay, not cfg.weight_decay_all), lr=cfg.lr)
    task = GCNTask(cfg, net, opt, y, ids, masks, counts, dev, auto_bits)
    # weights and Adam state are the same on every rank: a snapshot loads onto any number of
    # ranks and any partition of the same graph (resharding); the held halo rows of
    # --halo-staleness belong to the cut of the partition that wrote them (GCNTask.load_resharded)
    lc = LoopConfig(total=cfg.epochs, unit="epoch", desc="train-gcn", reshard=True,
                    recorded={"partition_id": partition_id(ids)},
                    checkpoint_dir=cfg.checkpoint_dir,
                    checkpoint_every=cfg.checkpoint_every, keep_checkpoints=cfg.keep_checkpoints,
                    resume=resuming(cfg), tensorboard=cfg.tensorboard, progress=cfg.progress and ctx.is_rank0, settings=cfg,
                    identity={"fingerprint": lg.fingerprint})
    res = run_loop(task, lc, callbacks)
    link = getattr(net, "link", None)
    if getattr(net, "stale", None) is not None:
        net.stale.drain()  # no exchange left in flight
    hist = task.history
    layers = net.halo_layers()
    if cfg.model not in BUILTIN_MODELS:
        get_logger().info("halo per layer: " + "; ".join(f"{d['layer']} ({d['class']}) {d['halo']}: {d['why']}"
                                                          for d in layers))
    ran = max(res.done - res.start, 1)

    # per-epoch halo traffic is fixed by the plan; taken from the history so that a resumed run
    # with no epochs left still reports it
    stats = hist.get("halo_rows_bytes", [0, 0])
    if "halo_rows_bytes_sum" in hist:  # sampled boundaries: the traffic differs per epoch, the mean
        rows, nbytes, n = hist["halo_rows_bytes_sum"]
        stats = [rows / max(n, 1), nbytes / max(n, 1)]
    peaks = comm.all_gather_object(peak_memory_bytes(dev))
    best = _best(hist["val_acc"])
    chosen = hist.get("halo_auto_bits")
    if chosen is not None:
        halo_auto = {**(halo_auto or {}), "bits": chosen}
    quantised = cfg.halo_bits < 32 or (chosen is not None and min(chosen["forward"] + chosen["backward"]) < 32)
    rel_error = quant_rel_error(*net.error_sources(), dev) if quantised else None
    return {
        "test_acc": hist["test_acc"][best] if hist["test_acc"] else None,
        "best_val_acc": hist["val_acc"][best] if hist["val_acc"] else None,
        "best_epoch": best + 1,
        "losses": hist["losses"],
        "time/epoch_s": statistics.median(hist["epoch_s"]) if hist["epoch_s"] else None,
        "comm/halo_bytes_per_epoch": int(stats[1]),
        "comm/halo_rows_per_epoch": int(stats[0]),
        "comm/halo": cfg.halo,
        "comm/halo_auto": halo_auto,
        "comm/halo_bits": _widths(chosen) if chosen is not None else cfg.halo_bits,
        "comm/halo_rounds": cfg.halo_rounds,
        "comm/halo_route": "hosts" if getattr(net, "route", None) is not None and net.route.routed else "direct",
        "comm/halo_bytes_between_hosts_per_epoch": hist.get("halo_host_bytes"),
        "comm/input_halo": "resident" if getattr(net, "held", None) is not None else "exchange",
        "comm/eval_halo_bits": cfg.eval_halo_bits,
        "comm/halo_rel_error": rel_error,
        "halo/layers": layers,
        "comm/halo_staleness": cfg.halo_staleness,
        "comm/boundary_rate": cfg.boundary_rate,
        "comm/link": "simulated " + link.describe() if link else "none (real transfers only)",
        "comm/link_gbps": cfg.link_gbps,
        "time/link_wait_s_per_epoch": link.waited_s / ran if link else 0.0,
        "mem/peak_bytes": int(max(peaks)),
        "mem/peak_bytes_per_rank": peaks,
        "world_size": ws,
        "partition": pinfo,
        "epochs_run": len(hist["losses"]),
        "run/resharded_from": res.resharded_from,
        "final/train_acc": hist["train_acc"][-1] if hist["train_acc"] else None,
        "val_acc": hist["val_acc"],
        "device": str(dev),
        "config": asdict(cfg),
    }


def _widths(chosen: dict):
    """``--halo auto``'s widths as ``comm/halo_bits``: one number when every layer and direction
    got the same width, else ``{"forward": [bits per layer], "backward": [...]}``."""
    every = set(chosen["forward"]) | set(chosen["backward"])
    return every.pop() if len(every) == 1 else {d: list(chosen[d]) for d in ("forward", "backward")}


class BuiltinNet:
    """graphdist's own GCN / SAGE (:class:`~graphdist.gnn.models.GNN`) with its adjacency and
    exchangers: what :class:`GCNTask` calls (``gnn/pyg/net.py`` gives a PyG model the same face)."""

    def __init__(self, cfg, lg, x, ids, n_classes: int, dev, separate_eval: bool = False, held: bool = False):
        self.cfg, self.x, self.ids = cfg, x, ids
        self.adj = SparseAdj.for_model(lg, cfg.model, dev, halo=cfg.halo)
        link = Link(cfg.link_gbps, cfg.link_latency_us)
        self.link = link if link.active else None
        stale = None
        if cfg.halo_staleness:
            # widest row a layer exchanges: min(F_in, F_out), or the features when the first layer
            # propagates them (F_in < 2 F_out, graphdist.gnn.models)
            f0 = cfg.hidden if cfg.layers > 1 else n_classes
            width = max(cfg.hidden, n_classes, x.shape[1] if x.shape[1] < 2 * f0 else 0)
            stale = Staleness(cfg.layers, width, cfg.staleness_smoothing)
        self.route = self.route_info = None
        if comm.world()[1] > 1:  # the hosts of the ranks: the route, or the bytes between hosts counted
            self.route, self.route_info = gather_route(lg, cfg.halo, cfg.halo_route == "hosts")
            _log_route(cfg, self.route, self.route_info)
        self.ex = HaloExchanger.from_local_graph(lg, dev, halo=cfg.halo, bits=cfg.halo_bits, seed=cfg.seed,
                                                 link=self.link, stale=stale, route=self.route)
        # evaluation is exact (32-bit, fresh rows) unless --eval-halo-bits says otherwise
        same = cfg.eval_halo_bits == cfg.halo_bits and not cfg.halo_staleness and not separate_eval
        self.ex_eval = self.ex if same else \
            HaloExchanger.from_local_graph(lg, dev, halo=cfg.halo, bits=cfg.eval_halo_bits, seed=cfg.seed + 1,
                                           link=self.link, route=self.route)
        if self.ex.active:  # --halo-rounds: the exchange's buffers in slices
            in_rounds(cfg.halo_rounds, self.adj, self.ex, self.ex_eval)
        # --input-halo resident: the features' halo rows, received once (graphdist.exchange.resident)
        self.held = ResidentHalo(lg, x, self.adj, self.ex, cfg.model) if held and self.ex.active else None
        torch.manual_seed(cfg.seed)
        self.model = GNN(cfg.model, x.shape[1], cfg.hidden, n_classes, cfg.layers, cfg.dropout, cfg.batch_norm,
                         seed=cfg.seed, label_classes=n_classes if cfg.label_rate > 0 else 0).to(dev)
        self.stale = self.ex.stale
        self.sampler = None  # --boundary-rate < 1: a new cut each epoch
        if cfg.boundary_rate < 1.0 and self.ex.active:
            self.sampler = BoundarySampler(lg, self.adj, self.ex, cfg.boundary_rate, cfg.seed)
        comm.broadcast_module(self.model)

    def param_groups(self, weight_decay: float, first_layer_only: bool):
        return self.model.param_groups(weight_decay, first_layer_only)

    def exchangers(self):
        return list({id(self.ex): self.ex, id(self.ex_eval): self.ex_eval}.values())

    def measure(self, on: bool) -> None:
        self.ex.measure_errors(on)

    def train_pass(self, epoch: int, labels):
        adj, ex = self.sampler.epoch(epoch) if self.sampler is not None else (self.adj, self.ex)
        ex.start_pass()
        return self.model(self.x, adj, ex, ids=self.ids, step=epoch, labels=labels,
                          held=self.held if adj is self.adj else None)

    def eval_pass(self, labels):
        self.ex_eval.start_pass()
        return self.model(self.x, self.adj, self.ex_eval, labels=labels, held=self.held)

    def sync_grads(self) -> None:
        comm.all_reduce_grads(self.model.parameters())

    def traffic(self) -> list[int]:
        exs = self.exchangers()
        return [sum(e.stats.rows for e in exs), sum(e.stats.bytes for e in exs)]

    def host_traffic(self) -> int:
        """Halo bytes this rank sent to other hosts since the epoch began (0 without a host map)."""
        return sum(e.stats.host_bytes for e in self.exchangers())

    def error_sources(self):
        return [self.ex], len(self.model.convs)

    def halo_layers(self) -> list[dict]:
        cls = type(self.model.convs[0]).__name__
        why = f"halo {self.cfg.halo} asked for" + (" (a fixed linear map)" if self.cfg.halo == "mvc" else "")
        return [{"layer": f"convs.{i}", "class": cls, "halo": self.cfg.halo, "why": why}
                for i in range(len(self.model.convs))]


class GCNTask(Task):
    """One epoch: train (forward, loss, backward, gradient all-reduce, Adam), then an evaluation
    pass; one all-reduce of (loss, correct train/val/test). ``net``: :class:`BuiltinNet` or
    :class:`graphdist.gnn.pyg.net.PygNet`."""

    def __init__(self, cfg, net, opt, y, ids, masks, counts, dev, auto_bits=None):
        self.cfg, self.net, self.model, self.opt, self.y, self.ids = cfg, net, net.model, opt, y, ids
        self.auto_bits = auto_bits
        """:class:`graphdist.gnn.auto.AutoBits` (``--halo auto`` choosing widths) or None."""
        self.masks, self.counts, self.dev = masks, counts, dev
        self.n_train = float(counts[0])
        self.first = 0
        self.held_rows = True
        """whether the state holds --halo-staleness's rows (not while loading another partition's)"""
        self.history = {"losses": [], "val_acc": [], "test_acc": [], "train_acc": [], "epoch_s": []}

    def run(self, units):
        cfg, net, model, masks, y, hist = self.cfg, self.net, self.model, self.masks, self.y, self.history
        for epoch in units:
            for e in net.exchangers():
                e.stats.reset()
                e.set_step(epoch)
            self.first = self.first or epoch
            calibrating = self.auto_bits is not None and self.auto_bits.before_epoch(hist, net.error_sources()[0])
            if calibrating:
                self.first = epoch + 1  # the error of the chosen widths is measured in the next epoch
            net.measure(epoch == self.first or epoch % 10 == 0)  # quantisation error, now and then
            with Timer(self.dev) as t:
                model.train()
                self.opt.zero_grad(set_to_none=True)
                tm, labels_in, denom = _label_split(cfg, masks[0], y, self.ids, epoch, self.n_train)
                out = net.train_pass(epoch, labels_in)
                loss = F.cross_entropy(out[tm], y[tm], reduction="sum") / denom
                loss.backward()
                net.sync_grads()
                self.opt.step()
                model.eval()
                with torch.no_grad():
                    known = torch.where(masks[0], y, -1) if cfg.label_rate > 0 else None
                    ok = net.eval_pass(known).argmax(1) == y
                    m = torch.stack([loss.detach().double() * self.n_train] +  # mean loss, times n_train
                                    [(ok & mk).sum().double() for mk in masks])
                    comm.all_reduce_sum(m)
            sampled = getattr(net, "sampler", None) is not None
            if "halo_rows_bytes" not in hist:  # traffic per epoch is fixed by the plan: all ranks' sum, once
                tot = comm.all_reduce_sum(torch.tensor(net.traffic(), dtype=torch.float64, device=self.dev))
                hist["halo_rows_bytes"] = [int(v) for v in tot.tolist()]  # checkpointed with the history
                if getattr(net, "route", None) is not None and not sampled:  # and those between hosts
                    hb = comm.all_reduce_sum(torch.tensor([net.host_traffic()], dtype=torch.float64, device=self.dev))
                    hist["halo_host_bytes"] = int(hb[0])
            elif sampled:  # sampled: every epoch's traffic differs; their sum
                tot = comm.all_reduce_sum(torch.tensor(net.traffic(), dtype=torch.float64, device=self.dev))
            if sampled:
                old = hist.get("halo_rows_bytes_sum", [0, 0, 0])
                hist["halo_rows_bytes_sum"] = [old[0] + int(tot[0]), old[1] + int(tot[1]), old[2] + 1]
            if calibrating:
                choice = self.auto_bits.after_epoch(hist, net.error_sources()[0])
                get_logger().info(f"--halo auto: bits forward {choice['forward']}, backward {choice['backward']} "
                                  f"(expected relative error <= --halo-error {choice['budget']:g})")
            counts = self.counts
            accs = [float(m[i + 1] / counts[i]) if counts[i] > 0 else float("nan") for i in range(3)]
            hist["losses"].append(float(m[0]) / self.n_train)
            hist["train_acc"].append(accs[0])
            hist["val_acc"].append(accs[1])
            hist["test_acc"].append(accs[2])
            hist["epoch_s"].append(t.seconds)
            yield {"loss": f"{hist['losses'][-1]:.4f}", "val": f"{accs[1]:.3f}"}

    def should_stop(self) -> bool:
        return _early_stop(self.history["val_acc"], self.cfg.patience)

    def state(self) -> dict:
        """Weights and Adam state (replicated: stored once). Dropout is keyed by (seed, epoch,
        layer, node), so no RNG state is needed to resume exactly."""
        from torch.distributed.checkpoint.state_dict import get_state_dict
        msd, osd = get_state_dict(self.model, self.opt)
        st = getattr(self.net, "stale", None)
        stale = st.state(comm.world()[0]) if st is not None and self.held_rows else {}
        return {"model": msd, "optim": osd, **stale}  # stale halo rows: per rank

    def scalars(self) -> dict:
        rb = self.history.get("halo_rows_bytes")  # fixed by the plan: rows, bytes per epoch
        return {"comm/halo_bytes_per_epoch": rb[1]} if rb else {}

    def resharded(self, was: dict) -> None:
        for k in ("halo_rows_bytes", "halo_rows_bytes_sum", "halo_host_bytes"):  # the old partition's traffic
            self.history.pop(k, None)

    def loaded(self, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict
        set_state_dict(self.model, self.opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        if getattr(self.net, "stale", None) is not None and self.held_rows:
            self.net.stale.load(state, comm.world()[0])

    def load_resharded(self, ckpt, snap, was: dict, now: dict) -> None:
        """Weights and Adam state load onto any partition; the rows ``--halo-staleness`` holds
        belong to the old partition's cut and start again: the first resumed epoch exchanges
        fresh rows, as a run's first epoch does (:data:`graphdist.exchange.stale.STALE_RESHARD`)."""
        self.held_rows = False
        try:
            super().load_resharded(ckpt, snap, was, now)
        finally:
            self.held_rows = True
        if getattr(self.net, "stale", None) is not None and comm.world()[0] == 0:
            get_logger().warning(STALE_RESHARD)


def _log_route(cfg, route, info: dict) -> None:
    """Rank 0's line on the route across hosts (``--halo-route``)."""
    shape = f"{info['hosts']} host(s) x {'/'.join(map(str, info['ranks_per_host']))} rank(s)"
    rows = f"{info['rows_between_hosts']:,} rows between hosts per exchange"
    if cfg.halo_route == "direct":
        return
    if not route.routed:
        get_logger().info(f"--halo-route hosts: {shape}: nothing to share, the direct route ({rows})")
        return
    d = info["rows_between_hosts_direct"]
    get_logger().info(f"--halo-route hosts: {shape}; {rows} (direct: {d:,}, "
                      f"{info['rows_between_hosts'] / max(d, 1):.2f}x)")


def _label_split(cfg, train, y, ids, epoch: int, n_train: float):
    """``(nodes the loss is taken on, labels fed to the input (-1 = none), loss divisor)``. With
    ``label_rate`` a share of the training nodes, drawn by (seed, epoch, global id), feeds its
    label in and the loss is on the rest (divided by their global count, so k ranks = 1)."""
    if cfg.label_rate <= 0:
        return train, None, n_train
    from graphdist.keyed import key32, keyed_bits
    draw = keyed_bits(ids, 1, key32(cfg.seed, epoch, 0x1AB))[:, 0]
    prop = train & (draw < int(cfg.label_rate * (1 << 32)) - (1 << 31))
    sup = train & ~prop
    denom = float(comm.all_reduce_sum(sup.sum().double().reshape(1))[0])
    return sup, torch.where(prop, y, -1), max(denom, 1.0)


def _best(val: list[float]) -> int:
    best, bv = 0, -1.0
    for i, v in enumerate(val):
        if v == v and v > bv:  # first epoch with the highest validation accuracy
            best, bv = i, v
    return best


def _early_stop(val: list[float], patience: int) -> bool:
    return patience > 0 and len(val) - 1 - _best(val) >= patience




__all__ = ["GCNConfig", "train", "fit"]
