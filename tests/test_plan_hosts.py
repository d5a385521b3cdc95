"""``graphdist plan --hosts H [--intra-gbps R]``: the halo bytes between hosts and within them,
and each link class's time, on a 12-node graph whose rows can be counted by hand (and are, by a
brute force over its edges below).

Parts (from an assignment): p0 = {0, 1, 2}, p1 = {3, 4, 5}, p2 = {6, 7, 8}, p3 = {9, 10, 11};
hosts (host-major, 2 ranks each): host 0 = {p0, p1}, host 1 = {p2, p3}. A rank sends a peer,
per exchange, the row of each owned node with an edge into that peer (``plain``). By hand:
p0->p1 {2}, p1->p0 {3, 4}, p1->p2 {5}, p2->p1 {6}, p1->p3 {4}, p3->p1 {9}, p2->p3 {8},
p3->p2 {9}, p0->p3 {0}, p3->p0 {11}: 11 rows, 6 of them between hosts, 5 within. Host 0's link
carries 3 rows out and 3 in, each direction at the rate, and a rank moves its own two
directions one after the other: p1 sends 2 rows to host 1 (5, 4) and receives 2 (6, 9): the
link takes 4; host 1 the same (p3: 9, 11 out, 4, 0 in). Within hosts the busiest rank (p0 or p1)
moves 3 rows. With a link per rank (no --hosts): p0 sends 2 and receives 3, p1 4 and 3, p2 2 and
2, p3 3 and 3: 5, 7, 4, 6."""
from __future__ import annotations

import json

import numpy as np
import pytest

from graphdist.cli import main

EDGES = [(0, 1), (1, 2), (2, 3), (2, 4), (5, 6), (4, 9), (8, 9), (10, 11), (0, 11), (7, 8)]
PARTS = np.repeat(np.arange(4), 3)
HOST = [0, 0, 1, 1]  # host of each part


def brute(edges, parts, hosts) -> dict:
    """Rows sent per epoch-exchange: (sender, receiver) pairs of (node, peer part), by class."""
    pairs = set()
    for u, v in edges:
        for a, b in ((u, v), (v, u)):
            if parts[a] != parts[b]:
                pairs.add((a, int(parts[b])))
    inter = [(u, p) for u, p in pairs if hosts[parts[u]] != hosts[p]]
    out, into = [0, 0], [0, 0]  # per host: rows sent and received across hosts
    for u, p in inter:
        out[hosts[parts[u]]] += 1
        into[hosts[p]] += 1
    across = [0] * 4  # per rank: rows it sends to and receives from other hosts
    for u, p in inter:
        across[parts[u]] += 1
        across[p] += 1
    link = [max(o, i, *[across[r] for r in range(4) if hosts[r] == h]) for h, (o, i) in enumerate(zip(out, into))]
    intra = [0] * 4  # per rank: rows sent + received within its host
    sent, got = [0] * 4, [0] * 4
    for u, p in pairs:
        sent[parts[u]] += 1
        got[p] += 1
        if hosts[parts[u]] == hosts[p]:
            intra[parts[u]] += 1
            intra[p] += 1
    flat = [sent[r] + got[r] for r in range(4)]  # a link per rank: its sends, then its receipts
    return {"all": len(pairs), "inter": len(inter), "link": link, "intra": intra, "flat": flat}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    root = tmp_path_factory.mktemp("hosts")
    (root / "g.txt").write_text("".join(f"{u} {v}\n" for u, v in EDGES))
    np.save(root / "a.npy", PARTS)
    spec = f"edgelist:{root / 'g.txt'},features=degree,labels=random:2"
    assert main(["partition", spec, "--assignment", str(root / "a.npy"), "--out", str(root / "p")]) == 0
    return root / "p"


