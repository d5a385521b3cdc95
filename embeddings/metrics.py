"""Click-prediction metrics over the whole eval set (after gathering every rank's predictions)."""
from __future__ import annotations

import numpy as np


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC by the rank-sum (Mann-Whitney) formula; tied scores get their average rank."""
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    pos = float(y.sum())
    neg = float(y.size - pos)
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ss = s[order]
    ranks = np.empty(s.size, dtype=np.float64)
    # average rank of each run of equal scores (1-based)
    starts = np.r_[0, np.flatnonzero(np.diff(ss)) + 1]
    ends = np.r_[starts[1:], ss.size]
    avg = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(avg, ends - starts)
    return float((ranks[y > 0.5].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def logloss(labels: np.ndarray, probs: np.ndarray, eps: float = 1e-12) -> float:
    y = np.asarray(labels, dtype=np.float64)
    p = np.clip(np.asarray(probs, dtype=np.float64), eps, 1 - eps)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


def normalized_entropy(labels: np.ndarray, probs: np.ndarray) -> float:
    """Log loss divided by the entropy of the base click rate (NE < 1 beats predicting the mean)."""
    y = np.asarray(labels, dtype=np.float64)
    p = float(np.clip(y.mean(), 1e-12, 1 - 1e-12))
    h = -(p * np.log(p) + (1 - p) * np.log(1 - p))
    return logloss(labels, probs) / h


def click_metrics(labels: np.ndarray, logits: np.ndarray) -> dict:
    probs = 1.0 / (1.0 + np.exp(-np.asarray(logits, dtype=np.float64)))
    return {"auc": auc(labels, logits), "logloss": logloss(labels, probs),
            "ne": normalized_entropy(labels, probs), "eval_samples": int(np.asarray(labels).size),
            "eval_click_rate": float(np.mean(labels)) if np.asarray(labels).size else float("nan")}
