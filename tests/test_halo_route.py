"""The two-level halo route across hosts (graphdist.exchange.route, ``--halo-route hosts``): the plan on
a graph checked on paper, the plan against the direct exchange simulated in one process, and
4 gloo ranks as 2 hosts x 2 training with the route equal to the direct exchange."""
from __future__ import annotations

import pytest
import torch

from graphdist.exchange.route import build_routes
from tests.conftest import requires_cuda


def _simulate(routes, rows):
    """Each rank's received rows after the routed forward exchange, moved in one process."""
    k = len(routes)
    sent1 = [list(torch.split(rows[s][routes[s].send1_idx], routes[s].send1_counts)) for s in range(k)]
    recv1 = [torch.cat([sent1[s][r] for s in range(k)]) for r in range(k)]
    sent2 = [list(torch.split(recv1[c][routes[c].send2_src], routes[c].send2_counts)) for c in range(k)]
    out = []
    for r in range(k):
        recv2 = torch.cat([sent2[c][r] for c in range(k)])
        o = torch.full((routes[r].n_recv,) + tuple(rows[r].shape[1:]), float("nan"))
        o[routes[r].recv1_pos] = recv1[r]
        o[routes[r].recv2_pos] = recv2
        out.append(o)
    return out


def _simulate_back(routes, grads):
    """Each rank's gradients of its send rows after the routed backward exchange, in one process."""
    k = len(routes)
    back2 = [list(torch.split(grads[q][routes[q].recv2_pos], routes[q].recv2_counts)) for q in range(k)]
    out1 = []
    for c in range(k):
        g = grads[c][routes[c].recv1_pos].clone()
        got = torch.cat([back2[q][c] for q in range(k)])
        g.index_add_(0, routes[c].send2_src, got)
        out1.append(list(torch.split(g, routes[c].recv1_counts)))
    res = []
    for s in range(k):
        o = grads[s].new_zeros((routes[s].n_send,) + tuple(grads[s].shape[1:]))
        o[routes[s].send1_idx] = torch.cat([out1[r][s] for r in range(k)])
        res.append(o)
    return res


def _direct(counts, rows):
    k = len(counts)
    parts = [list(torch.split(rows[s], counts[s])) for s in range(k)]
    return [torch.cat([parts[s][r] for s in range(k)]) for r in range(k)]


def _direct_back(counts, grads):
    k = len(counts)
    recv_counts = [[counts[s][r] for s in range(k)] for r in range(k)]
    parts = [list(torch.split(grads[r], recv_counts[r])) for r in range(k)]
    return [torch.cat([parts[r][s] for r in range(k)]) for s in range(k)]


def test_plan_on_paper():
    """4 ranks on 2 hosts ([0, 1] and [2, 3]). Rank 0 sends node 10 to ranks 1, 2 and 3, node 11
    to rank 2 and a partial sum to rank 3; rank 1 sends node 20 to ranks 2 and 3. Across hosts:
    node 10 once (to rank 2, the lower of the two that need it; rank 2 forwards it to rank 3),
    node 11 once, the partial sum (never shared), node 20 once (to rank 2, forwarded to 3):
    4 rows cross instead of 6."""
    keys = [torch.tensor([10, 10, 11, 10, -1]), torch.tensor([20, 20]), torch.zeros(0, dtype=torch.int64),
            torch.zeros(0, dtype=torch.int64)]
    counts = [[0, 1, 2, 2], [0, 0, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]]
    r = build_routes(keys, counts, [0, 0, 1, 1])
    # rank 0: 10 to rank 1 (same host), 10 and 11 to rank 2, only the partial sum to rank 3
    assert r[0].send1_idx.tolist() == [0, 1, 2, 4] and r[0].send1_counts == [0, 1, 2, 1]
    assert r[1].send1_idx.tolist() == [0] and r[1].send1_counts == [0, 0, 1, 0]
    assert (r[0].cross_send, r[1].cross_send) == (3, 1)
    # rank 2 receives [10, 11 | 20] and forwards its rows 0 (node 10) and 2 (node 20) to rank 3
    assert r[2].recv1_counts == [2, 1, 0, 0] and r[2].recv1_pos.tolist() == [0, 1, 2]
    assert r[2].send2_src.tolist() == [0, 2] and r[2].send2_counts == [0, 0, 0, 2]
    # rank 3's direct layout is [10, partial sum | 20]: the partial sum arrives directly (row 1),
    # 10 and 20 from rank 2 (rows 0 and 2)
    assert r[3].recv1_counts == [1, 0, 0, 0] and r[3].recv1_pos.tolist() == [1]
    assert r[3].recv2_counts == [0, 0, 2, 0] and r[3].recv2_pos.tolist() == [0, 2]
    assert (r[2].cross_back, r[3].cross_back) == (3, 1)
    assert sum(x.cross_send for x in r) == 4
    direct = build_routes(keys, counts, [0, 0, 1, 1], routed=False)
    assert sum(x.cross_send for x in direct) == 6 and all(x.send2_src.numel() == 0 for x in direct)
    # one rank per host: nothing to share, the route is the direct one
    one = build_routes(keys, counts, [0, 1, 2, 3])
    assert [x.send1_idx.tolist() for x in one] == [[0, 1, 2, 3, 4], [0, 1], [], []]


