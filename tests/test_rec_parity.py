"""Distributed LightGCN == single-process PyG ``LightGCN`` on the same weights, for k in {1, 2, 4}
with random and METIS parts, in both exact halo modes (plain rows, and mvc pre/post-aggregation):
final embeddings and the gradients of a BPR loss (1e-5), and 20 training steps on the same
sampled triples give the same losses. One ``run_ranks`` job per k."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from graphdist.partition.layout import build_layout
from graphdist.rec.data import Ratings, make_ratings
from graphdist.testing import run_ranks

U, I, D, L = 14, 11, 8, 3
LR, L2, BATCH, STEPS = 0.01, 1e-2, 16, 20
METHODS = ("random", "metis")


def make_ratings_tiny() -> Ratings:
    g = np.random.default_rng(0)
    pairs = np.stack([g.integers(0, U - 1, 70), g.integers(0, I - 1, 70)], 1)  # user U-1, item I-1: no edges
    test = np.stack([g.integers(0, U - 1, 15), g.integers(0, I, 15)], 1)
    return make_ratings(pairs, test, U, I, {})


def assignment(graph, k: int, method: str) -> torch.Tensor:
    if k == 1:
        return torch.zeros(graph.num_nodes, dtype=torch.int64)
    if method == "random":
        return torch.randint(0, k, (graph.num_nodes,), generator=torch.Generator().manual_seed(k))
    from graphdist.partition.setup import partition_in_process
    return partition_in_process(graph, k, "metis", 0)


def global_triples(ratings: Ratings, seed: int = 5):
    """The first STEPS batches the sampler draws, as one process sees them."""
    from graphdist.rec.sampling import build_index, sample_epoch
    idx = build_index(ratings.train.numpy(), U, I, np.ones(U, dtype=bool))
    out, epoch = [], 0
    while len(out) < STEPS:
        epoch += 1
        s = sample_epoch(idx, seed, epoch, BATCH)
        out += [(s.user[s.batch == b], s.pos[s.batch == b], s.neg[s.batch == b]) for b in range(s.num_batches)]
    return out[:STEPS], epoch


def _job(rank, ws, ratings, assignments, table, epochs):
    from graphdist import comm
    from graphdist.adam import Adam
    from graphdist.rec.model import LightGCNShard, bpr_step, halo_exchanger, lightgcn_adjacency, schedule_epoch
    from graphdist.rec.sampling import sample_epoch
    from graphdist.rec.rank import rank_data
    from graphdist.procgroup import init_distributed
    init_distributed("cpu")
    out = {}
    for (method, mode), a in assignments.items():
        lg = build_layout(ratings.graph, a, rank, ws)
        rd = rank_data(ratings, lg)
        model = LightGCNShard(table[rd.owned], L)
        adj, halo = lightgcn_adjacency(lg, halo=mode), halo_exchanger(lg, halo=mode)
        if ws > 1 and mode == "mvc":  # the cover really pre-aggregates some rows
            sums = comm.all_reduce_sum(torch.tensor([float(lg.pre_dst.numel())]))
            assert float(sums[0]) > 0
        with torch.no_grad():
            final = model(adj, halo)
        plans = [p for e in range(1, epochs + 1)
                 for p in schedule_epoch(sample_epoch(rd.index, 5, e, BATCH), rd, U, rank, ws)][:STEPS]
        bpr_step(model, adj, halo, plans[0], L2)  # gradients of the first batch, no step
        grad = model.weight.grad.clone()
        opt = Adam([model.weight], lr=LR)  # train-rec's optimizer; the reference uses torch.optim.Adam
        losses = torch.stack([bpr_step(model, adj, halo, p, L2, opt) for p in plans]).double()
        comm.all_reduce_sum(losses)
        out[(method, mode)] = (rd.owned, final, grad, losses.tolist(), model.weight.detach().clone())
    return out


def pyg_reference(ratings, table, triples):
    from torch_geometric.nn.models import LightGCN
    ei = ratings.graph.edge_index  # both directions of every training pair
    m = LightGCN(U + I, D, L)
    m.embedding.weight.data.copy_(table)
    final = m.get_embedding(ei).detach()

    def loss_of(u, p, n):
        u, p, n = (torch.from_numpy(x) for x in (u, p + U, n + U))
        e = m.get_embedding(ei)
        pos, neg = (e[u] * e[p]).sum(1), (e[u] * e[n]).sum(1)
        return m.recommendation_loss(pos, neg, node_id=torch.cat([u, p, n]), lambda_reg=L2 / 2)

    loss_of(*triples[0]).backward()
    grad = m.embedding.weight.grad.clone()
    opt = torch.optim.Adam(m.parameters(), lr=LR)
    losses = []
    for t in triples:
        opt.zero_grad()
        loss = loss_of(*t)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return final, grad, losses, m.embedding.weight.detach()


def _gather(results, method, pos):
    n = U + I
    out = torch.zeros((n,) + tuple(results[0][method][pos].shape[1:]))
    for r in results:
        out[r[method][0]] = r[method][pos]
    return out


@pytest.mark.parametrize("k", [1, 2, 4])
def test_lightgcn_matches_pyg(k):
    from graphdist.rec.model import init_embeddings
    ratings = make_ratings_tiny()
    table = init_embeddings(torch.arange(U + I), D, 0.1, seed=3)
    triples, epochs = global_triples(ratings)
    ref_final, ref_grad, ref_losses, ref_w = pyg_reference(ratings, table, triples)
    assert ref_grad.abs().sum() > 0
    assigns = {(m, h): assignment(ratings.graph, k, m) for m in (METHODS if k > 1 else METHODS[:1])
               for h in (("plain", "mvc") if k > 1 else ("plain",))}
    res = run_ranks(_job, k, args=(ratings, assigns, table, epochs), timeout=240)
    for method in assigns:
        if k > 1:
            assert all(r[method][0].numel() > 0 for r in res)
        torch.testing.assert_close(_gather(res, method, 1), ref_final, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(_gather(res, method, 2), ref_grad, atol=1e-5, rtol=1e-5)
        losses = res[0][method][3]
        assert all(r[method][3] == losses for r in res)  # every rank reports the global loss
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(_gather(res, method, 4), ref_w, atol=1e-5, rtol=1e-4)


def _paper_job(rank, ws, ratings, a, table):
    from graphdist.rec.model import LightGCNShard, halo_exchanger, lightgcn_adjacency
    from graphdist.procgroup import init_distributed
    init_distributed("cpu")
    lg = build_layout(ratings.graph, a, rank, ws)
    m = LightGCNShard(table[lg.owned], 1)
    with torch.no_grad():
        return lg.owned, m(lightgcn_adjacency(lg), halo_exchanger(lg))


def test_one_layer_by_hand():
    """Users u0, u1, items i0, i1 (nodes 0..3); u0 has i0, i1, u1 has i0. Degrees 2, 1, 2, 1, so
    A_hat[u0, i0] = 1/2, A_hat[u0, i1] = A_hat[u1, i0] = 1/sqrt(2). One layer, one-hot rows:
    E = (E0 + A_hat E0) / 2. Split across 2 ranks (u0, i1 | u1, i0): every edge crosses."""
    r = make_ratings(np.array([[0, 0], [0, 1], [1, 0]]), np.zeros((0, 2), dtype=np.int64), 2, 2, {})
    table = torch.eye(4)
    res = run_ranks(_paper_job, 2, args=(r, torch.tensor([0, 1, 1, 0]), table), timeout=120)
    out = torch.zeros(4, 4)
    for owned, rows in res:
        out[owned] = rows
    s = 2 ** -0.5
    want = torch.tensor([[1, 0, 0.5, s], [0, 1, s, 0], [0.5, s, 1, 0], [s, 0, 0, 1]]) / 2
    torch.testing.assert_close(out, want)
