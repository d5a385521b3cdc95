"""The training step has no host synchronisation: sizes come from the epoch plan, which is built
vectorised (no per-batch Python loop); checked by making every tensor->host conversion and
torch.unique fail inside the steps."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from graphdist.rec.data import make_ratings
from graphdist.testing import run_ranks


def test_bpr_steps_make_no_host_sync(monkeypatch):
    from graphdist.partition.layout import build_layout
    from graphdist.rec.model import (LightGCNShard, bpr_step, halo_exchanger, init_embeddings, lightgcn_adjacency,
                                     schedule_epoch)
    from graphdist.rec.sampling import sample_epoch
    from graphdist.rec.rank import rank_data
    g = np.random.default_rng(1)
    r = make_ratings(np.stack([g.integers(0, 40, 400), g.integers(0, 30, 400)], 1), np.zeros((0, 2), np.int64),
                     40, 30, {})
    lg = build_layout(r.graph, torch.zeros(70, dtype=torch.int64), 0, 1)
    rd = rank_data(r, lg)
    model = LightGCNShard(init_embeddings(rd.owned, 8, 0.1, 0), 2)
    adj, halo = lightgcn_adjacency(lg), halo_exchanger(lg)
    opt = torch.optim.Adam([model.weight], lr=0.01)
    plans = schedule_epoch(sample_epoch(rd.index, 0, 1, 64), rd, 40, 0, 1)
    assert len(plans) >= 3
    bpr_step(model, adj, halo, plans[0], 1e-4, opt)  # Adam's state exists before the check

    def sync(*a, **k):
        raise AssertionError("host sync in the training step")
    step = opt.state[model.weight]["step"]  # Adam's counter stays on the host on every device
    item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda t: item(t) if t is step else sync())
    for name in ("__int__", "__float__", "__bool__", "__index__", "tolist", "numpy", "nonzero"):
        monkeypatch.setattr(torch.Tensor, name, sync)
    monkeypatch.setattr(torch, "unique", sync)
    monkeypatch.setattr(torch, "nonzero", sync)
    losses = [bpr_step(model, adj, halo, p, 1e-4, opt) for p in plans]
    monkeypatch.undo()
    assert all(torch.isfinite(x) for x in losses)



def _fit_job(rank, ws, kw):
    from graphdist.rec.config import RecConfig
    from graphdist.rec.trainer import train
    return train(RecConfig(spec="rec-synth:users=300,items=200,avg_items=12,seed=1", method="random",
                           progress=False, dim=16, lr=0.01, **kw))


def test_steps_cap_and_eval_user_sample_are_reported():
    from graphdist.rec.job import summary_line
    full, capped = run_ranks(_fit_job, 1, args=(dict(epochs=2, batch_size=256),), timeout=120)[0], \
        run_ranks(_fit_job, 2, args=(dict(epochs=50, batch_size=256, steps=13, eval_users=40),), timeout=120)[0]
    nb = full["steps"] // 2
    assert full["steps_cap"] is None and not full["eval_users_sampled"] and full["eval_users"] > 40
    assert capped["steps"] == 13 and capped["steps_cap"] == 13 and capped["epochs_run"] == -(-13 // nb)
    assert capped["losses"][0] == pytest.approx(full["losses"][0], rel=1e-6)  # the same first epoch
    assert capped["eval_users"] == 40 and capped["eval_users_sampled"]
    assert capped["time/step_s"] > 0 and capped["comm/item_bytes_per_step"] > 0
    line = summary_line(capped)
    assert "on 40 sampled users" in line and "13 steps (--steps)" in line


def _fits_job(rank, ws):
    from graphdist import memory
    from graphdist.errors import ConfigError
    from graphdist.partition.layout import build_layout
    from graphdist.rec.config import RecConfig
    from graphdist.rec.memory import check_rank_fits, estimate_rank_bytes
    from graphdist.rec.rank import rank_data
    from graphdist.procgroup import init_distributed
    init_distributed("cpu")
    g = np.random.default_rng(1)
    r = make_ratings(np.stack([g.integers(0, 40, 400), g.integers(0, 30, 400)], 1), np.zeros((0, 2), np.int64),
                     40, 30, {})
    lg = build_layout(r.graph, torch.arange(70) % ws, rank, ws)
    rd = rank_data(r, lg)
    small, big = RecConfig(spec="x:", batch_size=64), RecConfig(spec="x:", batch_size=1 << 22, dim=256)
    est = estimate_rank_bytes(lg, rd, small, 10), estimate_rank_bytes(lg, rd, big, 10)
    # what this machine reports, replaced in this rank's process (a forked rank of its own)
    memory.available_bytes, memory.process_ceiling = (lambda: 1 << 40), (lambda: None)
    check_rank_fits(lg, rd, small, 10)
    memory.available_bytes = lambda: 100 << 20
    try:
        check_rank_fits(lg, rd, small, 10)
        msg = ""
    except ConfigError as e:
        msg = str(e)
    memory.available_bytes, memory.process_ceiling = (lambda: 1 << 40), (lambda: 100 << 20)
    try:  # the machine has room, but not the rank's own process limit
        check_rank_fits(lg, rd, small, 10)
        capped = ""
    except ConfigError as e:
        capped = str(e)
    return est, msg, capped


def test_a_rank_that_does_not_fit_stops_with_one_line_naming_the_memory():
    for (small, big), msg, capped in run_ranks(_fits_job, 2, timeout=120):
        assert "\n" not in capped and "GiB per rank but a rank may hold only 0.10 GiB" in capped, capped
        assert 300 << 20 < small < big  # interpreter and torch at least; grows with batch and dim
        assert "\n" not in msg and msg.startswith("train-rec needs about 0.") and "GiB per rank" in msg, msg
        assert "for the 2 rank(s) on this machine" in msg and "0.10 GiB is available" in msg


def test_default_exchange_rounds_keep_a_round_under_16_mib():
    """--halo-rounds 0: the fewest rounds whose send + receive rows (float32) stay under 16 MiB a
    rank, at most 8; a given count is kept. (One process: the all-reduce is the identity.)"""
    from graphdist.rec.config import RecConfig
    from graphdist.rec.memory import MAX_ROUNDS, ROUND_BYTES, exchange_rounds
    cfg = RecConfig(spec="rec-synth:", dim=64)
    row = 64 * 4
    assert ROUND_BYTES == 16 * 2 ** 20 and MAX_ROUNDS == 8
    assert exchange_rounds(cfg, 1000, 1000) == 1
    assert exchange_rounds(cfg, ROUND_BYTES // row // 2, ROUND_BYTES // row // 2) == 1  # exactly 16 MiB
    assert exchange_rounds(cfg, ROUND_BYTES // row // 2, ROUND_BYTES // row // 2 + 1) == 2
    assert exchange_rounds(cfg, 176_000, 177_000) == 6  # the 20M graph's k = 4 rank: 86 MiB
    assert exchange_rounds(cfg, 10 ** 7, 10 ** 7) == MAX_ROUNDS
    assert exchange_rounds(RecConfig(spec="rec-synth:", dim=64, halo_rounds=3), 10 ** 7, 10 ** 7) == 3
