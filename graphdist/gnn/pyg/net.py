"""A PyG model in ``train-gcn``'s epoch (:class:`graphdist.gnn.task.GCNTask`): ``--model
gat|gatv2|gin|gcn2|sage-max|transformer|MODULE:CLASS``.

The model (:mod:`graphdist.gnn.pyg.models`) is built on every rank from ``--seed``, distributed
(:func:`~graphdist.gnn.pyg.wrap.distribute`: ``--halo``, ``--halo-bits``, ``--eval-halo-bits``;
rank 0's weights) and called as ``model(x, part.edge_index[, drop=...])`` on the owned rows.
The trainer sees the same small interface as graphdist's own GCN (``graphdist.gnn.net.BuiltinNet``).
"""
from __future__ import annotations

import torch

from graphdist.errors import ConfigError
from graphdist.gnn.pyg import report
from graphdist.gnn.pyg.models import KeyedDropout, build_model, takes_drop
from graphdist.gnn.pyg.part import Part
from graphdist.gnn.pyg.train import sync_grads
from graphdist.gnn.pyg.wrap import distribute
from graphdist.keyed import key32

__all__ = ["PygNet"]


class PygNet:
    """One rank's distributed PyG model with its inputs: what the trainer's epoch calls."""

    def __init__(self, cfg, lg, x: torch.Tensor, n_classes: int, device):
        self.cfg, self.x = cfg, x
        self.part = Part.from_local_graph(lg, device)
        torch.manual_seed(cfg.seed)
        model = build_model(cfg.model, x.shape[1], cfg.hidden, n_classes, cfg.layers, cfg.dropout).to(device)
        self.model = distribute(model, self.part, halo=cfg.halo, bits=cfg.halo_bits, seed=cfg.seed,
                                eval_bits=cfg.eval_halo_bits)
        if report.num_layers(model) == 0:
            raise ConfigError(f"--model {cfg.model}: the model has no message-passing layer (a PyG "
                              "MessagePassing module), so it never reads a neighbour")
        self.drop = KeyedDropout(self.part.node_ids, cfg.seed) if takes_drop(model) else None
        self.n_classes = n_classes
        self.rank = self.part.rank

    # ------------------------------------------------------------------ what the epoch calls
    def param_groups(self, weight_decay: float, first_layer_only: bool):
        groups = getattr(self.model, "param_groups", None)
        if callable(groups):
            return groups(weight_decay, first_layer_only)
        return [{"params": [p for p in self.model.parameters() if p.requires_grad], "weight_decay": weight_decay}]

    def exchangers(self):
        return report.exchangers(self.model)

    def measure(self, on: bool) -> None:
        for e in report.exchangers(self.model, training_only=True):
            e.measure_errors(on)

    def train_pass(self, epoch: int, labels=None) -> torch.Tensor:
        # a model's own torch dropout (without drop=): a stream per (seed, epoch, rank), so a
        # run and a resumed run draw the same masks
        torch.manual_seed(key32(self.cfg.seed, epoch, self.rank, 0xD0) & 0xFFFFFFFF)
        if self.drop is not None:
            self.drop.step = epoch
        return self._call()

    def eval_pass(self, labels=None) -> torch.Tensor:
        return self._call()

    def _call(self) -> torch.Tensor:
        p = self.part
        out = self.model(self.x, p.edge_index, drop=self.drop) if self.drop is not None else \
            self.model(self.x, p.edge_index)
        if not torch.is_tensor(out) or tuple(out.shape) != (p.num_owned, self.n_classes):
            got = tuple(out.shape) if torch.is_tensor(out) else type(out).__name__
            raise ConfigError(f"--model {self.cfg.model}: forward(x, edge_index) must return logits "
                              f"[{p.num_owned}, {self.n_classes}] (one row per node, one column per class), got {got}")
        return out

    def sync_grads(self) -> None:
        sync_grads(self.model)

    def traffic(self) -> list[int]:
        t = report.traffic(self.model)
        return [t["rows"], t["bytes"]]

    def error_sources(self):
        """``(exchangers, layers)`` whose quantisation errors the report gives per layer."""
        return report.exchangers(self.model, training_only=True), report.num_layers(self.model)

    def halo_layers(self) -> list[dict]:
        return report.halo_layers(self.model)
