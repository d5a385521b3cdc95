"""Click-log data as arrays, and the per-rank ``(dense, KeyedJaggedTensor, labels)`` batches.

A :class:`ClickData` holds N samples (arrays may be ``np.memmap`` over the binary cache)::

    dense   [N, 13]     float32   log(1 + max(x, 0)) of the integer features (missing = 0)
    cat     [N, 26, H]  int64/u32 raw categorical ids (hashed into a table by ``% num_embeddings[f]``)
    lengths [N, 26]     int64     ids per (sample, feature), <= H  (None: every bag has H ids)
    labels  [N]         float32   click 0/1

Global batch g (rows ``[s, s + B)``) is split evenly: rank r takes rows
``[s + r*B/W, s + (r+1)*B/W)``, so the math of a step does not depend on the world size.
Its KeyedJaggedTensor is feature-major, as torchrec expects::

    keys    f_0 .. f_25
    lengths [f_0: b lengths | f_1: b lengths | ... ]   (26 * b)
    values  [f_0 ids of sample 0..b-1 | f_1 ids ... ]
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from graphdist.errors import ConfigError, DataFormatError

NUM_DENSE = 13
NUM_SPARSE = 26


@dataclass
class ClickData:
    """Arrays of one split (train or eval); see the module docstring for the layout."""

    dense: np.ndarray
    """[N, 13] float32, already log-transformed."""
    cat: np.ndarray
    """[N, 26, H] raw non-negative ids."""
    labels: np.ndarray
    """[N] labels (0/1)."""
    num_embeddings: list[int]
    """Rows of each of the 26 tables; raw ids are hashed with ``% num_embeddings[f]``."""
    lengths: np.ndarray | None = None
    """[N, 26] ids per bag (multi-hot), or None when every bag holds exactly H ids."""
    bad_lines: int = 0
    """Lines skipped by ``--skip-bad-lines`` while reading the source."""
    columns: dict | None = None
    """A ``clicks:`` log's columns: ``{"label": name, "dense": [names], "sparse": [names]}``; None
    for Criteo's."""

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def summary(self) -> dict:
        """Sizes for ``graphdist data info``."""
        n = len(self)
        ids = (float(np.asarray(self.lengths).sum(1).mean()) if self.lengths is not None
               else float(self.cat.shape[1] * self.cat.shape[2]))
        return {"rows": n, "click_rate": float(np.mean(self.labels)) if n else 0.0,
                "dense_features": int(self.dense.shape[1]), "sparse_features": int(self.cat.shape[1]),
                "table_rows": [int(x) for x in self.num_embeddings], "ids_per_sample": ids,
                "bad_lines": int(self.bad_lines),
                **({"columns": self.columns} if self.columns else {})}

    def slice(self, a: int, b: int) -> "ClickData":
        return ClickData(self.dense[a:b], self.cat[a:b], self.labels[a:b], self.num_embeddings,
                         None if self.lengths is None else self.lengths[a:b], self.bad_lines, self.columns)


try:  # torchrec's pipelineable Batch (has .to / .pin_memory / .record_stream for the pipeline)
    from torchrec.datasets.utils import Batch as _TRBatch
except Exception:  # pragma: no cover - torchrec missing
    _TRBatch = None


if _TRBatch is not None:
    class Batch(_TRBatch):
        """``(dense, KeyedJaggedTensor, labels)``; unpacks like a tuple."""

        def __iter__(self):
            return iter((self.dense_features, self.sparse_features, self.labels))

        def to(self, device, non_blocking=False):
            b = super().to(device, non_blocking=non_blocking)
            return Batch(b.dense_features, b.sparse_features, b.labels)

        def pin_memory(self):
            b = super().pin_memory()
            return Batch(b.dense_features, b.sparse_features, b.labels)


