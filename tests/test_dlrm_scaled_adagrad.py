"""``--embedding-optimizer rowwise_adagrad_scaled`` where it is meant to run: G replicas of one
table shard, each stepping on its own part of the batch with FBGEMM's fused CPU kernel, and the
replica sync averaging the weights and the AdaGrad state (the tensors ``ReplicaSync`` and
``DMPCollection.sync`` average), against a NumPy reference written from the formula.

The formula. arXiv 2508.03854 (Zhang et al., "Two-dimensional Sparse Parallelism for Large Scale
Deep Learning Recommendation Model Training") names a "momentum-scaled row-wise AdaGrad"; its
Algorithm 1 could not be read from here (the stored copy of the paper shows only its abstract).
The one description of the step found (a third-party summary of the paper) is
``eta / sqrt(v / c + eps)`` with ``c`` = M, the number of replica groups, correcting the
AdaGrad state ``v`` that grows faster when each replica's gradient is the mean over 1/M of the
batch. This project implements, per replica g and row i, with G = --sparse-groups::

    v_g[i] += mean_j grad_g[i, j]^2                      (row-wise AdaGrad state, "sum")
    w_g[i] -= lr * grad_g[i] / (sqrt(v_g[i] / G) + eps)
    every --sync-every steps:  w_g <- mean over g of w_g,  v_g <- mean over g of v_g

(eps outside the root, as FBGEMM's row-wise AdaGrad; it differs from the summary's placement
only for rows whose ``v / G`` is within a few orders of magnitude of eps = 1e-8.)
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

R, D, LR, EPS, STEPS = 10, 8, 0.1, 1e-8, 6


def _rows_grad(idx, off, gout):
    """Per-row gradient of a SUM-pooled bag lookup (a row looked up twice gets both)."""
    g = np.zeros((R, D))
    for bag in range(len(off) - 1):
        for i in idx[off[bag]:off[bag + 1]]:
            g[i] += gout[bag]
    return g


def reference(w0, steps, c, sync_every):
    """NumPy, float64: the replicas' weights and states after ``steps`` (per step, per replica
    ``(ids, offsets, grad_out)``)."""
    G = len(steps[0])
    w = [w0.astype(np.float64).copy() for _ in range(G)]
    v = [np.zeros(R) for _ in range(G)]
    for t, per_replica in enumerate(steps):
        for g, (idx, off, gout) in enumerate(per_replica):
            grad = _rows_grad(idx, off, gout)
            v[g] += (grad ** 2).mean(1)
            w[g] -= LR * grad / (np.sqrt(v[g] / c) + EPS)[:, None]
        if (t + 1) % sync_every == 0 or t + 1 == len(steps):
            wm, vm = sum(w) / G, sum(v) / G
            w, v = [wm.copy() for _ in range(G)], [vm.copy() for _ in range(G)]
    return w, v


def fused(w0, steps, groups, name, sync_every):
    """G FBGEMM tables (EXACT_ROWWISE_ADAGRAD, CPU) built with the product's optimizer
    settings, synced by averaging ``split_embedding_weights()`` and the ``"sum"`` state."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import ComputeDevice
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen as TBE

    from embeddings.build import optimizer_class
    _, kw = optimizer_class(name, LR, groups)
    tbes = [TBE([(R, D, EmbeddingLocation.HOST, ComputeDevice.CPU)], optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
                learning_rate=kw["lr"], eps=kw["eps"], pooling_mode=PoolingMode.SUM) for _ in range(len(steps[0]))]
    with torch.no_grad():
        for t in tbes:
            t.split_embedding_weights()[0].copy_(torch.from_numpy(w0))
    weights = [t.split_embedding_weights()[0] for t in tbes]
    states = [t.get_optimizer_state()[0]["sum"] for t in tbes]
    for s, per_replica in enumerate(steps):
        for tbe, (idx, off, gout) in zip(tbes, per_replica):
            tbe(torch.tensor(idx), torch.tensor(off)).backward(torch.from_numpy(gout).float())
        if (s + 1) % sync_every == 0 or s + 1 == len(steps):
            with torch.no_grad():
                for ts in (weights, states):
                    avg = sum(t.clone() for t in ts) / len(ts)
                    for t in ts:
                        t.copy_(avg)
    return ([t.split_embedding_weights()[0].double().numpy() for t in tbes],
            [t.get_optimizer_state()[0]["sum"].double().numpy() for t in tbes])


def make_steps(G, seed):
    """Skewed ids, so rows are hit by one replica, by several, or (row R-1) by none; bags of
    1-3 ids, some rows twice in one batch."""
    rng = np.random.default_rng(seed)
    p = 0.5 ** np.arange(R - 1)
    p /= p.sum()
    steps = []
    for _ in range(STEPS):
        per = []
        for _ in range(G):
            lens = rng.integers(1, 4, size=4)
            off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            idx = rng.choice(R - 1, size=int(off[-1]), p=p).astype(np.int64)
            per.append((idx, off, rng.normal(size=(4, D)).astype(np.float32).astype(np.float64)))
        steps.append(per)
    return steps


