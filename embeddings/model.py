"""DLRM / DCNv2 built from torchrec modules, with a world-size independent initialisation.

    dense [B, 13] ──► DenseArch (MLP) ──► [B, D] ─┐
                                                  ├─► interaction (dot | DCNv2) ──► OverArch ──► logit [B]
    KJT (26 keys) ──► EmbeddingBagCollection ──► [B, 26, D]

Every embedding table ``t_<i>`` serves feature ``f_<i>`` (one table per Criteo column).
Embedding rows are initialised from :func:`init_rows`, which draws row blocks of
``INIT_BLOCK_ROWS`` rows from a generator seeded by ``(seed, table, block)``; a shard can therefore
fill exactly its own rows (and columns) and the sharded model starts from the same weights as an
unsharded one at any world size. Dense layers use ``torch.manual_seed(seed)`` before they are
built, which is the same on every rank.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn

INIT_BLOCK_ROWS = 4096


@dataclass
class ModelConfig:
    """Shape of the recommendation model."""

    arch: Literal["dlrm", "dcn"] = "dlrm"
    """dlrm (pairwise dot interaction) or dcn (DCNv2 low-rank cross network)"""
    embedding_dim: int = 16
    """width D of every embedding table (DLRM needs one D; the dense arch ends in D)"""
    dense_arch: list[int] = field(default_factory=lambda: [64, 32])
    """hidden sizes of the bottom MLP over the dense features (a layer of D is appended)"""
    over_arch: list[int] = field(default_factory=lambda: [64, 32])
    """hidden sizes of the top MLP (the 1-unit logit layer is appended)"""
    dcn_layers: int = 2
    """cross layers with --arch dcn"""
    dcn_low_rank: int = 16
    """low-rank dimension of each DCNv2 cross layer"""


def table_name(i: int) -> str:
    return f"t_{i}"


def feature_name(i: int) -> str:
    return f"f_{i}"


def table_configs(num_embeddings: list[int], dim: int):
    import torchrec
    return [torchrec.EmbeddingBagConfig(name=table_name(i), embedding_dim=dim, num_embeddings=int(n),
                                        feature_names=[feature_name(i)],
                                        pooling=torchrec.PoolingType.SUM)
            for i, n in enumerate(num_embeddings)]


def build_model(cfg: ModelConfig, num_dense: int, num_embeddings: list[int], seed: int,
                ebc_device: str | torch.device = "cpu") -> nn.Module:
    """The DLRM (or DLRM_DCN) module; embedding tables are on ``ebc_device`` (``meta`` to shard).

    With ``ebc_device='cpu'`` the tables are filled by :func:`init_rows` (the unsharded reference).
    """
    import torchrec
    from torchrec.models.dlrm import DLRM, DLRM_DCN
    if cfg.arch not in ("dlrm", "dcn"):
        from graphdist.errors import ConfigError
        raise ConfigError(f"--arch must be dlrm or dcn, got {cfg.arch!r}")
    ebc = torchrec.EmbeddingBagCollection(tables=table_configs(num_embeddings, cfg.embedding_dim),
                                          device=torch.device(ebc_device))
    torch.manual_seed(seed)
    dense_sizes = list(cfg.dense_arch) + [cfg.embedding_dim]
    over_sizes = list(cfg.over_arch) + [1]
    if cfg.arch == "dlrm":
        model = DLRM(embedding_bag_collection=ebc, dense_in_features=num_dense,
                     dense_arch_layer_sizes=dense_sizes, over_arch_layer_sizes=over_sizes,
                     dense_device=torch.device("cpu"))
    else:
        model = DLRM_DCN(embedding_bag_collection=ebc, dense_in_features=num_dense,
                         dense_arch_layer_sizes=dense_sizes, over_arch_layer_sizes=over_sizes,
                         dcn_num_layers=cfg.dcn_layers, dcn_low_rank_dim=cfg.dcn_low_rank,
                         dense_device=torch.device("cpu"))
    if torch.device(ebc_device).type != "meta":
        with torch.no_grad():
            for i, n in enumerate(num_embeddings):
                w = ebc.embedding_bags[table_name(i)].weight
                w.copy_(init_rows(seed, i, n, cfg.embedding_dim, 0, n, 0, cfg.embedding_dim))
    return model


def init_rows(seed: int, table: int, num_rows: int, dim: int, row0: int, row1: int,
              col0: int, col1: int) -> torch.Tensor:
    """Initial values of rows ``[row0, row1)`` and columns ``[col0, col1)`` of table ``table``.

    Uniform(-1/sqrt(num_rows), 1/sqrt(num_rows)) as torchrec's default, drawn block by block::

        block b = rows [b*4096, (b+1)*4096)  <- torch.Generator seeded (seed, table, b), full width
    """
    bound = 1.0 / math.sqrt(max(num_rows, 1))
    out = torch.empty(row1 - row0, col1 - col0)
    if row1 <= row0:
        return out
    b0, b1 = row0 // INIT_BLOCK_ROWS, (row1 - 1) // INIT_BLOCK_ROWS
    for b in range(b0, b1 + 1):
        lo = b * INIT_BLOCK_ROWS
        hi = min(lo + INIT_BLOCK_ROWS, num_rows)
        g = torch.Generator().manual_seed(((seed * 1_000_003 + table) * 1_000_003 + b) % (2 ** 63))
        block = torch.rand(hi - lo, dim, generator=g) * (2 * bound) - bound
        s0, s1 = max(row0, lo), min(row1, hi)
        out[s0 - row0:s1 - row0] = block[s0 - lo:s1 - lo, col0:col1]
    return out


class LossWrapper(nn.Module):
    """``forward(batch) -> (loss, (loss, logits, labels))`` as torchrec's train pipelines expect.

    The loss is the mean BCE over this rank's slice of the global batch; with equal slices the
    average over ranks (DDP for dense layers, torchrec's gradient division for sharded tables)
    is exactly the global-batch mean.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch):
        logits = self.model(batch.dense_features, batch.sparse_features).squeeze(-1)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, batch.labels)
        return loss, (loss.detach(), logits.detach(), batch.labels)
