"""Quantised halo rows: packing, unbiased stochastic rounding, bytes on the wire, the exchange
through gloo, and the flags that cannot work."""
from __future__ import annotations

import pytest
import torch

from graphdist.cli import main
from graphdist.halo.quant import decode, encode, row_bytes
from graphdist.testing import run_ranks

QBITS = (16, 8, 4, 2)


@pytest.mark.parametrize("bits", QBITS)
@pytest.mark.parametrize("width", [1, 3, 5, 8, 17])
def test_roundtrip_within_one_step_and_size(bits, width):
    gen = torch.Generator().manual_seed(bits * 100 + width)
    x = torch.randn(33, width, generator=gen) * torch.logspace(-3, 3, 33)[:, None] + 5.0
    buf = encode(x, bits, key=width)
    assert buf.dtype == torch.uint8 and buf.shape == (33, row_bytes(width, bits))
    assert row_bytes(width, bits) == (width * bits + 7) // 8 + 4
    y = decode(buf, bits, width)
    lo = x.amin(1)
    step = (x.amax(1) - lo + lo.abs() / 128) / (2 ** bits - 1)  # the bf16 offset widens the range
    # one step of the (bf16-rounded up) scale, plus float32 rounding of the affine map
    assert ((y - x).abs() <= 1.01 * step[:, None] + 1e-6 * x.abs()).all()


@pytest.mark.parametrize("bits", QBITS)
def test_grid_values_are_exact(bits):
    levels = 2 ** bits - 1
    q = torch.arange(7).float() % (levels + 1)
    x = torch.stack([q, q.flip(0), torch.full((7,), 3.0)])  # offset 0, scale 1; a constant row
    for row in x[:2]:
        row[0], row[-1] = 0.0, float(levels)
    y = decode(encode(x, bits), bits, 7)
    assert torch.equal(y, x)


@pytest.mark.parametrize("bits", (8, 4, 2))
def test_stochastic_rounding_is_unbiased(bits):
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(4, 9, generator=gen)
    draws = torch.stack([decode(encode(x, bits, key=i), bits, 9) for i in range(4000)])
    step = (x.amax(1) - x.amin(1)) / (2 ** bits - 1)
    # each draw is x + e with |e| < step and E[e] = 0: the mean of 4000 is within 4 sigma of x
    sigma = step[:, None] / 2 / 4000 ** 0.5
    assert ((draws.mean(0) - x).abs() <= 4 * sigma + 1e-6).all()
    # the same key draws the same noise (runs and resumed runs repeat)
    assert torch.equal(encode(x, bits, key=5), encode(x, bits, key=5))
    # nearest rounding would be biased: this value sits at 0.3 of a step above a grid point
    row = torch.tensor([[0.0, 0.3, 3.0]])
    mean = torch.stack([decode(encode(row, 2, key=i), 2, 3) for i in range(4000)]).mean(0)
    assert abs(float(mean[0, 1]) - 0.3) < 0.05


def test_packing_layout_by_hand():
    # 4 bit: values 1, 2, 3 at offset 0 / scale 1 -> bytes 0x21 and 0x03 (low nibble first)
    x = torch.tensor([[0.0, 1.0, 2.0, 15.0]])
    assert encode(x, 4)[0, :2].tolist() == [0x10, 0xF2]
    x = torch.tensor([[0.0, 1.0, 2.0, 3.0, 3.0]])
    assert encode(x, 2)[0, :2].tolist() == [0b11100100, 0b11]


def _exchange_job(rank, ws, bits_list):
    from graphdist.halo.exchange import HaloExchanger
    from graphdist.data import load_graph
    from graphdist.halo import build_plan
    from graphdist.halo.spmm import SparseAdj
    g = load_graph("sbm:nodes=300,classes=3,avg_degree=6,features=16,seed=1")
    lg = build_plan(g, torch.arange(g.num_nodes) % ws, rank, ws)
    h = lg.x.clone().requires_grad_()
    out = {}
    for bits in bits_list:
        adj = SparseAdj.for_model(lg, "gcn", halo="mvc")
        ex = HaloExchanger.from_local_graph(lg, halo="mvc", bits=bits, seed=3)
        ex.measure = True
        ex.start_pass()
        y = adj.propagate(h, ex)
        (y * y).sum().backward()
        lay = lg.exchange_layout("mvc")
        out[bits] = (y.detach().numpy(), h.grad.clone().numpy(), ex.stats.bytes, ex.stats.rows,
                     sum(lay.send_counts), sum(lay.recv_counts), dict(ex.stats.errors))
        h.grad = None
    return out


def test_quantised_exchange_through_gloo():
    res = run_ranks(_exchange_job, 2, args=((32, 8, 2),), timeout=180)
    for r in res:
        y32, g32 = torch.from_numpy(r[32][0]), torch.from_numpy(r[32][1])
        n_send, n_recv = r[32][4], r[32][5]
        assert r[32][2] == 4 * 16 * n_send + 4 * 16 * n_recv  # float32, forward + backward
        for bits, tol in ((8, 0.02), (2, 0.5)):
            y, g, nbytes, rows, *_, errors = r[bits]
            assert rows == n_send + n_recv
            assert nbytes == n_send * row_bytes(16, bits) + n_recv * row_bytes(16, bits)
            rel = float((torch.from_numpy(y) - y32).norm() / y32.norm())
            assert 0 < rel < tol, (bits, rel)
            assert float((torch.from_numpy(g) - g32).norm() / g32.norm()) < 2 * tol
            assert set(errors) == {("forward", 0), ("backward", 0)}
            e2, n2 = errors[("forward", 0)]
            assert 0 < (e2 / n2) ** 0.5 < tol


@pytest.mark.parametrize("argv, match", [
    (["train-gcn", "sbm:nodes=300", "--halo-bits", "3"], "invalid choice: 3"),
    (["train-gcn", "sbm:nodes=300", "--halo", "fast"], "invalid choice: 'fast'"),
    (["train-gcn", "sbm:nodes=300", "--halo-bits", "8"], "--halo-bits 8 quantises the halo exchange, but a "
                                                         "1-part job has none"),
])
def test_impossible_settings_are_one_line(argv, match, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphdist: error: ") and match in err and err.count("\n") == 1