def test_plan_of_a_tiny_graph_on_paper():
    """Nodes 0, 1 on rank 0, 2 on rank 1 (isolated), 3 on rank 2, 4 on rank 3; edges 0-3, 1-3,
    0-4, 1-4; hosts [0, 1] and [2, 3]. plain: rank 0 sends rows 0 and 1 to both ranks of host 1,
    so they cross once each (to rank 2, which forwards them to rank 3): 4 rows between hosts
    against 6. mvc: rank 0 sends one partial sum for node 3 and one for node 4 (each destination
    has both sources), which are per destination and never shared: 4 rows either way."""
    from graphdist.data import Graph
    from graphdist.partition.layout import build_layouts
    from graphdist.exchange.route import send_keys
    g = Graph.from_edges(torch.tensor([0, 1, 0, 1]), torch.tensor([3, 3, 4, 4]), 5, x=torch.ones(5, 1),
                         y=torch.zeros(5, dtype=torch.int64), train_mask=torch.ones(5, dtype=torch.bool))
    plans = build_layouts(g, torch.tensor([0, 0, 1, 2, 3]), 4)
    hosts = [0, 0, 1, 1]
    for halo, want_keys, direct, routed in (("plain", [0, 1, 0, 1], 6, 4), ("mvc", [-1, -1], 4, 4)):
        ks = [send_keys(p, halo) for p in plans]
        assert ks[0][0].tolist() == want_keys and ks[0][1] == [0, 0, len(want_keys) // 2, len(want_keys) // 2]
        assert ks[2][0].tolist() == [3] and ks[3][0].tolist() == [4]  # raw: one row to rank 0 each
        for is_routed, want in ((False, direct), (True, routed)):
            r = build_routes([k[0] for k in ks], [k[1] for k in ks], hosts, routed=is_routed)
            assert sum(x.cross_send for x in r) == want, (halo, is_routed)
        if halo == "plain":  # rank 2 forwards rows 0 and 1 (its phase-1 rows 0, 1) to rank 3
            assert r[0].send1_counts == [0, 0, 2, 0] and r[2].send2_src.tolist() == [0, 1]
            assert r[3].recv2_counts == [0, 0, 2, 0] and r[3].recv2_pos.tolist() == [0, 1]


@pytest.mark.parametrize("hosts", [[0, 0, 1, 1], [0, 0, 0, 1, 1, 2], [0, 1, 1, 1]])
def test_plan_moves_what_the_direct_exchange_moves(hosts):
    """Random send lists (raw rows shared by several peers, partial sums): every rank receives the
    direct exchange's rows bit for bit; backward, each (row, sender) gets the same gradient sum,
    partial sums their own gradient; each (raw row, host) crosses at most once."""
    g = torch.Generator().manual_seed(len(hosts))
    k = len(hosts)
    keys, counts = [], []
    for s in range(k):
        ks, cs = [], []
        for p in range(k):
            if p == s:
                cs.append(0)
                continue
            raw = torch.unique(torch.randint(0, 12, (int(torch.randint(0, 9, (1,), generator=g)),), generator=g))
            pre = int(torch.randint(0, 3, (1,), generator=g))
            ks.append(torch.cat([raw + 100 * s, torch.full((pre,), -1)]))
            cs.append(raw.numel() + pre)
        keys.append(torch.cat(ks))
        counts.append(cs)
    routes = build_routes(keys, counts, hosts)
    assert sum(r.send2_src.numel() for r in routes) > 0  # some rows are forwarded
    table = torch.randn(100 * k, 3, generator=g)  # a raw row is the same row to every peer
    rows = [torch.where((kk >= 0)[:, None], table[kk.clamp(min=0)], torch.randn(kk.numel(), 3, generator=g))
            for kk in keys]
    got, want = _simulate(routes, rows), _direct(counts, rows)
    for r in range(k):
        assert torch.equal(got[r], want[r])
    grads = [torch.randn(routes[r].n_recv, 3, generator=g, dtype=torch.float64) for r in range(k)]
    gb, wb = _simulate_back(routes, grads), _direct_back(counts, grads)
    for s in range(k):
        raw = keys[s] >= 0
        assert torch.equal(gb[s][~raw], wb[s][~raw])
        ids = torch.unique(keys[s][raw])
        for u in ids.tolist():
            at = keys[s] == u
            assert torch.allclose(gb[s][at].sum(0), wb[s][at].sum(0), rtol=1e-12, atol=1e-12)
    moved = 0
    for s in range(k):
        far = [hosts[p] != hosts[s] for p in range(k)]
        dst = torch.repeat_interleave(torch.arange(k), torch.tensor(counts[s]))
        pairs = {(int(u), hosts[int(p)]) for u, p in zip(keys[s], dst) if u >= 0 and far[int(p)]}
        pre = int(((keys[s] < 0) & torch.tensor(far)[dst]).sum())
        assert routes[s].cross_send == len(pairs) + pre
        moved += routes[s].cross_send
    assert sum(r.cross_back for r in routes) == moved


def _random_lists(hosts, seed):
    """Send lists of ``len(hosts)`` ranks: raw rows shared by several peers (ids 100 s + 0..11)
    and partial sums (-1)."""
    g = torch.Generator().manual_seed(seed)
    k = len(hosts)
    keys, counts = [], []
    for s in range(k):
        ks, cs = [], []
        for p in range(k):
            if p == s:
                cs.append(0)
                continue
            raw = torch.unique(torch.randint(0, 12, (int(torch.randint(0, 9, (1,), generator=g)),), generator=g))
            pre = int(torch.randint(0, 3, (1,), generator=g))
            ks.append(torch.cat([raw + 100 * s, torch.full((pre,), -1)]))
            cs.append(raw.numel() + pre)
        keys.append(torch.cat(ks) if ks else torch.zeros(0, dtype=torch.int64))
        counts.append(cs)
    return keys, counts


def _plans_alone(keys, counts, hosts, n_keys):
    """Every rank's plan as gather_route builds it on a job (each rank from its own list, one
    all-to-all of the senders' messages, moved here in one process)."""
    from graphdist.exchange.route import RankRoute
    from graphdist.exchange.route_plan import receiver_plan, sender_plan
    k = len(hosts)
    sides = [sender_plan(s, keys[s], counts[s], hosts, n_keys) for s in range(k)]
    parts = [list(torch.split(sd.message, sd.message_counts)) for sd in sides]
    out = []
    for r in range(k):
        got = torch.cat([parts[s][r] for s in range(k)])
        recv = receiver_plan(r, [counts[s][r] for s in range(k)], hosts, got, [sd.message_counts[r] for sd in sides])
        out.append(RankRoute(rank=r, hosts=list(hosts), routed=True, n_send=sum(counts[r]),
                             n_recv=sum(counts[s][r] for s in range(k)), send1_idx=sides[r].send1_idx,
                             send1_counts=sides[r].send1_counts, cross_send=sides[r].cross_send, **recv))
    return out


def _same_plan(a, b) -> None:
    import dataclasses
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, torch.Tensor):
            assert torch.equal(x.cpu(), y.cpu()), (a.rank, f.name, x, y)
        else:
            assert x == y, (a.rank, f.name, x, y)


