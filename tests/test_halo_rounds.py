"""``--halo-rounds R``: the exchange in R all-to-alls of a slice of every peer's rows
(:mod:`graphdist.exchange.rounds`). The slices on paper; on k = 2 and 4 ranks (random parts, so
peers send uneven counts, and R above some counts, so some rounds are empty for some peers) the
logits and gradients equal PyG's and the one-round run's, 20 epochs of training give PyG's
losses, quantised rows cost the one-round bytes, and no more than two rounds are ever in
flight, each at most ceil(c / R) rows of a peer's c."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from graphdist.partition.layout import build_layout
from graphdist.exchange.rounds import round_of
from graphdist.gnn.models import GNN
from graphdist.testing import run_ranks
from tests.test_gcn_parity import (C, HID, MODELS, _dist_train, _rel_close, assignment, init_state, make_graph,
                                   pyg_reference, pyg_train_losses)

HALOS = ("plain", "mvc")


def test_round_slices_on_paper():
    rnd, per = round_of([5, 0, 3], 3)
    # peer 0: 5 rows -> slices [0:1], [1:3], [3:5]; peer 2: 3 rows -> one a round
    assert per == [[1, 0, 1], [2, 0, 1], [2, 0, 1]]
    assert rnd.tolist() == [0, 1, 1, 2, 2, 0, 1, 2]
    rnd, per = round_of([2], 4)  # more rounds than rows: empty rounds
    assert per == [[0], [1], [0], [1]] and rnd.tolist() == [1, 3]
    rnd, per = round_of([4, 7], 1)
    assert per == [[4, 7]] and rnd.tolist() == [0] * 11
    for counts, r in (([9, 1, 0, 13], 4), ([0, 0], 5), ([31], 7)):
        rnd, per = round_of(counts, r)
        assert [sum(p[i] for p in per) for i in range(len(counts))] == counts
        assert torch.equal(torch.bincount(rnd, minlength=r), torch.tensor([sum(p) for p in per]))
        at = 0
        for c in counts:  # within a peer's rows, rounds follow the row order: contiguous slices
            seg = rnd[at:at + c]
            assert bool((seg[1:] >= seg[:-1]).all()), (counts, r, seg)
            at += c


def _spy(ex):
    """Record, on ``ex``, the rows of every round posted and the most rounds in flight at once."""
    from graphdist.exchange import exchanger as exchange
    log = {"rows": [], "in_flight": 0, "max_in_flight": 0}
    start = ex._start

    def counted(rows, *a, **kw):
        pending = start(rows, *a, **kw)
        log["rows"].append(int(rows.shape[0]))
        log["in_flight"] += 1
        log["max_in_flight"] = max(log["max_in_flight"], log["in_flight"])
        wait = pending.wait

        def waited():
            if pending._rows is None:
                log["in_flight"] -= 1
            return wait()
        pending.wait = waited
        return pending
    ex._start = counted
    assert isinstance(ex, exchange.HaloExchanger)
    return log


def _case(rank, ws, graph, a, kind, state, halo, rounds, bits=32):
    from graphdist import comm
    from graphdist.exchange.exchanger import HaloExchanger
    from graphdist.exchange.spmm import SparseAdj
    lg = build_layout(graph, a, rank, ws).reordered("rcm")
    model = GNN(kind, graph.x.shape[1], HID, C, 3, dropout=0.0)
    model.load_state_dict(state)
    adj = SparseAdj.for_model(lg, kind, halo=halo)
    ex = HaloExchanger.from_local_graph(lg, halo=halo, bits=bits, seed=3)
    ex.in_rounds(rounds)
    adj.in_rounds(rounds, ex.send_counts, ex.recv_counts)
    log = _spy(ex)
    ex.set_step(0)
    out = model(lg.x, adj, ex)
    n_train = float(graph.train_mask.sum())
    loss = F.cross_entropy(out[lg.train_mask], lg.y[lg.train_mask], reduction="sum") / n_train
    loss.backward()
    comm.all_reduce_grads(model.parameters())
    peers = [max(ex.send_counts[p], ex.recv_counts[p]) for p in range(ws)]
    cap = sum(-(-c // rounds) for c in peers)
    return {"owned": lg.owned.numpy(), "out": out.detach().numpy(),
            "grads": {k: p.grad.numpy() for k, p in model.named_parameters()}, "bytes": ex.stats.bytes,
            "posts": len(log["rows"]), "max_in_flight": log["max_in_flight"],
            "round_rows_ok": all(r <= cap for r in log["rows"]), "sent": ex.n_send}


def _rank_job(rank, ws, graph, a, states):
    res = {}
    for kind in MODELS:
        for halo in HALOS:
            for rounds in (1, 3, 64):
                res[(kind, halo, rounds)] = _case(rank, ws, graph, a, kind, states[kind], halo, rounds)
    for rounds in (1, 3):
        res[("bits", rounds)] = _case(rank, ws, graph, a, "gcn", states["gcn"], "mvc", rounds, bits=8)
    res["train"] = {halo: _dist_train(rank, ws, graph, a, "gcn", halo=halo, halo_rounds=3) for halo in HALOS}
    return res


@pytest.mark.parametrize("k", [2, 4])
def test_rounds_equal_pyg_and_one_round(k):
    graph = make_graph()
    a = assignment(graph, k, "random")
    states = {kind: init_state(kind) for kind in MODELS}
    results = run_ranks(_rank_job, k, args=(graph, a, states), timeout=240)
    for kind in MODELS:
        ref, ref_grads = pyg_reference(graph, kind, states[kind])
        for halo in HALOS:
            for rounds in (1, 3, 64):
                logits = torch.zeros_like(ref)
                for r in range(k):
                    got = results[r][(kind, halo, rounds)]
                    one = results[r][(kind, halo, 1)]
                    logits[torch.from_numpy(got["owned"])] = torch.from_numpy(got["out"])
                    assert _rel_close(torch.from_numpy(got["out"]), torch.from_numpy(one["out"]), 1e-6)
                    for name, g in got["grads"].items():
                        assert _rel_close(torch.from_numpy(g), ref_grads[name]), (kind, halo, rounds, name)
                    # 3 layers forward, 2 backward (the first layer's input needs no gradient)
                    assert got["posts"] == 5 * rounds, (kind, halo, rounds, got["posts"])
                    assert got["max_in_flight"] == min(rounds, 2) and got["round_rows_ok"]
                    assert got["bytes"] == one["bytes"] > 0
                assert _rel_close(logits, ref.detach()), (kind, halo, rounds)
    for r in range(k):  # quantised rows: the same bytes in rounds, and close to the exact logits
        b1, b3 = results[r][("bits", 1)], results[r][("bits", 3)]
        assert b3["bytes"] == b1["bytes"] < results[r][("gcn", "mvc", 1)]["bytes"]
        exact = torch.from_numpy(results[r][("gcn", "mvc", 1)]["out"])
        assert _rel_close(torch.from_numpy(b3["out"]), exact, 0.05)
    torch.manual_seed(5)
    want = pyg_train_losses("gcn", graph, GNN("gcn", graph.x.shape[1], HID, C, 2, dropout=0.0).state_dict())
    for r in range(k):
        for halo in HALOS:
            got = results[r]["train"][halo]
            assert len(got) == 20 and max(abs(g - w) / abs(w) for g, w in zip(got, want)) <= 1e-5, (halo, got, want)


def test_rounds_refused_with_what_moves_whole():
    from graphdist.errors import ConfigError
    from graphdist.gnn.config import GCNConfig
    for kw, words in (({"halo_staleness": 1}, "--halo-staleness"), ({"boundary_rate": 0.5}, "--boundary-rate"),
                      ({"model": "gat"}, "--halo-rounds applies to --model gcn|sage"), ({}, "0..64")):
        cfg = GCNConfig(spec="sbm:nodes=100", halo_rounds=65 if not kw else 4, **kw)
        with pytest.raises(ConfigError, match=words):
            cfg.validate()


def _resume_job(rank, ws, graph, a, root):
    import json

    from graphdist import comm
    from graphdist.checkpoint import Checkpointer
    from graphdist.errors import ConfigError
    from graphdist.gnn.trainer import GCNConfig, fit
    from graphdist.runtime import init_distributed
    ctx = init_distributed("cpu")
    lg = build_layout(graph, a, rank, ws)
    base = dict(spec="t", layers=2, hidden=HID, dropout=0.5, epochs=6, seed=3, progress=False, checkpoint_every=3)
    full = fit(GCNConfig(**base, halo_rounds=3, checkpoint_dir=f"{root}/full"), lg, {}, ctx)
    fit(GCNConfig(**base, halo_rounds=3, checkpoint_dir=f"{root}/cut"), lg, {}, ctx,
        callbacks=[lambda epoch, hist: epoch == 3])
    resumed = fit(GCNConfig(**base, checkpoint_dir=f"{root}/cut", resume=True), lg, {}, ctx)  # 0: as recorded
    try:
        fit(GCNConfig(**base, halo_rounds=1, checkpoint_dir=f"{root}/cut", resume=True), lg, {}, ctx)
        refused = ""
    except ConfigError as e:
        refused = str(e)
    # a checkpoint written before --halo-rounds existed (no record of it): it ran in one round
    one = fit(GCNConfig(**base, halo_rounds=1), lg, {}, ctx)
    fit(GCNConfig(**base, halo_rounds=1, checkpoint_dir=f"{root}/old"), lg, {}, ctx,
        callbacks=[lambda epoch, hist: epoch == 3])
    comm.barrier()
    if rank == 0:
        ck = Checkpointer(f"{root}/old")
        meta = ck.read_meta(ck.latest())
        del meta["settings"]["halo_rounds"]
        (ck.latest() / "meta.json").write_text(json.dumps(meta))
    comm.barrier()
    old = fit(GCNConfig(**base, checkpoint_dir=f"{root}/old", resume=True), lg, {}, ctx)
    return (full["losses"], full["comm/halo_rounds"], resumed["losses"], resumed["comm/halo_rounds"], refused,
            one["losses"], old["losses"], old["comm/halo_rounds"])


def test_resume_keeps_the_recorded_rounds(tmp_path):
    graph = make_graph()
    out = run_ranks(_resume_job, 2, args=(graph, assignment(graph, 2, "random"), str(tmp_path)), timeout=180)
    for full, r_full, resumed, r_resumed, refused, one, old, r_old in out:
        assert r_full == r_resumed == 3 and len(full) == 6
        assert resumed == full  # bit for bit: the same rounds, so the same sums
        assert "--halo-rounds 3 -> 1" in refused, refused
        assert r_old == 1 and old == one  # resumed in one round, as it was written


def test_stale_halos_and_boundary_sampling_take_one_round():
    """--halo-rounds 0 never picks more than one round for exchanges that move whole, however
    little memory there is (plan and trainer share round_choices)."""
    from graphdist.gnn.config import GCNConfig
    from graphdist.gnn.decide import ROUNDS, Facts, decide, round_choices
    from graphdist.gnn.stats import part_stats
    assert round_choices(GCNConfig(), 4) == list(ROUNDS) and round_choices(GCNConfig(halo_rounds=8), 4) == [8]
    assert round_choices(GCNConfig(), 1) == [1]
    graph = make_graph()
    lg = build_layout(graph, assignment(graph, 2, "random"), 0, 2)
    facts = Facts(parts=[part_stats(lg)] * 2, f_in=lg.x.shape[1], n_classes=C, hosts=[0, 1], room=[1, 1],
                  ceiling=[None, None])  # room for nothing
    for kw in ({"halo_staleness": 1}, {"boundary_rate": 0.5}):
        cfg = GCNConfig(layers=2, hidden=HID, **kw)
        assert round_choices(cfg, 4) == [1]
        assert decide(cfg, facts)["rounds"] == 1  # fits nowhere: still 1
    assert decide(GCNConfig(layers=2, hidden=HID), facts)["rounds"] == ROUNDS[-1]


def test_a_split_adjacency_keeps_no_whole_block():
    """in_rounds replaces the whole halo and send operators by their rounds' blocks (no second
    copy), keeps their shapes and entry counts, and a product with an exchanger that is not in
    the same rounds is refused before anything moves."""
    from graphdist.exchange.exchanger import HaloExchanger
    from graphdist.exchange.csr import CSRPair
    from graphdist.exchange.spmm import SparseAdj
    graph = make_graph()
    lg = build_layout(graph, assignment(graph, 2, "random"), 0, 2)
    adj = SparseAdj.for_model(lg, "gcn", "cpu", halo="mvc")
    ex = HaloExchanger.from_local_graph(lg, "cpu", halo="mvc")
    whole = (adj.halo.shape, adj.halo.nnz, adj.send.shape, adj.send.nnz)
    assert whole[1] > 0 and whole[3] > 0
    adj.in_rounds(3, ex.send_counts, ex.recv_counts)
    assert not isinstance(adj.halo, CSRPair) and not isinstance(adj.send, CSRPair)
    assert (adj.halo.shape, adj.halo.nnz, adj.send.shape, adj.send.nnz) == whole
    blocks = adj.blocks()
    assert len(blocks) == 3 and sum(h.nnz for h, _ in blocks) == whole[1] and sum(t.nnz for _, t in blocks) == whole[3]
    # an exchanger as in a process group of 2 (this one's counts, one round); the check comes before any collective
    active = SimpleNamespace(active=True, rounds=1, n_send=ex.n_send, n_recv=ex.n_recv, send_idx=ex.send_idx)
    with pytest.raises(ValueError, match="in 1 round"):
        adj.propagate(torch.zeros(lg.num_owned, lg.x.shape[1]), active)