@pytest.mark.parametrize("G,sync_every", [(2, 1), (2, 3), (4, 1), (4, 2)])
def test_scaled_rowwise_adagrad_replicas_and_sync_match_numpy(G, sync_every):
    w0 = np.random.default_rng(1).normal(scale=0.1, size=(R, D)).astype(np.float32)
    steps = make_steps(G, seed=10 * G + sync_every)
    ref_w, ref_v = reference(w0, steps, G, sync_every)
    got_w, got_v = fused(w0, steps, G, "rowwise_adagrad_scaled", sync_every)
    for g in range(G):
        np.testing.assert_allclose(got_w[g], ref_w[g], atol=1e-5, rtol=0, err_msg=f"weights, replica {g}")
        np.testing.assert_allclose(got_v[g], ref_v[g], atol=1e-5, rtol=1e-5, err_msg=f"state, replica {g}")
    hits = [sum(int(i in set(idx.tolist())) for idx, _, _ in per) for per in steps for i in range(R)]
    assert 1 in hits and max(hits) >= 2  # rows seen by one replica and by several in one step
    assert float(np.abs(ref_w[0][R - 1] - w0[R - 1]).max()) == 0.0  # never looked up: untouched
    # the scaling is not a no-op here: plain row-wise AdaGrad (c = 1) ends elsewhere, and so
    # does the product's plain variant against the scaled reference
    plain_w, _ = reference(w0, steps, 1, sync_every)
    assert float(np.abs(plain_w[0] - ref_w[0]).max()) > 1e-2
    unscaled_w, _ = fused(w0, steps, G, "rowwise_adagrad", sync_every)
    np.testing.assert_allclose(unscaled_w[0], plain_w[0], atol=1e-5, rtol=0)


def test_scaled_variant_is_plain_rowwise_adagrad_at_one_group():
    w0 = np.random.default_rng(2).normal(scale=0.1, size=(R, D)).astype(np.float32)
    steps = make_steps(1, seed=3)
    a, _ = fused(w0, steps, 1, "rowwise_adagrad_scaled", 1)
    b, _ = fused(w0, steps, 1, "rowwise_adagrad", 1)
    assert np.array_equal(a[0], b[0])


def test_scaled_update_equals_the_hand_computation():
    """Two rows of width 4 (FBGEMM's least), G = 2 replicas, lr 0.1, every weight starts at 1,
    the replicas averaged after each step; the rule's step lr / sqrt(v / G) (eps = 1e-8 is below
    the tolerance), v += the row's mean squared gradient. By hand:

    step 1: replica 0 looks up row 0, gradient (2, 2, 0, 0): v = 8 / 4 = 2, sqrt(2 / 2) = 1,
            row 0 = 1 - 0.1 (2, 2, 0, 0) = (0.8, 0.8, 1, 1); replica 1, row 0, gradient
            (0, 0, 2, 2): (1, 1, 0.8, 0.8). sync: row 0 = 0.9 everywhere, v = 2 on both.
    step 2: replica 0 looks up row 1, gradient (4, 4, 0, 0): v = 32 / 4 = 8, sqrt(8 / 2) = 2,
            row 1 = (0.8, 0.8, 1, 1); replica 1 looks up row 0, gradient (4, 4, 4, 4):
            v = 2 + 16 = 18, sqrt(18 / 2) = 3, row 0 = 0.9 - 0.4 / 3 = 0.76667.
            sync: row 0 = (0.9 + 0.76667) / 2 = 5/6, v = (2 + 18) / 2 = 10;
                  row 1 = (0.9, 0.9, 1, 1), v = (8 + 0) / 2 = 4.

    Plain row-wise AdaGrad (lr / sqrt(v)) on the same steps ends at row 0 = 0.88215, row 1 =
    (0.92929, 0.92929, 1, 1): step 1 moves 0.1 x 2 / sqrt(2) = 0.14142, step 2 0.1 x 4 / sqrt(8)
    = 0.14142 (row 1) and 0.1 x 4 / sqrt(18) = 0.09428 (row 0)."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import ComputeDevice
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen as TBE

    from embeddings.build import optimizer_class
    steps = [[(0, (2.0, 2.0, 0.0, 0.0)), (0, (0.0, 0.0, 2.0, 2.0))],  # (row, gradient) per replica
             [(1, (4.0, 4.0, 0.0, 0.0)), (0, (4.0, 4.0, 4.0, 4.0))]]

    def run(name):
        _, kw = optimizer_class(name, 0.1, 2)
        tbes = [TBE([(2, 4, EmbeddingLocation.HOST, ComputeDevice.CPU)], optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
                    learning_rate=kw["lr"], eps=kw["eps"], pooling_mode=PoolingMode.SUM) for _ in range(2)]
        w = [t.split_embedding_weights()[0] for t in tbes]
        v = [t.get_optimizer_state()[0]["sum"] for t in tbes]
        with torch.no_grad():
            for x in w:
                x.fill_(1.0)
        for per_replica in steps:
            for tbe, (row, grad) in zip(tbes, per_replica):
                tbe(torch.tensor([row]), torch.tensor([0, 1])).backward(torch.tensor([grad]))
            with torch.no_grad():
                for ts in (w, v):
                    avg = (ts[0] + ts[1]) / 2
                    for t in ts:
                        t.copy_(avg)
        return w[0].double().numpy(), v[0].double().numpy()

    w, v = run("rowwise_adagrad_scaled")
    np.testing.assert_allclose(w, [[5 / 6] * 4, [0.9, 0.9, 1.0, 1.0]], atol=1e-6, rtol=0)
    np.testing.assert_allclose(v, [10.0, 4.0], atol=1e-6, rtol=0)
    w, v = run("rowwise_adagrad")
    np.testing.assert_allclose(w, [[0.882149] * 4, [0.929289, 0.929289, 1.0, 1.0]], atol=1e-6, rtol=0)
    np.testing.assert_allclose(v, [10.0, 4.0], atol=1e-6, rtol=0)