@pytest.mark.parametrize("hosts", [[0, 0, 1, 1], [0, 0, 0, 1, 1, 2], [0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1]])
def test_each_rank_plans_from_its_own_list_what_the_whole_plan_says(hosts):
    """The bounded plan (each rank from its own send list and what the senders tell it) is
    build_routes' plan from every rank's lists, field by field; and what a rank receives to
    build it is one row per message row it receives from another host plus one per row it
    forwards: no rank sees another's send list."""
    keys, counts = _random_lists(hosts, len(hosts) + 7)
    want = build_routes(keys, counts, hosts)
    got = _plans_alone(keys, counts, hosts, 100 * len(hosts))
    assert sum(r.send2_src.numel() for r in want) > 0
    for a, b in zip(got, want):
        _same_plan(a, b)
    from graphdist.exchange.route_plan import sender_plan
    k = len(hosts)
    sides = [sender_plan(s, keys[s], counts[s], hosts, 100 * k) for s in range(k)]
    for r in range(k):
        far_in = sum(counts[s][r] for s in range(k) if hosts[s] != hosts[r])
        assert sum(sd.message_counts[r] for sd in sides) == far_in + want[r].send2_src.numel()


def test_the_route_lives_where_the_rows_are():
    """The exchanger moves its route's index tensors to its device (torch takes no index from
    another device: a CUDA run indexed CUDA rows with CPU indices); the plan refuses rows of
    another device in one line. Checked here on the meta device."""
    from graphdist.exchange.exchanger import HaloExchanger
    from graphdist.exchange.route import RankRoute
    keys, counts = _random_lists([0, 0, 1, 1], 3)
    r = build_routes(keys, counts, [0, 0, 1, 1])[2]
    assert r.device.type == "cpu" and r.to("cpu") is r
    n_recv = r.n_recv
    recv_counts = [counts[s][2] for s in range(4)]
    ex = HaloExchanger(None, counts[2], recv_counts, "meta", mode="mvc", route=r)
    assert all(getattr(ex.route, f).device.type == "meta" for f in RankRoute.INDEX_FIELDS)
    assert r.send1_idx.device.type == "cpu"  # the plan given is left as it was
    with pytest.raises(ValueError, match="the route's index tensors are on cpu but the rows on meta") as e:
        r.start(torch.zeros(r.n_send, 3, device="meta"), "forward", None, None)
    assert "\n" not in str(e.value) and n_recv == sum(recv_counts)


