"""graphdist.keyed's one-number-per-id draws (the recommender's sampler draws through them): a
function of (key, id) only, uniform, and independent across keys (the sampler's streams)."""
from __future__ import annotations

import numpy as np

from graphdist.keyed import key32, keyed_below, keyed_unit


def test_a_draw_is_a_function_of_key_and_id_only():
    ids = np.arange(0, 3 * 2**32, 2**30 + 7, dtype=np.int64)  # ids past 2^32 included
    whole = keyed_unit(ids, key32(1, 2, 3))
    part = keyed_unit(ids[::-3].copy(), key32(1, 2, 3))  # another order, another subset: as a rank draws
    assert np.array_equal(part, whole[::-3])
    assert not np.array_equal(keyed_unit(ids, key32(1, 2, 4)), whole)
    assert np.array_equal(keyed_unit(ids[:6].reshape(2, 3), key32(1, 2, 3)), whole[:6].reshape(2, 3))
    assert keyed_unit(ids[:0], key32(1, 2, 3)).shape == (0,)  # a rank without samples


def test_draws_are_uniform_and_streams_independent():
    ids = np.arange(100_000, dtype=np.int64) * 3 + 5
    u = keyed_unit(ids, key32(7, 0, 1))
    assert u.dtype == np.float64 and u.min() >= 0.0 and u.max() < 1.0
    assert len(np.unique(u)) == u.size  # 53 bits: no collisions among 1e5 draws (expected ~6e-7)
    counts = np.bincount((u * 100).astype(np.int64), minlength=100)
    chi2 = float(((counts - 1000.0) ** 2 / 1000.0).sum())
    assert chi2 < 160, chi2  # 99 dof: p < 1e-4 beyond 160
    low = (u * 2**53).astype(np.int64) & 0xFF  # the low bits (from the second hash) are uniform too
    chi2_low = float(((np.bincount(low, minlength=256) - u.size / 256) ** 2 / (u.size / 256)).sum())
    assert chi2_low < 350, chi2_low  # 255 dof
    v = keyed_unit(ids, key32(7, 0, 2))
    assert abs(np.corrcoef(u, v)[0, 1]) < 0.015  # sd of r is 1/sqrt(1e5) = 0.0032


def test_below_covers_each_bound():
    ids = np.arange(60_000, dtype=np.int64)
    n = np.array([1, 3, 1000])[ids % 3]
    x = keyed_below(ids, key32(0), n)
    assert (x >= 0).all() and (x < n).all()
    assert set(x[n == 3].tolist()) == {0, 1, 2} and (x[n == 1] == 0).all()
    assert np.unique(x[n == 1000]).size > 990
