"""``criteo-synth:`` Criteo-shaped synthetic click logs with a planted click model.

    criteo-synth:rows=100000,scale=0.01,alpha=1.1,pooling=1,seed=0,shuffle_labels=0

* 13 dense features: integer counts ``floor(expm1(|N(mu_j, 1)|))``, fed as ``log1p`` (as Criteo).
* 26 sparse features with the Criteo Kaggle cardinalities times ``scale`` (at least 4 rows):
  ids drawn from a Zipf law of exponent ``alpha`` over popularity ranks, mapped to rows by a
  random permutation per feature (hashed ids are spread over the table, hot ids are not row 0).
* ``pooling=P > 1``: multi-hot, bag sizes uniform in 1..P, ids drawn independently.
* Labels: ``click ~ Bernoulli(sigmoid(logit))`` with

      logit = b + sum_j a_j z_j + sum_f e_f[id_f] (mean over the bag) + g * e_0[id_0] * e_1[id_1]

  (all times ``SIGNAL`` = 0.4), ``z`` the standardised log-dense features, ``e_f[k] ~ N(0, s_f^2)`` a per-row effect, larger
  for the small tables; ``b`` gives a click rate of about 25 % (Criteo: 25.6 %).
  ``shuffle_labels=1`` permutes the labels across rows (no signal left: AUC ~ 0.5).
"""
from __future__ import annotations

import numpy as np

from embeddings.data import NUM_DENSE, NUM_SPARSE, ClickData

KAGGLE_CARDINALITIES = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
                        3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105,
                        142572]
"""Distinct values per categorical column of the Criteo Kaggle (Display Advertising Challenge) set."""

SIGNAL = 0.4
"""Scale of the planted logit: the true model's AUC is about 0.87 (a trained DLRM gets close)."""

def cardinalities(scale: float) -> list[int]:
    return [max(4, int(round(c * scale))) for c in KAGGLE_CARDINALITIES]


def _zipf_ids(rng: np.random.Generator, card: int, alpha: float, shape) -> np.ndarray:
    """Zipf(alpha) popularity ranks in [0, card) mapped through a random permutation."""
    w = 1.0 / np.arange(1, card + 1, dtype=np.float64) ** alpha
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    ranks = np.searchsorted(cdf, rng.random(shape), side="right")
    np.minimum(ranks, card - 1, out=ranks)
    perm = rng.permutation(card)
    return perm[ranks]


def generate(rows: int = 100_000, scale: float = 0.01, alpha: float = 1.1, pooling: int = 1,
             seed: int = 0, shuffle_labels: int = 0) -> ClickData:
    """Build the whole data set in memory (deterministic in ``seed``); the spec
    ``criteo-synth:k=v,...`` (:mod:`graphdist.specs`) passes its options here."""
    n, P, seed = int(rows), max(1, int(pooling)), int(seed)
    if n < 1:
        from graphdist.errors import SpecError
        raise SpecError(f"criteo-synth: rows must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    cards = cardinalities(float(scale))
    # model parameters first, so they do not depend on the number of rows
    mu = rng.uniform(0.5, 3.0, NUM_DENSE)
    coef = rng.normal(0.0, 1.0, NUM_DENSE) * 0.45
    eff_scale = [1.1 if c <= 1000 else 0.8 if c <= 100_000 else 0.6 for c in cards]
    effects = [rng.normal(0.0, s, c).astype(np.float32) for s, c in zip(eff_scale, cards)]
    inter = 0.8
    # features
    raw = np.floor(np.expm1(np.abs(rng.normal(mu, 1.0, (n, NUM_DENSE)))))
    dense = np.log1p(raw).astype(np.float32)
    z = (dense - dense.mean(0)) / (dense.std(0) + 1e-6)
    cat = np.empty((n, NUM_SPARSE, P), dtype=np.int64)
    lengths = rng.integers(1, P + 1, (n, NUM_SPARSE)) if P > 1 else None
    logit = z @ coef
    for f, c in enumerate(cards):
        cat[:, f, :] = _zipf_ids(rng, c, float(alpha), (n, P))
        e = effects[f][cat[:, f, :]]
        if lengths is not None:
            e = np.where(np.arange(P)[None, :] < lengths[:, f:f + 1], e, 0.0).sum(1) / lengths[:, f]
        else:
            e = e[:, 0]
        logit += e
        if f == 0:
            e0 = e
        if f == 1:
            logit += inter * e0 * e
    logit = SIGNAL * logit
    logit = logit - np.quantile(logit, 0.8)  # ~26 % clicks after the Bernoulli draw
    labels = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    if int(shuffle_labels):
        labels = np.random.default_rng(seed + 7919).permutation(labels)
    return ClickData(dense=dense, cat=cat, labels=labels, num_embeddings=list(cards), lengths=lengths)


def write_tsv(data: ClickData, path: str) -> None:
    """Write single-hot ``data`` as a Criteo-format TSV (label, 13 ints, 26 8-hex-digit ids).

    Dense values are written back as integers ``round(expm1(x))``; ids as lower-case hex.
    Used to produce labelled-synthetic Criteo-format files for the parsing and 80/20 checks.
    """
    import os
    ints = np.rint(np.expm1(np.asarray(data.dense, dtype=np.float64))).astype(np.int64)
    cat = np.asarray(data.cat)[:, :, 0]
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        for i in range(len(data)):
            fh.write("\t".join([str(int(data.labels[i])), *map(str, ints[i]),
                                *(format(int(v), "08x") for v in cat[i])]) + "\n")
    os.replace(tmp, path)
