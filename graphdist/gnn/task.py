"""One ``train-gcn`` epoch on a rank (:class:`GCNTask`, run by :func:`graphdist.loop.run_loop`)::

    train:  logits = net.train_pass(epoch)                     [n_own, C]
            loss   = sum over owned train nodes of CE / N_train(global)   (sum over ranks = 1-device loss)
            backward (halo grads go home), all-reduce weight grads, Adam step
    eval:   no dropout forward, 32-bit halo rows unless --eval-halo-bits; (loss_sum, correct
            train/val/test) all-reduced in one tensor

and what the loop keeps of it: the history (losses, accuracies, epoch times, the halo traffic of
an epoch, ``--halo auto``'s widths), the state (weights, Adam, held stale rows), resharding.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.profiler import record_function

from graphdist import comm
from graphdist.exchange.stale import STALE_RESHARD
from graphdist.loop import Task
from graphdist.log import get_logger
from graphdist.timer import Timer

__all__ = ["GCNTask", "best_epoch"]


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
                with record_function("graphdist.train"):  # named ranges in a torch.profiler record
                    tm, labels_in, denom = _label_split(cfg, masks[0], y, self.ids, epoch, self.n_train)
                    out = net.train_pass(epoch, labels_in)
                    loss = F.cross_entropy(out[tm], y[tm], reduction="sum") / denom
                    loss.backward()
                net.sync_grads()
                self.opt.step()
                model.eval()
                with torch.no_grad(), record_function("graphdist.eval"):
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
        return early_stop(self.history["val_acc"], self.cfg.patience)

    def state(self) -> dict:
        """Weights and Adam state (replicated: stored once). Dropout is keyed by (seed, epoch,
        layer, node), so no RNG state is needed to resume exactly."""
        msd, osd = self.model.state_dict(), self.opt.state_dict(self._names())
        st = getattr(self.net, "stale", None)
        stale = st.state(comm.world()[0]) if st is not None and self.held_rows else {}
        return {"model": msd, "optim": osd, **stale}  # stale halo rows: per rank

    def _names(self) -> dict:
        return {p: n for n, p in self.model.named_parameters()}

    def scalars(self) -> dict:
        rb = self.history.get("halo_rows_bytes")  # fixed by the plan: rows, bytes per epoch
        return {"comm/halo_bytes_per_epoch": rb[1]} if rb else {}

    def resharded(self, was: dict) -> None:
        for k in ("halo_rows_bytes", "halo_rows_bytes_sum", "halo_host_bytes"):  # the old partition's traffic
            self.history.pop(k, None)

    def loaded(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optim"], self._names())
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


def best_epoch(val: list[float]) -> int:
    """The first epoch (from 0) with the highest validation accuracy; where none was measured (no
    validation rows: every value nan), the last epoch, whose model the run ends with: never the
    first, and early stopping never fires."""
    best, bv = max(len(val) - 1, 0), -1.0
    for i, v in enumerate(val):
        if v == v and v > bv:
            best, bv = i, v
    return best


def early_stop(val: list[float], patience: int) -> bool:
    return patience > 0 and len(val) - 1 - best_epoch(val) >= patience
