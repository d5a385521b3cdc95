"""The simulated link (``--link-gbps``): an exchange arrives no earlier than bytes / bandwidth
(+ latency) after it was posted; the result does not change, only the time."""
from __future__ import annotations

import time

import pytest
import torch

from graphdist.cli import main
from graphdist.partition.layout import build_layout
from graphdist.exchange.link import Link
from graphdist.testing import run_ranks

SPEC = "sbm:nodes=300,classes=3,avg_degree=5,features=8,seed=0"


def test_link_seconds():
    assert not Link(0, 0).active and Link(0, 0).seconds(10**9) == 0.0
    assert Link(1.0).seconds(125_000_000) == pytest.approx(1.0)  # 1 Gbit in one second
    assert Link(10.0, 50.0).seconds(1_250_000) == pytest.approx(1e-3 + 50e-6)
    t0 = time.perf_counter()
    Link(0.008).hold(t0, 20_000)  # 160 kbit at 8 Mbit/s: 20 ms
    assert time.perf_counter() - t0 >= 0.02


def _exchange_job(rank, ws):
    from graphdist.exchange.exchanger import HaloExchanger
    rows = 4000  # 4000 x 8 float32 = 128 kB each way
    out = {}
    for gbps in (0.0, 0.05):  # 128 kB at 50 Mbit/s: 20.48 ms
        ex = HaloExchanger(torch.arange(rows), [0, rows] if rank == 0 else [rows, 0],
                           [0, rows] if rank == 0 else [rows, 0], link=Link(gbps) if gbps else None)
        h = torch.full((rows, 8), float(rank))
        t0 = time.perf_counter()
        got = ex.post(h, 0).wait()
        out[gbps] = (time.perf_counter() - t0, float(got.mean()), ex.stats.bytes)
        t0 = time.perf_counter()
        back = ex.all_to_all(h, ex.send_counts, ex.recv_counts, ex.n_recv)  # the blocking path too
        out[("blocking", gbps)] = (time.perf_counter() - t0, float(back.mean()))
    return out


def test_exchange_waits_for_the_simulated_arrival():
    for rank, out in enumerate(run_ranks(_exchange_job, 2, timeout=120)):
        assert out[0.0][1] == out[0.05][1] == float(1 - rank)  # the peer's rows, unchanged
        assert out[0.05][2] == 4000 * 8 * 4
        assert out[0.05][0] >= 0.02048 and out[("blocking", 0.05)][0] >= 0.02048


def _train_job(rank, ws, graph, a):
    from graphdist.gnn.trainer import GCNConfig, fit
    from graphdist.runtime import init_distributed
    ctx = init_distributed("cpu")
    lg = build_layout(graph, a, rank, ws)
    base = dict(spec="t", hidden=8, epochs=3, seed=1, progress=False)
    plain = fit(GCNConfig(**base), lg, {}, ctx)
    slow = fit(GCNConfig(**base, link_gbps=0.01, link_latency_us=100), lg, {}, ctx)
    return plain, slow


def test_link_changes_time_not_result():
    from graphdist.data import load_graph
    g = load_graph(SPEC)
    plain, slow = run_ranks(_train_job, 2, args=(g, torch.arange(g.num_nodes) % 2), timeout=180)[0]
    assert slow["losses"] == plain["losses"] and slow["test_acc"] == plain["test_acc"]
    assert plain["comm/link"].startswith("none") and plain["time/link_wait_s_per_epoch"] == 0.0
    assert slow["comm/link"] == "simulated 0.01 Gbit/s, 100 us" and slow["comm/link_gbps"] == 0.01
    # every epoch moves comm/halo_bytes_per_epoch over both ranks; rank 0 alone waits for its share
    assert slow["time/link_wait_s_per_epoch"] > 0


@pytest.mark.parametrize("flag", ["--link-gbps", "--link-latency-us"])
def test_negative_link_is_one_line(flag, capsys):
    assert main(["train-gcn", SPEC, flag, "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{flag} must be >= 0" in err[0]
