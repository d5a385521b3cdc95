"""Boundary sampling (``--boundary-rate p``, BNS-GCN): the keyed decision, parity with an
independent single-process reference, rate 1 is today's training, runs repeat at k = 2 and 4,
resume is exact, fewer bytes, bad values."""
from __future__ import annotations

import pytest
import torch

from graphdist.cli import main
from graphdist.exchange.boundary import kept
from graphdist.testing import run_ranks
from tests.test_stale import BASE, SPEC, _graph, initial_state, reference_losses


def test_kept_is_keyed_and_has_the_rate():
    ids = torch.arange(200_000)
    for rate in (0.1, 0.5, 0.9):
        k = kept(ids, rate, seed=1, epoch=3)
        assert abs(float(k.float().mean()) - rate) < 0.005
        assert torch.equal(k[1000:2000], kept(ids[1000:2000], rate, seed=1, epoch=3))  # any rank, any subset
        assert not torch.equal(k, kept(ids, rate, seed=1, epoch=4))  # a new draw every epoch
        assert not torch.equal(k, kept(ids, rate, seed=2, epoch=3))  # and every seed
    assert bool(kept(ids, 1.0, 0, 1).all())


def _job(rank, ws, graph, a, runs, root=None):
    from graphdist.gnn.trainer import GCNConfig, fit
    from graphdist.partition.layout import build_layout
    from graphdist.runtime import init_distributed
    ctx = init_distributed("cpu")
    lg = build_layout(graph, a, rank, ws)
    out = []
    for kw in runs:
        r = fit(GCNConfig(spec="t", progress=False, **{"input_halo": "exchange", **kw}), lg, {}, ctx)
        out.append((r["losses"], r["comm/halo_bytes_per_epoch"], r["test_acc"]))
    if root is not None:  # resume: the draws are keyed by epoch, the byte sums are in the history
        base = dict(spec="t", hidden=8, epochs=7, seed=2, progress=False, checkpoint_every=3, halo="plain",
                    boundary_rate=0.3, link_gbps=0.5)
        full = fit(GCNConfig(**base, checkpoint_dir=f"{root}/full"), lg, {}, ctx)
        fit(GCNConfig(**base, checkpoint_dir=f"{root}/cut"), lg, {}, ctx, callbacks=[lambda e, h: e == 4])
        resumed = fit(GCNConfig(**base, checkpoint_dir=f"{root}/cut", resume=True), lg, {}, ctx)
        out.append([(r["losses"], r["comm/halo_bytes_per_epoch"]) for r in (full, resumed)])
    return out


REPEAT = dict(hidden=8, epochs=6, seed=5, dropout=0.5, boundary_rate=0.5)  # mvc


def _check_repeats(res):
    for r in res:
        assert r == res[0]  # every rank reports the same losses and bytes
    (l1, b1, _), (l2, b2, _), (l3, b3, _) = res[0][-3:]
    assert l1 == l2 and b1 == b2  # same seed and partition: same losses, same traffic
    assert l3 != l1  # another seed, other draws


def test_boundary_sampling_at_k2(tmp_path):
    g = _graph()
    a = torch.arange(g.num_nodes) % 2
    plain, mvc = dict(BASE, halo="plain"), dict(BASE, halo="mvc")
    runs = [plain, dict(plain, boundary_rate=1.0), dict(plain, boundary_rate=0.5), dict(plain, boundary_rate=0.1),
            mvc, dict(mvc, boundary_rate=0.5), dict(mvc, boundary_rate=0.1), REPEAT, REPEAT, dict(REPEAT, seed=6)]
    res = run_ranks(_job, 2, args=(g, a, runs, str(tmp_path)), timeout=240)
    resume = [r.pop() for r in res][0]
    _check_repeats(res)
    (exact, b_exact, _), (one, b_one, _), (half, b_half, _), (tenth, b_tenth, _) = res[0][:4]
    (m_exact, bm_exact, _), (m_half, bm_half, _), (m_tenth, bm_tenth, _) = res[0][4:7]
    state = initial_state()
    assert exact == pytest.approx(reference_losses(g, a, state), rel=1e-4, abs=1e-6)
    assert one == exact and b_one == b_exact  # rate 1 is today's exact training, bit for bit
    for rate, got, got_mvc in ((0.5, half, m_half), (0.1, tenth, m_tenth)):
        ids = torch.arange(g.num_nodes)
        ref = reference_losses(g, a, state, keep=lambda epoch, r=rate: (kept(ids, r, 0, epoch), r))
        assert got == pytest.approx(ref, rel=1e-4, abs=1e-6)
        assert got_mvc == pytest.approx(ref, rel=1e-4, abs=1e-6)  # mvc samples the same edges
        assert all(abs(x - e) > 1e-6 for x, e in zip(got, exact))
    assert b_tenth < b_half < b_exact  # only kept rows travel in training (evaluation moves them all)
    assert bm_tenth < bm_half < bm_exact  # mvc: the raw ones (partial sums always travel)
    (full_l, full_b), (res_l, res_b) = resume
    assert res_l == full_l and res_b == full_b


@pytest.mark.parametrize("argv, match", [
    (["--halo", "plain", "--boundary-rate", "0"], "--boundary-rate must be in (0, 1], got 0.0"),
    (["--halo", "plain", "--boundary-rate", "1.5"], "--boundary-rate must be in (0, 1], got 1.5"),
    (["--halo", "plain", "--boundary-rate", "0.5", "--halo-staleness", "1"], "cannot be combined"),
])
def test_bad_boundary_rate_is_one_line(argv, match, capsys):
    assert main(["train-gcn", SPEC, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and match in err[0], err
