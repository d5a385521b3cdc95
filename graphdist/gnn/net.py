"""The distributed model a ``train-gcn`` rank trains: graphdist's own GCN / SAGE with its
adjacency and exchangers (:class:`BuiltinNet`), or a PyG model run through
:mod:`graphdist.gnn.pyg` (:class:`graphdist.gnn.pyg.net.PygNet`); :func:`build_net` makes the one
the decisions call for. Both give the epoch (:class:`graphdist.gnn.task.GCNTask`) the same face:
``train_pass``, ``eval_pass``, ``sync_grads``, ``param_groups``, ``exchangers``, ``traffic``,
``halo_layers``."""
from __future__ import annotations

import torch

from graphdist import comm
from graphdist.exchange.boundary import BoundarySampler
from graphdist.exchange.exchanger import HaloExchanger
from graphdist.exchange.link import Link
from graphdist.exchange.resident import ResidentHalo
from graphdist.exchange.route import gather_route
from graphdist.exchange.rounds import in_rounds
from graphdist.exchange.spmm import SparseAdj
from graphdist.exchange.stale import Staleness
from graphdist.gnn.config import BUILTIN_MODELS
from graphdist.gnn.models import GNN
from graphdist.runtime import get_logger

__all__ = ["BuiltinNet", "build_net"]


def build_net(cfg, dec, lg, x, ids, n_classes: int, dev):
    """The net ``dec`` (:class:`graphdist.gnn.decide.Decisions`) calls for, on this rank's part
    ``lg`` with input rows ``x`` (on ``dev``) of global ids ``ids``."""
    if cfg.model in BUILTIN_MODELS:
        return BuiltinNet(cfg, lg, x, ids, n_classes, dev, separate_eval=dec["eval_exchange"] == "own",
                          held=dec["input_halo"] == "resident")
    from graphdist.gnn.pyg.net import PygNet
    return PygNet(cfg, lg, x, n_classes, dev)


class BuiltinNet:
    """graphdist's own GCN / SAGE (:class:`~graphdist.gnn.models.GNN`) with its adjacency and
    exchangers: what :class:`GCNTask` calls (``gnn/pyg/net.py`` gives a PyG model the same face)."""

    def __init__(self, cfg, lg, x, ids, n_classes: int, dev, separate_eval: bool = False, held: bool = False):
        """``cfg`` as decided (:meth:`graphdist.gnn.decide.Decisions.applied`); ``separate_eval``:
        evaluation gets an exchanger of its own although its width is the training's; ``held``:
        the input's halo rows are received once and held."""
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
        self.ex_eval = self.ex if not separate_eval else \
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