def make_batch(data: ClickData, start: int, global_batch: int, rank: int, world_size: int,
               pad_to: int | None = None) -> tuple["Batch", int]:
    """Rank ``rank``'s slice of the global batch starting at row ``start``.

    Returns ``(batch, n_real)``. With ``pad_to``, a short slice (end of the eval set) is padded
    by repeating its first row (or row 0) up to ``pad_to`` samples; only ``n_real`` are real.
    """
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    if global_batch % world_size:
        raise ConfigError(f"--batch-size {global_batch} is not divisible by the world size {world_size}")
    b = global_batch // world_size
    lo = min(start + rank * b, len(data))
    hi = min(lo + b, start + global_batch, len(data))
    idx = np.arange(lo, hi)
    n_real = len(idx)
    if pad_to is not None and n_real < pad_to:
        idx = np.concatenate([idx, np.full(pad_to - n_real, lo if n_real else 0)])
    dense = torch.from_numpy(np.ascontiguousarray(data.dense[idx], dtype=np.float32))
    labels = torch.from_numpy(np.ascontiguousarray(data.labels[idx], dtype=np.float32))
    cat = np.asarray(data.cat[idx]).astype(np.int64, copy=False)  # [n, 26, H]
    n, F, H = cat.shape
    cat = cat % np.asarray(data.num_embeddings, dtype=np.int64)[None, :, None]
    if data.lengths is None:
        lengths = np.full((F, n), H, dtype=np.int64)
        values = cat.transpose(1, 0, 2).reshape(-1)
    else:
        lens = np.asarray(data.lengths[idx], dtype=np.int64)  # [n, 26]
        lengths = lens.T.copy()
        keep = np.arange(H)[None, None, :] < lens.T[:, :, None]
        values = cat.transpose(1, 0, 2)[keep]
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=[f"f_{i}" for i in range(F)], values=torch.from_numpy(np.ascontiguousarray(values)),
        lengths=torch.from_numpy(lengths.reshape(-1)))
    return Batch(dense, kjt, labels), n_real


ID_STATS_ROWS = 50_000
"""Rows :func:`id_stats` reads (from the start of the split)."""


def id_stats(data: ClickData, max_rows: int = ID_STATS_ROWS):
    """:class:`~embeddings.sharding.IdStats` from the first ``max_rows`` samples."""
    from embeddings.sharding import IdStats
    n = min(len(data), max_rows)
    cat = np.asarray(data.cat[:n]).astype(np.int64) % np.asarray(data.num_embeddings)[None, :, None]
    F, H = cat.shape[1], cat.shape[2]
    if data.lengths is None:
        pooling = [float(H)] * F
        ids = [cat[:, f, :].reshape(-1) for f in range(F)]
    else:
        lens = np.asarray(data.lengths[:n])
        pooling = [float(lens[:, f].mean()) if n else 0.0 for f in range(F)]
        keep = np.arange(H)[None, :] < lens[:, :, None] if n else None
        ids = [cat[:, f, :][keep[:, f, :]] if n else np.zeros(0, np.int64) for f in range(F)]
    return IdStats(pooling, ids)


def load_click_data(spec: str, *, num_embeddings_per_feature: list[int] | None = None,
                    num_embeddings_cap: int | None = None, skip_bad_lines: bool = False,
                    cache_dir: str | None = None) -> ClickData:
    """Load ``criteo:PATH`` or ``criteo-synth:...`` (all rows, before the train/eval split);
    specs are parsed by :mod:`graphdist.specs` (domain ``clicks``)."""
    from graphdist.specs import parse_spec
    s = parse_spec(spec, "clicks")
    hashed = s.kind.name in ("criteo", "clicks")
    data = s.load(skip_bad_lines=skip_bad_lines, cache_dir=cache_dir) if hashed else s.load()
    n_sparse = len(data.num_embeddings)
    if num_embeddings_per_feature:
        if len(num_embeddings_per_feature) != n_sparse:
            raise ConfigError(f"--num-embeddings-per-feature needs {n_sparse} values (one per id feature of "
                              f"{spec}), got {len(num_embeddings_per_feature)}")
        data.num_embeddings = [int(x) for x in num_embeddings_per_feature]
    if num_embeddings_cap and hashed:
        data.num_embeddings = [int(num_embeddings_cap)] * n_sparse  # hashed ids: the cap is the size
    elif num_embeddings_cap:
        data.num_embeddings = [min(int(n), int(num_embeddings_cap)) for n in data.num_embeddings]
    if any(n < 1 for n in data.num_embeddings):
        raise ConfigError(f"table sizes must be >= 1, got {data.num_embeddings}")
    if len(data) == 0:
        raise DataFormatError(spec, "no data rows")
    return data


def split_eval(data: ClickData, fraction: float) -> tuple[ClickData, ClickData]:
    """Hold out the last ``fraction`` of the rows."""
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"--eval-fraction must be in (0, 1), got {fraction}")
    n = len(data)
    n_eval = int(np.ceil(fraction * n))
    if n_eval >= n or n_eval == 0:
        raise ConfigError(f"--eval-fraction {fraction} of {n} rows leaves an empty train or eval split")
    return data.slice(0, n - n_eval), data.slice(n - n_eval, n)
