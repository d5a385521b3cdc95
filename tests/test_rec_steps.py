"""The training step has no host synchronisation: sizes come from the epoch plan, which is built
vectorised (no per-batch Python loop); checked by making every tensor->host conversion and
torch.unique fail inside the steps."""
from __future__ import annotations

import numpy as np
import torch

from graphdist.rec.data import make_ratings


def test_bpr_steps_make_no_host_sync(monkeypatch):
    from graphdist.halo import build_plan
    from graphdist.rec.model import LightGCNShard, bpr_step, halo_exchanger, init_embeddings, lightgcn_adjacency, plan_epoch
    from graphdist.rec.sampling import sample_epoch
    from graphdist.rec.setup import rank_data
    g = np.random.default_rng(1)
    r = make_ratings(np.stack([g.integers(0, 40, 400), g.integers(0, 30, 400)], 1), np.zeros((0, 2), np.int64),
                     40, 30, {})
    lg = build_plan(r.graph, torch.zeros(70, dtype=torch.int64), 0, 1)
    rd = rank_data(r, lg)
    model = LightGCNShard(init_embeddings(rd.owned, 8, 0.1, 0), 2)
    adj, halo = lightgcn_adjacency(lg), halo_exchanger(lg)
    opt = torch.optim.Adam([model.weight], lr=0.01)
    plans = plan_epoch(sample_epoch(rd.index, 0, 1, 64), rd, 40, 0, 1)
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