def _plan(capsys, art, *flags) -> dict:
    """``graphdist plan --json``; with a given compute (``--compute-s``, 1 ms unless a flag sets
    it), so that nothing is timed on the box and the link's part is exact."""
    comp = [] if "--compute-s" in flags else ["--compute-s", "1e-3"]
    assert main(["plan", "--partition", str(art), "--halo", "plain", "--json", *comp, *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_bytes_and_times_per_link_class_match_a_count_by_hand(artifact, capsys):
    b = brute(EDGES, PARTS, HOST)
    assert (b["all"], b["inter"], b["link"], max(b["intra"]), b["flat"]) == (11, 6, [4, 4], 3, [5, 7, 4, 6])  # docstring
    out = _plan(capsys, artifact, "--hosts", "2", "--link-gbps", "0.1", "--intra-gbps", "2")
    total = out["comm/halo_bytes_per_epoch"]
    assert total > 0 and total % b["all"] == 0
    row = total // b["all"]  # bytes one message row costs per epoch (all its exchanges)
    assert out["hosts"] == 2
    assert out["comm/inter_host_bytes_per_epoch"] == b["inter"] * row
    assert out["comm/intra_host_bytes_per_epoch"] == (b["all"] - b["inter"]) * row
    assert out["time/inter_host_s_per_epoch"] == pytest.approx(max(b["link"]) * row * 8 / 0.1e9)
    assert out["time/intra_host_s_per_epoch"] == pytest.approx(max(b["intra"]) * row * 8 / 2e9)
    # the epoch is bounded by the slow link: the compute (1 ms) plus the busiest host's link
    assert out["time/epoch_s"] == pytest.approx(1e-3 + max(b["link"]) * row * 8 / 0.1e9)
    # within hosts through memory (no --intra-gbps): not charged
    mem = _plan(capsys, artifact, "--hosts", "2", "--link-gbps", "0.1")
    assert mem["time/intra_host_s_per_epoch"] == 0.0
    assert mem["time/inter_host_s_per_epoch"] == out["time/inter_host_s_per_epoch"]
    # one rank per host (no --hosts): every byte crosses, each rank's own link
    flat = _plan(capsys, artifact, "--link-gbps", "0.1")
    assert flat["comm/inter_host_bytes_per_epoch"] == total and flat["comm/intra_host_bytes_per_epoch"] == 0
    assert flat["time/inter_host_s_per_epoch"] == pytest.approx(max(b["flat"]) * row * 8 / 0.1e9)


def test_hosts_must_divide_the_ranks(artifact, capsys):
    assert main(["plan", "--partition", str(artifact), "--hosts", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--hosts 3 must divide the 4 ranks" in err[0]


def test_the_table_names_both_links(artifact, capsys):
    assert main(["plan", "--partition", str(artifact), "--halo", "plain", "--compute-s", "1e-3", "--hosts", "2",
                 "--link-gbps", "0.1"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("links ("))
    assert "2 hosts x 2 ranks" in line and "between hosts" in line and "memory, not charged" in line


def test_stale_halos_hide_the_training_exchanges_behind_the_compute(artifact, capsys):
    """With ``--compute-s C`` the epoch is ``C + training wire + evaluation wire`` exact and
    ``C + evaluation wire + max(0, training wire - C)`` with stale halos: the difference is
    ``min(C, training wire)``."""
    slow = ["--link-gbps", "1e-4", "--input-halo", "exchange"]  # stale halos exchange the input's rows too
    def gap(c):
        exact = _plan(capsys, artifact, *slow, "--compute-s", str(c))["time/epoch_s"]
        stale = _plan(capsys, artifact, *slow, "--compute-s", str(c), "--halo-staleness", "1")["time/epoch_s"]
        return exact - stale, exact - c
    small, wire = gap(1e-3)
    assert small == pytest.approx(1e-3, rel=1e-6)  # the whole compute hides wire
    big, _ = gap(1e3)
    assert 0 < big < wire  # all the training wire hides; the evaluation's does not
    assert 0.1 < (wire - big) / wire < 0.5  # the evaluation forward: one exchange per layer of two or three


def test_boundary_sampling_bytes_match_the_trainer(tmp_path, capsys):
    """The expected bytes of ``--boundary-rate 0.5`` (training exchanges at half the rows,
    evaluation whole) against a 2-rank run's mean over its epochs (the draws are keyed by the
    seed: the same every run)."""
    from tests.cli_ranks import run_cli
    spec = "sbm:nodes=3000,classes=4,avg_degree=10,features=8,seed=0"
    part = tmp_path / "p"
    assert main(["partition", spec, "--parts", "2", "--method", "metis", "--out", str(part)]) == 0
    capsys.readouterr()
    rep = tmp_path / "r.json"
    [(code, text)] = run_cli([["train-gcn", "--partition", str(part), "--halo", "plain", "--boundary-rate", "0.5",
                               "--epochs", "3", "--nproc", "2", "--no-progress", "--report", str(rep)]], 2)
    assert code == 0, text[-3000:]
    got = json.loads(rep.read_text())["comm/halo_bytes_per_epoch"]
    want = _plan(capsys, part, "--boundary-rate", "0.5")["comm/halo_bytes_per_epoch"]
    whole = _plan(capsys, part, "--input-halo", "exchange")["comm/halo_bytes_per_epoch"]  # sampling exchanges the input
    assert want < 0.8 * whole
    assert got == pytest.approx(want, rel=0.03)


def test_the_route_plan_is_counted_in_each_rank(artifact, capsys):
    """--halo-route hosts: each rank's memory counts the route's plan (its peak while built,
    from the rank's own message rows: graphdist.exchange.route_plan.plan_peak_bytes) and the
    buffers of its two phases; the direct route's does not. Without --hosts: one line."""
    from graphdist.exchange.route_plan import plan_index_bytes, plan_peak_bytes
    direct = _plan(capsys, artifact, "--hosts", "2")
    routed = _plan(capsys, artifact, "--hosts", "2", "--halo-route", "hosts")
    b = brute(EDGES, PARTS, HOST)
    pairs = {(u, int(PARTS[v])) for x, y in EDGES for u, v in ((x, y), (y, x)) if PARTS[u] != PARTS[v]}
    for r in range(4):
        sent = sum(1 for u, _ in pairs if PARTS[u] == r)
        got = sum(1 for _, p in pairs if p == r)
        want = plan_peak_bytes(sent, got, 2)
        assert routed["ranks"][r]["route_plan_bytes"] == want > plan_index_bytes(sent, got, 2) > 0, r
        assert direct["ranks"][r]["route_plan_bytes"] == 0
        assert routed["ranks"][r]["peak_bytes"] >= direct["ranks"][r]["peak_bytes"] + plan_index_bytes(sent, got, 2)
    assert b["all"] == len(pairs)
    assert main(["plan", "--partition", str(artifact), "--halo-route", "hosts"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--halo-route hosts: give the hosts the ranks run on with --hosts H" in err[0], err
