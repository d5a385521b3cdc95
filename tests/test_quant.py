"""Quantised halo rows: packing, unbiased stochastic rounding, bytes on the wire, the exchange
through gloo, and the flags that cannot work."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from graphdist.cli import main
from graphdist.exchange import quant
from graphdist.exchange.quant import decode, encode, row_bytes
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


def _params(buf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(offset, scale) per row, read from the wire bytes independently of decode()."""
    p = buf[:, -4:].contiguous().view(torch.bfloat16).float()
    return p[:, 0], p[:, 1]


@pytest.mark.parametrize("bits", (8, 4, 2))
def test_stochastic_rounding_is_unbiased(bits):
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(4, 9, generator=gen)
    draws = 4000
    bufs = [encode(x, bits, key=i) for i in range(draws)]
    z, s = _params(bufs[0])
    mean = torch.stack([decode(b, bits, 9) for b in bufs]).double().mean(0)
    # each draw is x + e with |e| < s and E[e] = 0; Var[e] = s^2 f (1 - f) <= s^2 / 4 for the
    # fraction f of a step above the grid point below x: the mean is within 5 sigma of x
    frac = ((x.double() - z.double()[:, None]) / s.double()[:, None]) % 1
    sigma = s.double()[:, None] * (frac * (1 - frac)).sqrt() / draws ** 0.5
    bound = 5 * sigma + 1e-6
    assert ((mean - x.double()).abs() <= bound).all()
    # the same statistic convicts a biased rounding of the same values (it is not vacuous)
    for biased in (torch.round, torch.floor):
        q = biased((x.double() - z.double()[:, None]) / s.double()[:, None])
        assert ((q * s.double()[:, None] + z.double()[:, None] - x.double()).abs() > bound).any()
    # the same key draws the same noise (runs and resumed runs repeat), another key other noise
    assert torch.equal(encode(x, bits, key=5), encode(x, bits, key=5))
    assert not torch.equal(encode(x, bits, key=5), encode(x, bits, key=6))
    # nearest (and floor) rounding would give 0 here: this value sits at 0.3 of a step
    row = torch.tensor([[0.0, 0.3, 3.0]])
    mean = torch.stack([decode(encode(row, 2, key=i), 2, 3) for i in range(draws)]).double().mean(0)
    assert abs(float(mean[0, 1]) - 0.3) < 5 * (0.3 * 0.7 / draws) ** 0.5


@pytest.mark.parametrize("bits", [16, 8, 4, 2])
def test_expected_square_error_is_the_mean_over_rounding_noise(bits):
    # --halo auto's error prediction: the mean over 64 noise keys of the real codec's squared error
    gen = torch.Generator().manual_seed(3)
    x = torch.relu(torch.randn(700, 19, generator=gen)) * torch.rand(700, 1, generator=gen) * 10
    x[5] = 2.5  # a constant row: no error
    want = quant.expected_sq_error(x, bits)
    got = sum(float(((quant.decode(quant.encode(x, bits, key=k), bits, 19) - x) ** 2).sum()) for k in range(64)) / 64
    assert got == pytest.approx(want, rel=0.05)
    # a brute-force NumPy count of the same sum on the offsets and scales the codec sends
    buf = quant.encode(x, bits)
    zs = buf[:, -4:].contiguous().view(torch.bfloat16).float().numpy()
    t = (x.numpy().astype(np.float64) - zs[:, :1]) / zs[:, 1:]
    p = t - np.floor(t)
    assert want == pytest.approx(float((p * (1 - p) * zs[:, 1:].astype(np.float64) ** 2).sum()), rel=1e-4)
    assert quant.expected_sq_error(x[:0], bits) == 0.0
    # blocks change nothing
    assert quant.expected_sq_error(x, bits, block=64) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("bits", QBITS)
def test_noise_is_a_function_of_key_and_position(bits, monkeypatch):
    import graphdist.keyed as keyed
    gen = torch.Generator().manual_seed(bits)
    x = torch.randn(300, 13, generator=gen)
    whole = encode(x, bits, key=11)
    # a prefix of the rows is encoded alike (row i draws the noise of (key, i, j) whatever follows)
    assert torch.equal(encode(x[:120], bits, key=11), whole[:120])
    # and so are the rows whatever the block size the CPU path takes them in
    monkeypatch.setattr(keyed, "BLOCK", 40)
    monkeypatch.setattr(keyed._local, "bufs", [], raising=False)
    assert torch.equal(encode(x, bits, key=11), whole)
    assert torch.equal(decode(whole, bits, 13), decode(whole, bits, 13).clone())


