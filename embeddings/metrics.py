"""Click-prediction metrics over the whole eval set (after gathering every rank's predictions).

AUC is torchmetrics' ``binary_auroc`` (ties get half credit, the Mann-Whitney definition);
normalised entropy is torchrec's ``compute_ne`` (the eval-set cross entropy over the entropy of
its click rate, as torchrec's NE metric); log loss is the mean binary cross entropy in nats.
A test checks all three against hand-counted values.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["auc", "logloss", "normalized_entropy", "click_metrics"]

_ETA = 1e-12


def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.asarray(a, dtype=np.float64)).reshape(-1)


def auc(labels, scores) -> float:
    """ROC AUC; ``nan`` when one class is missing."""
    from torchmetrics.functional.classification import binary_auroc
    y = _t(labels)
    if y.numel() == 0 or bool((y == y[0]).all()):
        return float("nan")
    return float(binary_auroc(_t(scores), y.long()))


def logloss(labels, probs) -> float:
    """Mean binary cross entropy (nats) of probabilities ``probs``."""
    p = _t(probs).clamp(_ETA, 1 - _ETA)
    return float(torch.nn.functional.binary_cross_entropy(p, _t(labels)))


def normalized_entropy(labels, probs) -> float:
    """Log loss divided by the entropy of the eval set's click rate (NE < 1 beats the mean)."""
    from torchrec.metrics.ne import compute_cross_entropy, compute_ne
    y, p = _t(labels), _t(probs)
    w = torch.ones_like(y)
    ce = compute_cross_entropy(y, p, w, _ETA).sum()
    pos = (y * w).sum()
    return float(compute_ne(ce, w.sum(), pos, w.sum() - pos, _ETA))


def click_metrics(labels, logits) -> dict:
    probs = torch.sigmoid(_t(logits))
    n = int(np.asarray(labels).size)
    return {"auc": auc(labels, logits), "logloss": logloss(labels, probs),
            "ne": normalized_entropy(labels, probs), "eval_samples": n,
            "eval_click_rate": float(np.mean(labels)) if n else float("nan")}
