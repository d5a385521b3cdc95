"""``--input-halo resident`` (:mod:`graphdist.exchange.resident`): the features' halo rows are
received once and their dropout mask drawn by the rank that reads them, so the first layer
exchanges nothing. On k = 1, 2 and 4 ranks (random parts: uneven peers), plain and mvc, one and
two exchange rounds, dropout on: the training losses equal the exchanged run's bit for bit, and
the halo bytes per epoch drop by exactly the first layer's rows (training and evaluation
forward); ``plan`` predicts both byte counts and counts the held rows' memory."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from graphdist.partition.layout import build_layout
from graphdist.testing import run_ranks

SPEC = "sbm:nodes=240,classes=3,avg_degree=6,features=10,seed=1"
HID = 8  # 10 features < 2 x 8: the first layer propagates its input (graphdist.gnn.models)


def _graph():
    from graphdist.data import load_graph
    return load_graph(SPEC)


def _cfg(**kw):
    from graphdist.gnn.config import GCNConfig
    base = dict(spec="t", layers=2, hidden=HID, dropout=0.5, epochs=4, seed=3, progress=False, halo_rounds=1)
    return GCNConfig(**{**base, **kw})


def _job(rank, ws, graph, a):
    from graphdist.gnn.trainer import fit
    from graphdist.runtime import init_distributed
    ctx = init_distributed("cpu")
    lg = build_layout(graph, a, rank, ws)
    out = {}
    for halo in ("plain", "mvc"):
        for rounds in (1, 2):
            for inp in ("exchange", "resident"):
                rep = fit(_cfg(halo=halo, halo_rounds=rounds, input_halo=inp), lg, {}, ctx)
                out[(halo, rounds, inp)] = (rep["losses"], rep["comm/halo_bytes_per_epoch"], rep["comm/input_halo"],
                                            rep["val_acc"])
    lay = lg.exchange_layout("mvc")
    return out, {"plain": sum(lg.send_counts), "mvc": sum(lay.send_counts)}


@pytest.mark.parametrize("k", [2, 4])
def test_held_input_rows_give_the_exchanged_losses_bit_for_bit(k):
    g = _graph()
    a = torch.randint(0, k, (g.num_nodes,), generator=torch.Generator().manual_seed(k))
    res = run_ranks(_job, k, args=(g, a), timeout=300)
    out, sent = res[0][0], [r[1] for r in res]
    for halo in ("plain", "mvc"):
        rows = sum(s[halo] for s in sent)
        for rounds in (1, 2):
            ex, held = out[(halo, rounds, "exchange")], out[(halo, rounds, "resident")]
            assert ex[2] == "exchange" and held[2] == "resident"
            assert held[0] == ex[0], (halo, rounds)  # every training loss, bit for bit
            # the first layer's rows go in training forward (10 wide: propagated first) and
            # evaluation (8 wide: its linear first); the second layer's (3 wide: linear first)
            # in training forward, backward and evaluation
            assert ex[1] == rows * 4 * (10 + 8 + 3 * 3), (halo, rounds)
            assert held[1] == rows * 4 * 3 * 3, (halo, rounds)
            assert len(held[3]) == len(ex[3]) == 4


def test_one_rank_has_nothing_to_hold():
    from graphdist.gnn.trainer import fit
    from graphdist.runtime import init_distributed
    g = _graph()
    ctx = init_distributed("cpu")
    lg = build_layout(g, torch.zeros(g.num_nodes, dtype=torch.int64), 0, 1)
    a = fit(_cfg(input_halo="resident"), lg, {}, ctx)
    b = fit(_cfg(input_halo="exchange"), lg, {}, ctx)
    assert a["losses"] == b["losses"] and a["comm/halo_bytes_per_epoch"] == 0


def test_plan_counts_held_rows_and_their_saving():
    from graphdist.gnn.decide import input_held_why_not
    from graphdist.gnn.plan import PlanConfig, plan
    base = PlanConfig(spec=SPEC, parts=2, method="random", layers=2, hidden=HID, halo="plain", spmm_rate=1e9)
    ex = plan(dataclasses.replace(base, input_halo="exchange"))
    held = plan(dataclasses.replace(base, input_halo="resident"))
    assert held["comm/halo_bytes_per_epoch"] * (10 + 8 + 9) == ex["comm/halo_bytes_per_epoch"] * 9
    for r_ex, r_held in zip(ex["ranks"], held["ranks"]):
        assert r_ex["held_halo_bytes"] == 0 and r_held["held_halo_bytes"] == r_held["halo_rows"] * 10 * 4
    assert input_held_why_not(dataclasses.replace(base, halo_bits=8), 2).startswith("--halo-bits 8")
    assert input_held_why_not(base, 1) == "one rank: no halo"


def _fallback_job(rank, ws, graph, a):
    from graphdist.gnn import facts as gathered
    from graphdist.gnn import trainer
    from graphdist.gnn.decide import decide
    from graphdist.runtime import init_distributed
    ctx = init_distributed("cpu")
    lg = build_layout(graph, a, rank, ws)
    held = trainer.fit(_cfg(), lg, {}, ctx)
    facts = dataclasses.replace(gathered.gather_facts(_cfg(), lg, ctx), room=[2**62] * ws)
    need = {inp: max(decide(_cfg(input_halo=inp), facts).memory["need_bytes_per_host"])
            for inp in ("resident", "exchange")}
    assert need["exchange"] < need["resident"]
    real = gathered.available_bytes, gathered.resident_bytes  # this machine: room for the exchange only
    gathered.available_bytes, gathered.resident_bytes = (lambda: (need["exchange"] + need["resident"]) // 2), (lambda: 0)
    try:
        fell = trainer.fit(_cfg(), lg, {}, ctx)
    finally:
        gathered.available_bytes, gathered.resident_bytes = real
    return held, fell


def test_rows_that_do_not_fit_fall_back_to_the_exchange():
    g = _graph()
    a = torch.arange(g.num_nodes) % 2
    held, fell = run_ranks(_fallback_job, 2, args=(g, a), timeout=240)[0]
    assert held["comm/input_halo"] == "resident" and fell["comm/input_halo"] == "exchange"
    assert fell["config"]["input_halo"] == "exchange"
    assert fell["losses"] == held["losses"]
    assert fell["comm/halo_bytes_per_epoch"] > held["comm/halo_bytes_per_epoch"]
