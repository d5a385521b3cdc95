"""One train-rec BPR step, the current gather against the one it replaced, side by side (k=1).

    python benchmarks/rec_step.py [--spec SPEC] [--steps 6]

The old step copied the whole ``[final | layer-0]`` table and indexed it once per triple column
(three table-sized zero-filled gradients); :func:`graphdist.rec.model.bpr_step` gathers only the
rows the batch touches. Both run alternately on the same batches, one torch thread; the script
prints the median seconds per step of each, their ratio, and the difference after one step from
the same state (loss, largest weight difference).
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

SPEC = "rec-synth:users=50000,items=20000,avg_items=25,seed=0"


def old_step(model, adj, halo, plan, l2, opt):
    from graphdist.exchange.exchanger import HaloExchanger
    opt.zero_grad(set_to_none=True)
    final = model(adj, halo)
    # the plan's positions refer to the batch's rows; the old step indexed the whole table
    n_own, n_rows = final.shape[0], plan.rows.numel()
    ex = HaloExchanger(plan.rows[plan.send_idx], plan.send_counts, plan.recv_counts, final.device)
    d = final.shape[1]
    table = ex(torch.cat([final, model.weight], 1))
    at = plan.at
    idx = torch.where(at < n_rows, plan.rows[at.clamp(max=max(n_rows - 1, 0))], n_own + at - n_rows)
    eu, ep, en = idx.view(3, -1).unbind(0)
    eu, ep, en = table[eu], table[ep], table[en]
    pos, neg = (eu[:, :d] * ep[:, :d]).sum(1), (eu[:, :d] * en[:, :d]).sum(1)
    reg = eu[:, d:].pow(2).sum() + ep[:, d:].pow(2).sum() + en[:, d:].pow(2).sum()
    loss = (F.softplus(neg - pos).sum() + 0.5 * l2 * reg) / plan.size
    loss.backward()
    opt.step()
    return loss.detach()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29737"), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    from graphdist.partition.layout import build_layout
    from graphdist.rec.data import load_ratings
    from graphdist.rec.model import (LightGCNShard, bpr_step, halo_exchanger, init_embeddings, lightgcn_adjacency,
                                     schedule_epoch)
    from graphdist.rec.sampling import sample_epoch
    from graphdist.rec.rank import rank_data
    from graphdist.runtime import init_distributed
    r = load_ratings(a.spec)
    init_distributed("cpu")
    lg = build_layout(r.graph, torch.zeros(r.num_nodes, dtype=torch.int64), 0, 1)
    rd = rank_data(r, lg)
    adj, halo = lightgcn_adjacency(lg), halo_exchanger(lg)
    plans = schedule_epoch(sample_epoch(rd.index, 0, 1, 2048), rd, r.num_users, 0, 1)
    model = LightGCNShard(init_embeddings(rd.owned, 64, 0.1, 0), 3)
    opt = torch.optim.Adam([model.weight], lr=1e-3)
    t_old, t_new = [], []
    for i in range(a.steps):
        t = time.perf_counter()
        old_step(model, adj, halo, plans[i], 1e-4, opt)
        t_old.append(time.perf_counter() - t)
        t = time.perf_counter()
        bpr_step(model, adj, halo, plans[i], 1e-4, opt)
        t_new.append(time.perf_counter() - t)
    o, n = float(np.median(t_old)), float(np.median(t_new))
    print(f"{r.train.shape[0]:,} training pairs, {len(plans)} steps/epoch: old {o:.3f} s/step, new {n:.3f} s/step, "
          f"{o / n:.2f}x")
    w0 = model.weight.detach().clone()
    m1, m2 = LightGCNShard(w0, 3), LightGCNShard(w0, 3)
    o1, o2 = torch.optim.Adam([m1.weight], lr=1e-3), torch.optim.Adam([m2.weight], lr=1e-3)
    la = old_step(m1, adj, halo, plans[a.steps], 1e-4, o1)
    lb = bpr_step(m2, adj, halo, plans[a.steps], 1e-4, o2)
    print(f"one step from the same state: loss difference {float(la - lb):.3g}, "
          f"largest weight difference {float((m1.weight - m2.weight).detach().abs().max()):.3g}")


if __name__ == "__main__":
    main()
