"""Data-parallel weights and whole-graph metrics for a training loop over parts.

Every rank holds the whole model and its own nodes' loss terms. With the loss divided by the
*global* number of labelled nodes (:func:`cross_entropy`), the gradient of the whole graph's
loss is the sum of the ranks' gradients (:func:`sync_grads`), so an optimiser step on every
rank gives every rank the weights one process would have.
"""
from __future__ import annotations

import logging
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

from graphdist import comm
from graphdist.gnn.pyg.splits import check_split

__all__ = ["sync_grads", "all_sum", "cross_entropy", "nll_loss", "accuracy", "main", "install_excepthook"]


def sync_grads(model: nn.Module) -> None:
    """Sum every parameter's gradient over the ranks (one flat all-reduce). A parameter with no
    gradient on this rank counts as zeros, so every rank sends the same layout. On a distributed
    model, compare the ranks' weights when due (:mod:`graphdist.gnn.pyg.sync`): one line naming
    the first parameter that differs."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    comm.all_reduce_grads(params)
    from graphdist.gnn.pyg.sync import guard_of
    guard = guard_of(model) or next((g for g in map(guard_of, model.modules()) if g is not None), None)
    if guard is not None:  # the weights check, when due (first step, after a reset or a load, every N)
        guard.step(model)


def all_sum(t: torch.Tensor) -> torch.Tensor:
    """The sum of ``t`` over the ranks (a detached copy; ``t`` is unchanged)."""
    return comm.all_reduce_sum(t.detach().clone())


def cross_entropy(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
    """The whole graph's mean cross-entropy over the ``mask`` nodes (all owned rows if None).

    Its value is the whole graph's loss on every rank; its gradient is this rank's share
    (``sum over owned masked rows / global count``), which :func:`sync_grads` adds up. ``kwargs``
    go to ``F.cross_entropy`` (e.g. ``label_smoothing``; not ``reduction``)."""
    return _global_mean(F.cross_entropy, logits, y, mask, **kwargs)


def nll_loss(log_probs: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
    """The whole graph's mean ``F.nll_loss`` over the ``mask`` nodes (a model that ends in
    ``log_softmax``), as :func:`cross_entropy`: the whole graph's value, this rank's gradient."""
    return _global_mean(F.nll_loss, log_probs, y, mask, **kwargs)


def _check_mask(mask, rows: int, what: str) -> None:
    """A boolean mask has one entry per owned row; one over the whole graph's nodes (PyG's
    ``index_to_mask(idx, size=data.num_nodes)`` on a part, whose ``num_nodes`` is the graph's) is
    refused in one line, not by torch's IndexError on every rank."""
    if mask is None or not torch.is_tensor(mask) or mask.dtype != torch.bool or mask.shape[0] == rows:
        return
    from graphdist.errors import ConfigError
    raise ConfigError(f"{what}: the mask has {mask.shape[0]} entries, this rank's part {rows} owned rows; a mask is "
                      "per owned row: a whole-graph mask is mask[part.node_ids], and a split drawn on the part "
                      "(index_to_mask(..., size=data.num_nodes)) would be drawn per rank anyway: draw it once "
                      "with gd.random_split(part, ...)")


def _global_mean(fn, logits, y, mask, **kwargs) -> torch.Tensor:
    _check_mask(mask, logits.shape[0], f"gd.{'nll_loss' if fn is F.nll_loss else 'cross_entropy'}")
    check_split(mask, y)
    if mask is not None:
        logits, y = logits[mask], y[mask]
    local = fn(logits, y, reduction="sum", **kwargs)
    tot = all_sum(torch.stack([local.detach().double(), torch.tensor(float(y.shape[0]), dtype=torch.float64,
                                                                     device=local.device)]))
    n = max(float(tot[1]), 1.0)
    rest = (tot[0] - local.detach().double()).to(local.dtype)  # the other ranks' terms: value only
    return (local + rest) / n


def accuracy(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Share of the ``mask`` nodes of the whole graph whose arg-max class is their label."""
    _check_mask(mask, logits.shape[0], "gd.accuracy")
    check_split(mask, y)
    ok = logits.argmax(-1) == y
    if mask is not None:
        ok = ok[mask]
    t = all_sum(torch.tensor([float(ok.sum()), float(ok.numel())], dtype=torch.float64, device=logits.device))
    return float(t[0] / t[1]) if t[1] > 0 else float("nan")


def main(fn, *args) -> None:
    """Run ``fn(*args)`` with graphdist's error policy and exit: a user error (a refused layer, a
    bad spec) prints one line and exits with code 2, a bug keeps its traceback (exit 1). The
    process leaves without interpreter finalisation, so gloo's thread teardown cannot abort a
    finished rank."""
    from graphdist.launch import guarded
    code = guarded(fn, *args)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _one_line_hook(previous):
    def hook(tp, value, tb):
        from graphdist.errors import USER_ERRORS
        if not isinstance(value, USER_ERRORS):
            return previous(tp, value, tb)
        from graphdist import failures
        from graphdist.launch import print_error
        failures.publish_error(str(value))
        print_error(value)  # rank 0 only for an error every rank shares
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(2)
    hook._graphdist = True
    return hook


def install_excepthook() -> None:
    """A graphdist user error that ends a script (one not run through :func:`main`) prints one
    line (rank 0's, for an error every rank shares) and exits with code 2, as :func:`main` does,
    instead of a traceback per rank. :func:`~graphdist.gnn.pyg.load_part` installs it; other
    exceptions keep their tracebacks."""
    if not getattr(sys.excepthook, "_graphdist", False):
        sys.excepthook = _one_line_hook(sys.excepthook)