@pytest.mark.parametrize("bits", QBITS)
@pytest.mark.parametrize("width", [1, 2, 3, 5, 8, 17, 64])
def test_bytes_match_a_reference_packing(bits, width):
    """The data bytes, packed again in NumPy from the codes the buffer decodes to (little-endian
    16-bit codes; 4-bit low nibble first; 2-bit from the low bits up; zero padding)."""
    import numpy as np
    gen = torch.Generator().manual_seed(bits * 7 + width)
    levels = 2 ** bits - 1
    x = torch.rand(50, width, generator=gen) * levels  # offset 0 and scale 1: the codes decode exactly
    x[:, 0], x[:, -1] = 0.0, float(levels)
    if width == 1:
        x = (x * 0 + torch.arange(50.0)[:, None]) % 9  # constant rows: code 0
    buf = encode(x, bits, key=width)
    z, s = _params(buf)
    q = (decode(buf, bits, width).double() - z.double()[:, None]) / s.double()[:, None]
    assert torch.equal(q, q.round()) and q.min() >= 0 and q.max() <= levels
    assert width == 1 or (q - x.double()).abs().max() < 1  # within a step of x (this is no tautology)
    q = q.long().numpy()
    if bits == 16:
        ref = np.stack([q & 0xFF, q >> 8], 2).reshape(50, 2 * width)
    else:
        per = 8 // bits
        qp = np.zeros((50, -(-width // per) * per), dtype=np.int64)
        qp[:, :width] = q
        ref = sum(qp[:, i::per] << (bits * i) for i in range(per))
    assert np.array_equal(buf[:, :-4].numpy(), ref.astype(np.uint8))


def test_packing_layout_by_hand():
    # 4 bit: values 0, 1, 2, 15 at offset 0 / scale 1 -> bytes 0x10 and 0xF2 (low nibble first);
    # 2 bit: values 0, 1, 2, 3, 3 -> bytes 0b11100100 and 0b11 (low bits first, zero padding)
    x = torch.tensor([[0.0, 1.0, 2.0, 15.0]])
    assert encode(x, 4)[0, :2].tolist() == [0x10, 0xF2]
    x = torch.tensor([[0.0, 1.0, 2.0, 3.0, 3.0]])
    assert encode(x, 2)[0, :2].tolist() == [0b11100100, 0b11]


def _exchange_job(rank, ws, variants):
    """One forward and backward of ``propagate`` through gloo per variant (``"32"``, ``"8"``,
    ``"2"``, and two broken 2-bit paths: ``"2-order"`` decodes the four values of a byte in the
    wrong order, ``"2-scale"`` decodes with the scale of 2^b levels instead of 2^b - 1). The loss
    is linear, ``sum(y * w)``, so the backward rows do not depend on the forward's rounding.
    Returns per variant the outputs, gradients, byte counts, the rows received (as float32) and
    the scale of every row received in each direction, read off the wire bytes."""
    import graphdist.exchange.quant as quant
    from graphdist.exchange.exchanger import HaloExchanger, Pending
    from graphdist.data import load_graph
    from graphdist.partition.layout import build_layout
    from graphdist.exchange.spmm import SparseAdj
    g = load_graph("sbm:nodes=300,classes=3,avg_degree=6,features=16,seed=1")
    lg = build_layout(g, torch.arange(g.num_nodes) % ws, rank, ws)
    w = torch.randn(lg.num_owned, 16, generator=torch.Generator().manual_seed(rank))
    received = []
    wait = Pending.wait

    def recording_wait(self):
        wire = self.out  # the bytes received (wait() lets go of them once decoded)
        rows = wait(self)
        received.append((wire, rows))
        return rows
    Pending.wait = recording_wait
    good_unpack, good_decode = quant._unpack_into, quant.decode

    def wrong_order(q, buf, bits, scratch):
        good_unpack(q, buf, bits, scratch)
        q.copy_(q.view(q.shape[0], -1, 4).flip(-1).reshape(q.shape))

    def wrong_scale(buf, bits, width, dtype=torch.float32):
        z = buf[:, -4:].contiguous().view(torch.bfloat16).float()[:, :1]
        return (good_decode(buf, bits, width, dtype) - z) * ((2 ** bits - 1) / 2 ** bits) + z
    out = {}
    lay = lg.exchange_layout("mvc")
    for name in variants:
        bits = int(name.split("-")[0])
        quant._unpack_into = wrong_order if name == "2-order" else good_unpack
        quant.decode = wrong_scale if name == "2-scale" else good_decode
        adj = SparseAdj.for_model(lg, "gcn", halo="mvc")
        ex = HaloExchanger.from_local_graph(lg, halo="mvc", bits=bits, seed=3)
        ex.measure_errors(name in ("8", "2"))
        ex.start_pass()
        h = lg.x.clone().requires_grad_()
        received.clear()
        y = adj.propagate(h, ex)
        (y * w).sum().backward()
        (fwd_buf, fwd_rows), (bwd_buf, bwd_rows) = received
        scale = [None if bits == 32 else b[:, -4:].contiguous().view(torch.bfloat16).float()[:, 1]
                 for b in (fwd_buf, bwd_buf)]
        out[name] = {"y": y.detach(), "grad": h.grad.clone(), "bytes": ex.stats.bytes, "rows": ex.stats.rows,
                     "n_send": sum(lay.send_counts), "n_recv": sum(lay.recv_counts), "errors": dict(ex.stats.errors),
                     "recv": (fwd_rows.detach().clone(), bwd_rows.detach().clone()), "scale": scale,
                     "sent": adj.send.mm(lg.x),  # the forward rows this rank sends
                     "halo_abs_min": float(adj.halo.A.values().min()),
                     "send_abs_min": float(adj.send.A.values().min()),
                     # |y_b - y_32| <= |A_halo| s_fwd  and  |grad_b - grad_32| <= |T|^T s_bwd, per row
                     "bound": None if bits == 32 else (adj.halo.mm(scale[0][:, None]),
                                                       adj.send.mm_t(scale[1][:, None]))}
    quant._unpack_into, quant.decode, Pending.wait = good_unpack, good_decode, wait
    return out


def test_quantised_exchange_through_gloo():
    """Every quantised value received is within one step ``s`` of the value sent, so the SpMM's
    output may err by at most ``sum_k |A_halo|_vk s_k`` in row v, and the gradient (the backward
    rows go through ``T^T``) by ``sum_m |T|_mu s_m``; the steps read off the wire are those of
    the rows sent: ``(max - min) / (2^b - 1) <= s <= (max - min + |min| / 128) / (2^b - 1)``,
    up to the bfloat16 rounding of ``s``. A broken 2-bit path breaks the bound."""
    res = run_ranks(_exchange_job, 2, args=(("32", "8", "2", "2-order", "2-scale"),), timeout=180)
    for r in res:
        ref = r["32"]
        y32, g32 = ref["y"], ref["grad"]
        n_send, n_recv = ref["n_send"], ref["n_recv"]
        assert ref["bytes"] == 4 * 16 * n_send + 4 * 16 * n_recv  # float32, forward + backward
        assert ref["halo_abs_min"] >= 0 and ref["send_abs_min"] >= 0  # |A| = A: the bounds below are sums
        for name in ("8", "2", "2-order", "2-scale"):
            v, bits = r[name], int(name[0])
            levels = 2 ** bits - 1
            assert v["rows"] == n_send + n_recv
            assert v["bytes"] == n_send * row_bytes(16, bits) + n_recv * row_bytes(16, bits)
            for true_rows, s in zip(ref["recv"], v["scale"]):  # the rows the quantised ones stand for
                lo, hi = true_rows.amin(1), true_rows.amax(1)
                assert (s >= (hi - lo) / levels).all()
                assert (s <= (hi - lo + lo.abs() / 128) / levels * (1 + 2 ** -7) + 1e-30).all()
            by, bg = v["bound"]
            dy, dg = (v["y"] - y32).abs(), (v["grad"] - g32).abs()
            ok_y = (dy <= by * (1 + 1e-4) + 1e-6 * y32.abs()).all()
            ok_g = (dg <= bg * (1 + 1e-4) + 1e-6 * g32.abs()).all()
            if name in ("8", "2"):
                assert ok_y and ok_g, name
                assert dy.max() > 0 and dg.max() > 0 and (dy.max() / by.max()) > 1e-3  # a real, used bound
                assert set(v["errors"]) == {("forward", 0), ("backward", 0)}
                e2, n2 = v["errors"][("forward", 0)]  # of the rows sent: each value within a step
                lo, hi = v["sent"].amin(1), v["sent"].amax(1)
                step = (hi - lo + lo.abs() / 128) / levels * (1 + 2 ** -7)
                assert 0 < e2 <= 16 * float((step ** 2).sum()) and abs(n2 - float((v["sent"] ** 2).sum())) <= 1e-5 * n2
            else:
                assert not (ok_y and ok_g), name  # the bound convicts a broken path


@pytest.mark.parametrize("argv, match", [
    (["train-gcn", "sbm:nodes=300", "--halo-bits", "3"], "invalid choice: 3"),
    (["train-gcn", "sbm:nodes=300", "--halo", "fast"], "invalid choice: 'fast'"),
    (["train-gcn", "sbm:nodes=300", "--halo", "auto", "--halo-error", "1.5"], "--halo-error must be in [0, 1), got 1.5"),
    (["train-gcn", "sbm:nodes=300", "--halo-bits", "8"], "--halo-bits 8 quantises the halo exchange, but a "
                                                         "1-part job has none"),
])
def test_impossible_settings_are_one_line(argv, match, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphdist: error: ") and match in err and err.count("\n") == 1
