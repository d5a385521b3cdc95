"""Keyed initial table: row g is a function of (seed, g) only, so a rank draws only its rows and
the table is the same at any k; the values are N(0, std^2)."""
from __future__ import annotations

import numpy as np
import torch

from graphdist.rec.model import init_embeddings


def test_rows_depend_on_the_global_id_only():
    full = init_embeddings(torch.arange(5000), 16, 0.1, seed=4)
    ids = torch.tensor([4999, 3, 1200, 7])
    torch.testing.assert_close(init_embeddings(ids, 16, 0.1, seed=4), full[ids], rtol=0, atol=0)
    parts = torch.randint(0, 3, (5000,), generator=torch.Generator().manual_seed(0))
    got = torch.empty_like(full)
    for k in range(3):  # three "ranks", each drawing its own rows
        own = torch.nonzero(parts == k).flatten()
        got[own] = init_embeddings(own, 16, 0.1, seed=4)
    assert torch.equal(got, full)
    assert not torch.equal(init_embeddings(ids, 16, 0.1, seed=5), full[ids])  # the seed matters


def test_values_are_normal_with_the_given_std():
    x = init_embeddings(torch.arange(20000), 32, 0.1, seed=0).double().numpy().ravel()
    assert abs(x.mean()) < 0.002 and abs(x.std() - 0.1) < 0.002  # 640k values: sd of the mean 1.25e-4
    z = np.sort(x / 0.1)
    for q, want in ((0.025, -1.96), (0.5, 0.0), (0.975, 1.96)):
        assert abs(z[int(q * z.size)] - want) < 0.03
    c = np.corrcoef(x.reshape(20000, 32)[:, 0], x.reshape(20000, 32)[:, 1])[0, 1]
    assert abs(c) < 0.03  # columns independent
    rows = x.reshape(20000, 32)
    assert abs(np.corrcoef(rows[:-1, 0], rows[1:, 0])[0, 1]) < 0.03  # neighbouring ids independent