def _plan_fields(route, counts_only=False) -> dict:
    """A plan as plain values (index tensors as lists, unless ``counts_only``)."""
    import dataclasses
    return {f.name: (getattr(route, f.name).tolist() if isinstance(getattr(route, f.name), torch.Tensor)
                     else getattr(route, f.name))
            for f in dataclasses.fields(route)
            if not (counts_only and isinstance(getattr(route, f.name), torch.Tensor))}


def _as_hosts(rank, per_host):
    """The forked ranks' job placed on hosts of ``per_host`` ranks, host-major: what the ranks of a
    job on real hosts agree on as their group forms (:mod:`graphdist.hosts`; these share one)."""
    import torch.distributed as dist

    from graphdist import hosts
    ws = dist.get_world_size()
    hosts.set_placement(hosts.Placement.host_major(ws, ws // per_host), dist.group.WORLD)


def _exchange_case(rank, ws, graph, a, state, halo):
    """One forward and backward of a 3-layer GCN through the direct and the routed exchanger."""
    import torch.nn.functional as F

    from graphdist import comm
    from graphdist.gnn.models import GNN
    from graphdist.partition.layout import build_layout
    from graphdist.exchange.exchanger import HaloExchanger
    from graphdist.exchange.route import gather_route
    from graphdist.exchange.spmm import SparseAdj
    from tests.test_gcn_parity import C, HID
    lg = build_layout(graph, a, rank, ws).reordered("rcm")
    adj = SparseAdj.for_model(lg, "gcn", halo=halo)
    res = {}
    # the plan built on the job from this rank's own list is the whole plan's share of this rank
    from graphdist.exchange.route import build_routes, send_keys
    every = [send_keys(build_layout(graph, a, r, ws).reordered("rcm"), halo) for r in range(ws)]
    want = build_routes([e[0] for e in every], [e[1] for e in every], [r // 2 for r in range(ws)], ranks=[rank])[0]
    on_meta = gather_route(lg, halo, True, device="meta")[0]
    for routed in (False, True):
        route, info = gather_route(lg, halo, routed)
        if routed:
            res["same_plan"] = _plan_fields(route) == _plan_fields(want)
            res["meta"] = sorted({getattr(on_meta, f).device.type for f in route.INDEX_FIELDS})
            res["meta_counts"] = _plan_fields(on_meta, counts_only=True) == _plan_fields(want, counts_only=True)
        ex = HaloExchanger.from_local_graph(lg, halo=halo, route=route)
        model = GNN("gcn", graph.x.shape[1], HID, C, 3, dropout=0.0)
        model.load_state_dict(state)
        out = model(lg.x, adj, ex)
        loss = F.cross_entropy(out[lg.train_mask], lg.y[lg.train_mask], reduction="sum")
        loss.backward()
        comm.all_reduce_grads(model.parameters())
        res[routed] = {"out": out.detach(), "grads": {k: p.grad for k, p in model.named_parameters()},
                       "host_bytes": ex.stats.host_bytes, "info": info, "routed": ex.routed}
    return res


def _train_case(rank, ws, graph, a, halo, route, input_halo):
    import torch.distributed as dist

    from graphdist.gnn.trainer import GCNConfig, fit
    from graphdist.partition.layout import build_layout
    from graphdist.procgroup import init_distributed
    from tests.test_gcn_parity import HID
    cfg = GCNConfig(spec="test", layers=3, hidden=HID, epochs=4, seed=5, progress=False, halo=halo,
                    halo_route=route, input_halo=input_halo)
    cfg.validate()
    r = fit(cfg, build_layout(graph, a, rank, ws), {}, init_distributed("cpu") if dist.is_initialized() else None)
    return {k: r[k] for k in ("losses", "comm/halo_route", "comm/halo_bytes_between_hosts_per_epoch",
                              "comm/halo_bytes_per_epoch")}


def _rank_job(rank, ws, graph, a, state):
    _as_hosts(rank, 2)
    res = {("exchange", halo): _exchange_case(rank, ws, graph, a, state, halo) for halo in ("plain", "mvc")}
    for halo, input_halo in (("plain", "resident"), ("mvc", "exchange")):
        for route in ("direct", "hosts"):
            res[("train", halo, route)] = _train_case(rank, ws, graph, a, halo, route, input_halo)
    return res


def test_hosts_route_equals_direct_on_4_ranks():
    """4 gloo ranks placed as 2 hosts x 2 (:func:`_as_hosts`), random parts:
    the routed exchanger gives the direct one's logits bit for bit and its gradients to 1e-6,
    with fewer bytes between hosts; training plain and mvc (4 epochs, dropout) gives the direct
    route's losses (the first bit for bit: forward only), and the report says which route ran."""
    from graphdist.testing import run_ranks
    from tests.test_gcn_parity import assignment, init_state, make_graph, _rel_close
    graph = make_graph()
    a = assignment(graph, 4, "random")
    res = run_ranks(_rank_job, 4, args=(graph, a, init_state("gcn")), timeout=240)
    for halo in ("plain", "mvc"):
        for r in range(4):  # each rank's plan from its own list is the whole plan's; on the device asked for
            assert res[r][("exchange", halo)]["same_plan"] and res[r][("exchange", halo)]["meta_counts"], (halo, r)
            assert res[r][("exchange", halo)]["meta"] == ["meta"], (halo, r)
        info = res[0][("exchange", halo)][True]["info"]
        assert info["hosts"] == 2 and info["ranks_per_host"] == [2]
        assert 0 < info["rows_between_hosts"] < info["rows_between_hosts_direct"], info
        hb = [sum(res[r][("exchange", halo)][routed]["host_bytes"] for r in range(4)) for routed in (False, True)]
        assert 0 < hb[1] < hb[0], (halo, hb)
        for r in range(4):
            d, h = res[r][("exchange", halo)][False], res[r][("exchange", halo)][True]
            assert h["routed"] and not d["routed"]
            assert torch.equal(d["out"], h["out"]), (halo, r)
            for name, g in d["grads"].items():
                assert _rel_close(h["grads"][name], g, 1e-6), (halo, r, name)
        d, h = res[0][("train", halo, "direct")], res[0][("train", halo, "hosts")]
        assert (d["comm/halo_route"], h["comm/halo_route"]) == ("direct", "hosts")
        assert 0 < h["comm/halo_bytes_between_hosts_per_epoch"] < d["comm/halo_bytes_between_hosts_per_epoch"]
        assert h["losses"][0] == d["losses"][0] and len(h["losses"]) == 4
        assert max(abs(x - y) / abs(y) for x, y in zip(h["losses"], d["losses"])) <= 1e-6, (halo, h, d)


@pytest.mark.parametrize("kw, words", [
    ({"halo_bits": 8}, "--halo-bits 8"), ({"halo": "auto"}, "--halo auto"),
    ({"halo_rounds": 2}, "--halo-rounds 2"), ({"halo_staleness": 1}, "--halo-staleness 1"),
    ({"boundary_rate": 0.5}, "--boundary-rate 0.5"), ({"eval_halo_bits": 16}, "--eval-halo-bits 16"),
    ({"link_gbps": 1.0}, "--link-gbps"), ({"model": "gat"}, "--model gat")])
def test_refusals_name_the_flags(kw, words):
    from graphdist.errors import ConfigError
    from graphdist.gnn.config import GCNConfig
    with pytest.raises(ConfigError, match="--halo-route hosts cannot be combined with " + words) as e:
        GCNConfig(spec="sbm:nodes=100", halo_route="hosts", **kw).validate()
    assert "\n" not in str(e.value)


def test_refusal_on_the_command_line(capsys):
    from graphdist.cli import main
    code = main(["train-gcn", "sbm:nodes=100", "--halo-route", "hosts", "--halo-bits", "8", "--halo-staleness", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--halo-route hosts cannot be combined with --halo-bits 8, --halo-staleness 1" in err


def _cuda_job(rank, ws, graph, a):
    """The routed and the direct exchange on CUDA rows (gloo carries CUDA tensors; the four
    ranks share one GPU), through the trainer as a run builds them: the report of each route."""
    import dataclasses

    import torch.distributed as dist

    from graphdist.gnn.trainer import GCNConfig, fit
    from graphdist.partition.layout import build_layout
    from graphdist.procgroup import init_distributed
    from tests.test_gcn_parity import HID
    _as_hosts(rank, 2)
    ctx = init_distributed("cpu") if dist.is_initialized() else None
    out = {}
    for dev in ("cpu", "cuda"):
        for route in ("direct", "hosts"):
            cfg = GCNConfig(spec="test", layers=3, hidden=HID, epochs=3, seed=5, progress=False, halo="mvc",
                            halo_route=route)
            cfg.validate()
            r = fit(cfg, build_layout(graph, a, rank, ws), {}, dataclasses.replace(ctx, device=torch.device(dev, 0)
                                                                                  if dev == "cuda" else torch.device("cpu")))
            out[(dev, route)] = (r["losses"], r["comm/halo_route"], r["device"])
    return out


@requires_cuda
def test_hosts_route_on_cuda():
    """--halo-route hosts on CUDA (4 gloo ranks on one GPU as 2 hosts x 2): the route's index
    tensors are moved to the rows' device, and the losses are the CPU run's (to 1e-5) and the
    direct route's."""
    from graphdist.testing import run_ranks
    from tests.test_gcn_parity import assignment, make_graph
    graph = make_graph()
    res = run_ranks(_cuda_job, 4, args=(graph, assignment(graph, 4, "random")), timeout=300)[0]
    cpu, gpu = res[("cpu", "hosts")], res[("cuda", "hosts")]
    assert gpu[1] == "hosts" and gpu[2].startswith("cuda") and res[("cuda", "direct")][1] == "direct"
    for ref in (cpu[0], res[("cuda", "direct")][0]):
        assert max(abs(x - y) / abs(y) for x, y in zip(gpu[0], ref)) <= 1e-5, (gpu, ref)
