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


def test_per_step_counts_the_backward_and_one_group_is_1d():
    d = _plan("table_wise")
    r0 = d["ranks"][0]
    # backward: the pooled gradients travel back (4 x D x 4 B per table), ids do not
    assert r0["a2a_bytes_per_step"] == 26 * (4 * 2 * 8 + 2 * 4 * D * 4)
    assert r0["a2a_group_size"] == 2
    # rank 0's shards, weights + one AdaGrad sum per row: what a replica sync would all-reduce
    assert r0["sync_bytes_per_sync"] == r0["embedding_bytes"]
    from embeddings.sharding import expand_2d
    from embeddings.twod import Layout
    one = expand_2d(d, Layout(2, 1))
    assert one["sharding_groups"] == [[0, 1]] and one["replica_groups"] == [[0], [1]]
    assert all(r["sync_bytes_per_sync"] == 0 for r in one["ranks"])  # no replicas, no sync


def test_2d_report_hand_counted():
    """W = 4, G = 2: the plan is made for a 2-rank sharding group that trains on half of the
    global batch of 8; every global rank's row is its group rank's."""
    from embeddings.sharding import expand_2d
    from embeddings.twod import Layout
    m = LossWrapper(build_model(ModelConfig(embedding_dim=D, dense_arch=[8], over_arch=[8]), 13, ROWS,
                                seed=0, ebc_device="meta"))
    plan = build_plan(m, "table_wise", ROWS, D, 2, 2, "cpu", 2, [1.0] * 26)
    stats = IdStats([1.0] * 26, [np.arange(n) for n in ROWS])
    desc = describe_plan(plan, ROWS, D, 2, 4, stats, "rowwise_adagrad")
    d = expand_2d(desc, Layout(4, 2))  # --sparse-layout hosts
    assert d["sharding_groups"] == [[0, 1], [2, 3]] and d["replica_groups"] == [[0, 2], [1, 3]]
    assert d["sparse_layout"] == "hosts"
    assert d["global_batch"] == 8 and d["group_batch"] == 4
    assert [(r["rank"], r["sharding_group"], r["group_rank"]) for r in d["ranks"]] == \
        [(0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1)]
    tr = expand_2d(desc, Layout(4, 2, kind="torchrec"))
    assert tr["sharding_groups"] == [[0, 2], [1, 3]] and tr["replica_groups"] == [[0, 1], [2, 3]]
    assert [(r["rank"], r["sharding_group"], r["group_rank"]) for r in tr["ranks"]] == \
        [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)]
    assert "sharding groups {0,2} {1,3}, replica groups {0,1} {2,3}" in format_plan(tr)
    for r in d["ranks"]:
        # 2 samples per rank; per table: 2 x (1 id + 1 length) x 8 B of ids to or from the one
        # peer of the group, and 2 x D x 4 B of pooled rows (forward) and their gradients (backward)
        assert r["a2a_group_size"] == 2
        assert r["a2a_bytes_per_batch"] == 26 * (2 * 2 * 8 + 2 * D * 4)
        assert r["a2a_bytes_per_step"] == 26 * (2 * 2 * 8 + 2 * 2 * D * 4)
    rows0 = 8 * 12 + 100  # group rank 0 owns t_0, t_2, ..., t_24 (t_24 has 100 rows)
    assert d["ranks"][2]["embedding_bytes"] == tr["ranks"][1]["embedding_bytes"] == 4 * (rows0 * D + rows0)
    assert d["ranks"][2]["sync_bytes_per_sync"] == 4 * (rows0 * D + rows0)
    txt = format_plan(d)
    assert "sharding groups {0,1} {2,3}, replica groups {0,2} {1,3}" in txt and "sync/sync" in txt


def test_table_row_wise_by_table_not_by_node():
    """4 ranks on 2 hosts of 2: table i lives on host i % 2 whatever node builds the plan
    (GROUP_RANK is the node rank under torchrun; it must not move tables)."""
    import os
    from unittest import mock

    from embeddings.sharding import plan_hash
    m = LossWrapper(build_model(ModelConfig(embedding_dim=D, dense_arch=[8], over_arch=[8]), 13, ROWS,
                                seed=0, ebc_device="meta"))
    plans = []
    for node in ("0", "1"):
        with mock.patch.dict(os.environ, {"GROUP_RANK": node, "RANK": str(2 * int(node))}):
            plans.append(build_plan(m, "table_row_wise", ROWS, D, 4, 2, "cpu", 2, [1.0] * 26))
    assert plan_hash(plans[0]) == plan_hash(plans[1])
    stats = IdStats([1.0] * 26, [np.arange(n) for n in ROWS])
    d = describe_plan(plans[0], ROWS, D, 4, 8, stats, "rowwise_adagrad")
    assert d["tables"]["t_0"]["ranks"] == [0, 1] and d["tables"]["t_1"]["ranks"] == [2, 3]
    assert d["tables"]["t_25"]["ranks"] == [2, 3] and d["tables"]["t_0"]["type"] == "table_row_wise"
    # 13 tables of 8 rows (4 per rank) + t_24 (100 rows: 50 each) on host 0
    r0 = d["ranks"][0]
    assert r0["embedding_bytes"] == 4 * (12 * 4 * (D + 1) + 50 * (D + 1))
    other = build_plan(m, "row_wise", ROWS, D, 4, 2, "cpu", 2, [1.0] * 26)
    assert plan_hash(other) != plan_hash(plans[0])


def test_memory_message_small_budget():
    d = _plan("table_wise")
    with pytest.raises(ConfigError) as e:
        check_memory(d, 1000)
    msg = str(e.value)
    assert "budget is 1000 B per rank" in msg and "0.00 GiB" not in msg and "needs 6.9 KiB" in msg
