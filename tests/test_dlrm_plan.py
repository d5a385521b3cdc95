"""Plan report: per-table type/ranks, per-rank bytes, lookups and all-to-all bytes, hand-checked.

No process group needed: forced plans are built for an explicit world size.
"""
from __future__ import annotations

import numpy as np
import pytest

from embeddings.model import LossWrapper, ModelConfig, build_model
from embeddings.sharding import IdStats, build_plan, check_memory, describe_plan, format_plan
from graphdist.errors import ConfigError

ROWS = [8] * 24 + [100, 40]  # 26 tables
D = 8


def _plan(sharding, world=2, stats=None):
    m = LossWrapper(build_model(ModelConfig(embedding_dim=D, dense_arch=[8], over_arch=[8]), 13, ROWS,
                                seed=0, ebc_device="meta"))
    plan = build_plan(m, sharding, ROWS, D, world, world, "cpu", 8 // world, [1.0] * 26)
    stats = stats or IdStats([1.0] * 26, [np.arange(n) for n in ROWS])
    return describe_plan(plan, ROWS, D, world, 8, stats, "rowwise_adagrad")


def test_table_wise_numbers():
    d = _plan("table_wise")
    assert d["tables"]["t_0"] == {"type": "table_wise", "ranks": [0], "kernel": "dense", "rows": 8,
                                  "dim": D, "pooling": 1.0}
    assert d["tables"]["t_1"]["ranks"] == [1]
    r0 = d["ranks"][0]
    # rank 0 owns t_0, t_2, ..., t_24 (8 rows x 13 tables, minus t_24 which has 100 rows)
    rows0 = 8 * 12 + 100
    assert r0["embedding_bytes"] == 4 * (rows0 * D + rows0)  # weights + one Adagrad sum per row
    assert r0["lookups_per_batch"] == 13 * 8  # every sample's id of its 13 tables
    # per owned table: receives 4 samples x (1 id + 1 length) x 8 B, sends 4 x D x 4 B pooled;
    # per remote table: sends 4 x 2 x 8 B ids, receives 4 x D x 4 B
    assert r0["a2a_bytes_per_batch"] == 26 * (4 * 2 * 8 + 4 * D * 4)
    txt = format_plan(d)
    assert "t_25" in txt and "rowwise_adagrad" in txt


def test_row_wise_uses_id_statistics():
    ids = [np.zeros(10, np.int64) for _ in ROWS]  # every id hits row 0 -> rank 0's block
    d = _plan("row_wise", stats=IdStats([1.0] * 26, ids))
    assert d["tables"]["t_25"]["ranks"] == [0, 1]
    assert d["ranks"][0]["lookups_per_batch"] == 26 * 8
    assert d["ranks"][1]["lookups_per_batch"] == 0


def test_data_parallel_and_column_wise():
    d = _plan("data_parallel")
    assert all(r["a2a_bytes_per_batch"] == 0 for r in d["ranks"])
    assert d["ranks"][0]["allreduce_bytes_per_batch"] == 4 * D * sum(ROWS)
    c = _plan("column_wise")
    assert c["tables"]["t_0"]["ranks"] == [0, 1]
    assert c["ranks"][0]["lookups_per_batch"] == 26 * 8  # every shard sees every id


def test_memory_check_and_bad_type():
    d = _plan("table_wise")
    check_memory(d, 10**9)
    with pytest.raises(ConfigError, match="does not fit: rank 0 needs"):
        check_memory(d, 100)
    with pytest.raises(ConfigError, match="--sharding must be"):
        _plan("diagonal")
    with pytest.raises(ConfigError, match="multiple of 4 columns"):
        _plan("column_wise", world=4)  # 8 / 4 = 2 columns per block
