"""Click-prediction metrics over the whole eval set (after gathering every rank's predictions).

AUC is the Mann-Whitney count, exact: the share of (clicked, not clicked) pairs whose scores are
in the right order, a tie counting half (what torchmetrics' ``binary_auroc`` computes from its ROC
curve), counted in integers over the distinct scores. Normalised entropy is torchrec's NE (the
eval-set cross entropy over the entropy of its click rate), the same float64 operations as
``torchrec.metrics.ne``. Log loss is the mean binary cross entropy in nats. Neither torchmetrics
nor torchrec's metrics are imported (with the plotting library torchmetrics loads, that cost each
evaluating process about a second); tests compare the first two with them on random data.
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
    """ROC AUC; ``nan`` when one class is missing.

    Over the distinct scores ``v`` in increasing order, each positive at ``v`` beats the
    negatives below ``v`` and ties those at ``v``::

        AUC = sum_v pos(v) * (2 * neg(< v) + neg(v)) / (2 * P * N)

    (integers until the one division, so the count is exact at any size)."""
    y = np.asarray(labels).reshape(-1) > 0
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    _, at = np.unique(s, return_inverse=True)
    pos = np.bincount(at[y], minlength=int(at.max()) + 1).astype(np.int64)
    neg = np.bincount(at[~y], minlength=pos.size).astype(np.int64)
    below = np.cumsum(neg) - neg
    twice = int(np.dot(pos, 2 * below + neg))  # < 2 * P * N: int64 holds it below 3e9 samples
    return twice / (2 * n_pos * n_neg)


def logloss(labels, probs) -> float:
    """Mean binary cross entropy (nats) of probabilities ``probs``."""
    p = _t(probs).clamp(_ETA, 1 - _ETA)
    return float(torch.nn.functional.binary_cross_entropy(p, _t(labels)))


def normalized_entropy(labels, probs) -> float:
    """Log loss divided by the entropy of the eval set's click rate (NE < 1 beats the mean):
    torchrec's NE (``torchrec.metrics.ne``: ``compute_cross_entropy`` and ``compute_ne`` with unit
    weights, in bits, probabilities and the click rate clamped to ``[eta, 1 - eta]``), the same
    float64 operations in the same order, without importing torchrec's metrics (which load
    torchmetrics); a test compares it with torchrec's."""
    y, p = _t(labels), _t(probs).clamp(_ETA, 1 - _ETA)
    ce = (-y * torch.log2(p) - (1.0 - y) * torch.log2(1.0 - p)).sum()
    n = torch.tensor(float(y.numel()), dtype=torch.float64)
    pos = y.sum()
    neg = n - pos
    mean = (pos / n.clamp(min=_ETA)).clamp(_ETA, 1 - _ETA)
    return float(ce / (-pos * torch.log2(mean) - neg * torch.log2(1.0 - mean)))


def metrics_text(auc_: float, logloss_: float, ne_: float, rows: int, click_rate: float, digits: int = 4) -> str:
    """``auc A  logloss L  ne N`` for a summary line; where the ``rows`` evaluated are all of one
    class (a small or filtered log), AUC and NE are undefined (AUC nan, NE a division by the
    near-zero entropy of a click rate of 0 or 1) and the line says so instead of printing them."""
    if rows and click_rate not in (0.0, 1.0):
        return f"auc {auc_:.{digits}f}  logloss {logloss_:.{digits}f}  ne {ne_:.{digits}f}"
    what = "no rows" if not rows else f"{rows:,} rows, all {'clicks' if click_rate == 1.0 else 'non-clicks'}"
    return (f"auc -  logloss {logloss_:.{digits}f}  ne -  (evaluated on {what}: AUC and NE need both "
            "clicks and non-clicks)")


def click_metrics(labels, logits) -> dict:
    probs = torch.sigmoid(_t(logits))
    n = int(np.asarray(labels).size)
    return {"auc": auc(labels, logits), "logloss": logloss(labels, probs),
            "ne": normalized_entropy(labels, probs), "eval_samples": n,
            "eval_click_rate": float(np.mean(labels)) if n else float("nan")}
