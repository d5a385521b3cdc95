"""``--sparse-groups auto`` (embeddings/auto.py, embeddings/cost.py): the candidates' bytes and
the choice counted on paper for small hand-made cases, and a resume that keeps the layout.

The hand-made data: 26 tables of 8 rows, D = 8, single-hot, sample s looks up row s mod 8 of
every table, so any 4 consecutive samples touch 4 rows of a table and any 8 touch all 8. The
dense layers are one Linear(13, 8) (112 parameters) and the over arch Linear(359, 4) and
Linear(4, 1) (D + 27 x 26 / 2 = 359 inputs: 1445 parameters): 1557 x 4 = 6228 bytes of gradients.
"""
from __future__ import annotations

import numpy as np
import pytest

from embeddings.cost import Links
from graphdist.testing import run_ranks
from graphdist.errors import ConfigError

D, ROWS, B = 8, 8, 8
DENSE_BYTES = 4 * (13 * D + D + (D + 27 * 26 // 2) * 4 + 4 + 4 + 1)  # 6228
ROW_BYTES = 4 * (D + 1)  # a row and its row-wise AdaGrad state


def _data(n=16):
    from embeddings.data import ClickData
    cat = np.tile((np.arange(n) % ROWS)[:, None, None], (1, 26, 1)).astype(np.int64)
    return ClickData(dense=np.zeros((n, 13), np.float32), cat=cat, labels=(np.arange(n) % 2).astype(np.float32),
                     num_embeddings=[ROWS] * 26)


def _cfg(**kw):
    from embeddings.config import DLRMTrainConfig
    from embeddings.model import ModelConfig
    return DLRMTrainConfig(sharding="table_wise", batch_size=B, sparse_groups="auto", print_plan=False,
                           progress=False, model=ModelConfig(embedding_dim=D, dense_arch=[], over_arch=[4]), **kw)


def _links(inter, lat=1e-3):
    return Links(compute_s=0.010, a2a_latency_s=lat, allreduce_latency_s=lat, intra_bytes_per_s=1e12,
                 inter_bytes_per_s=inter)


def test_two_hosts_of_one_rank_order_flips_with_the_link():
    """W = 2 on 2 hosts (L = 1): 1D table_wise (13 tables per rank) or G = 2 (each rank holds
    all 26 tables; no all-to-all, a replica sync instead).

    1D, per step, b = 4 samples per rank, per table: the other rank sends 4 x (1 id + 1 length)
    x 8 B = 64 B of ids and, backward, 4 x 8 x 4 B = 128 B of gradients; the owner sends 128 B
    of pooled rows: 320 B cross per table, 8320 B for 26; the dense all-reduce (a ring of two)
    moves 6228 B each way: 12456 B. Collectives: 5 all-to-alls, 1 all-reduce.
    G = 2: a replica's 4 samples touch 4 rows of each of 26 tables (104 ids, 832 B each way),
    the 8 of the step 8 rows (208 rows x 36 B = 7488 B each way); with the dense 12456 B:
    1664 + 14976 + 12456 = 29096 B. Collectives: the dense all-reduce and the sync's 2
    all-gathers and 1 all-reduce (4).

    A step is the ranks' work plus the link's time (gloo's collectives block; embeddings/cost.py).
    At 10 ms of compute and 1 ms per collective: 1D 16 ms + 20776 B / rate; G = 2 14 ms +
    (12456 + 16640) B / rate: 1D is faster below 8320 B / 2 ms = 4.16 MB/s, G = 2 above. auto
    keeps 1D until G = 2's estimate is 10% under it (embeddings.auto.ONE_D_MARGIN):
    0.014 + 29096 / rate < 0.9 x (0.016 + 20776 / rate) above (29096 - 18698.4) B / 0.4 ms = 26.0 MB/s."""
    from embeddings.auto import choose, evaluate
    cands = evaluate(_cfg(), _data(), 2, 1, "cpu", budget=1 << 30)
    assert [(c["sparse_groups"], c["sparse_layout"]) for c in cands] == [(1, "hosts"), (2, "hosts")]
    assert cands[0]["memory_bytes"] == 13 * ROWS * ROW_BYTES and cands[1]["memory_bytes"] == 26 * ROWS * ROW_BYTES
    slow, fast = choose(cands, _links(1e6), 2), choose(cands, _links(1e8), 2)
    est = {c["sparse_groups"]: c["estimate"] for c in slow["candidates"]}
    assert est[1]["between_hosts_bytes_per_step"] == 26 * 320 + 2 * DENSE_BYTES == 20776
    assert est[2]["between_hosts_bytes_per_step"] == 2 * 26 * 4 * 8 + 2 * 26 * 8 * ROW_BYTES + 2 * DENSE_BYTES == 29096
    assert est[1]["latency_s"] == pytest.approx(6e-3) and est[2]["latency_s"] == pytest.approx(4e-3)
    assert est[1]["between_hosts_s"] == pytest.approx(20776 / 1e6)
    assert est[1]["step_s"] == pytest.approx(0.016 + 20776 / 1e6)
    assert est[2]["between_hosts_s"] == pytest.approx(12456 / 1e6)
    assert est[2]["sync_between_hosts_s"] == pytest.approx(16640 / 1e6)
    assert est[2]["step_s"] == pytest.approx(0.014 + 29096 / 1e6)
    assert slow["sparse_groups"] == 1 and fast["sparse_groups"] == 2
    fast_est = {c["sparse_groups"]: c["estimate"]["step_s"] for c in fast["candidates"]}
    assert fast_est == {1: pytest.approx(0.016 + 20776 / 1e8), 2: pytest.approx(0.014 + 29096 / 1e8)}
    # the sync crosses at the ring's rate where one was measured (both directions at once)
    ring = Links(**{**_links(1e6).__dict__, "ring_bytes_per_s": 2e6})
    assert choose(cands, ring, 2)["candidates"][1]["estimate"]["sync_between_hosts_s"] == pytest.approx(16640 / 2e6)
    # the sync's own work: the step's 8 samples touch 8 rows of each of the 26 tables
    work = Links(**{**_links(1e8).__dict__, "sync_row_s": 1e-5})
    assert choose(cands, work, 2)["candidates"][1]["estimate"]["sync_work_s"] == pytest.approx(26 * 8 * 1e-5)
    for rate, faster in [(4.0e6, 1), (4.3e6, 2), (25e6, 2), (27e6, 2)]:  # the estimates cross at 4.16 MB/s
        out = choose(cands, _links(rate), 2)
        est = {c["sparse_groups"]: c["estimate"]["step_s"] for c in out["candidates"]}
        assert min(est, key=est.get) == faster
        assert out["sparse_groups"] == (2 if rate > 26.0e6 else 1)  # 1D kept up to 26.0 MB/s
    kept = choose(cands, _links(25e6), 2)
    assert kept["why"].startswith("1D kept: the fastest 2D, 2D G=2, 0.9") and "is not 10% under it" in kept["why"]
    assert choose(cands, _links(27e6), 2)["why"].startswith("fastest that fits")
    # G = 2 holds twice the tables: a budget between the two leaves 1D, however fast the link
    small = evaluate(_cfg(), _data(), 2, 1, "cpu", budget=20 * ROWS * ROW_BYTES)
    assert [c["fits"] for c in small] == [True, False]
    assert choose(small, _links(1e8), 2)["sparse_groups"] == 1
    with pytest.raises(ConfigError, match=r"no layout fits: the smallest, 1D, needs 3.7 KiB .* budget is 1.8 KiB"):
        choose(evaluate(_cfg(), _data(), 2, 1, "cpu", budget=13 * ROWS * ROW_BYTES // 2), _links(1e8), 2)


def test_two_hosts_of_two_ranks_bytes_by_layout():
    """W = 4 on 2 hosts of 2 (ranks 0, 1 | 2, 3), bytes each host's link carries per step.

    1D (table i on rank i mod 4, b = 2): per table the two ranks of the other host each send
    2 x 2 x 8 + 2 x 8 x 4 = 96 B and get 64 B: 320 B cross; 26 x 320 = 8320 B. The dense ring
    0 -> 1 -> 2 -> 3 -> 0 carries 2 x 3/4 x 6228 = 9342 B on each edge, two of which cross: 18684 B.
    G = 2 hosts (sharding groups {0,1} {2,3}): no all-to-all crosses; the replica groups {0,2}
    {1,3} do: a group rank holds 13 tables, its replica's 4 samples touch 4 rows of each (52 ids,
    416 B each way) and the step's 8 touch 8 (104 rows x 36 B = 3744 B each way): 2 x (832 + 7488)
    = 16640 B, with the dense 35324 B.
    G = 2 torchrec (sharding groups {0,2} {1,3}): each group's all-to-all crosses whole (26 x
    160 B), the sync stays inside the hosts: 8320 + 18684 = 27004 B, as 1D.
    G = 4 (every rank all 26 tables): the sync's ring 0 -> 1 -> 2 -> 3 -> 0 carries 3 x 52 x 8 B
    of ids (a replica's 2 samples touch 2 rows of each table) and 2 x 3/4 x 208 x 36 B of rows on
    each edge, two of which cross: 2 x (1248 + 11232) + 18684 = 43644 B."""
    from embeddings.auto import choose, evaluate
    cands = evaluate(_cfg(), _data(), 4, 2, "cpu", budget=1 << 30)
    out = choose(cands, _links(1e6), 4)
    got = {(c["sparse_groups"], c["sparse_layout"]): c["estimate"]["between_hosts_bytes_per_step"]
           for c in out["candidates"]}
    assert got == {(1, "hosts"): 8320 + 18684, (2, "hosts"): 35324, (2, "torchrec"): 27004, (4, "hosts"): 43644}
    within = {(c["sparse_groups"], c["sparse_layout"]): c["estimate"]["within_host_bytes_per_step"]
              for c in out["candidates"]}
    # inside the hosts: the hosts layout's all-to-alls (2 x 26 x 160 B) and the torchrec layout's
    # sync (16640 B); the dense ring's edges 0 -> 1 and 2 -> 3 (2 x 9342 B) in both
    assert within[(2, "hosts")] == 2 * 26 * 160 + 18684 and within[(2, "torchrec")] == 16640 + 18684


def test_adam_leaves_1d_and_one_rank_needs_no_measurement():
    from embeddings.auto import candidates
    assert candidates(4, "adam") == [(1, "hosts")]
    assert candidates(4, "rowwise_adagrad") == [(1, "hosts"), (2, "hosts"), (2, "torchrec"), (4, "hosts")]
    assert candidates(6, "sgd")[-1] == (6, "hosts") and (3, "torchrec") in candidates(6, "sgd")


def test_flag_takes_a_number_or_auto():
    import argparse

    from embeddings.config import DLRMTrainConfig
    from graphdist import config
    p = argparse.ArgumentParser()
    config.add_arguments(p, DLRMTrainConfig)
    assert config.from_namespace(DLRMTrainConfig, p.parse_args(["--sparse-groups", "auto"])).sparse_groups == "auto"
    assert config.from_namespace(DLRMTrainConfig, p.parse_args(["--sparse-groups", "2"])).sparse_groups == 2
    with pytest.raises(SystemExit):
        p.parse_args(["--sparse-groups", "two"])
    with pytest.raises(ConfigError, match="--sparse-groups must be an integer or auto"):
        DLRMTrainConfig(sparse_groups="two").validate()


SPEC = "criteo-synth:rows=3000,scale=0.0005,pooling=2,seed=1"


def _run_cfg(**kw):
    from embeddings.config import DLRMTrainConfig
    from embeddings.model import ModelConfig
    base = dict(spec=SPEC, batch_size=64, eval_batch_size=512, seed=2, progress=False, print_plan=False,
                sparse_groups="auto", model=ModelConfig(embedding_dim=8, dense_arch=[16], over_arch=[16]))
    return DLRMTrainConfig(**{**base, **kw})


def _job_resume(rank, world, root):
    import os

    from embeddings import auto
    from embeddings.job import quiet_torchrec
    from embeddings.trainer import train
    quiet_torchrec()
    a, b = os.path.join(root, "a"), os.path.join(root, "b")
    first = train(_run_cfg(steps=4, checkpoint_dir=a))  # measures and chooses

    def measured_again(*args, **kw):
        raise AssertionError("a resumed run measured the links again")
    auto.measure = measured_again
    resumed = train(_run_cfg(steps=8, checkpoint_dir=a, resume=True))
    unbroken = train(_run_cfg(steps=8, sparse_groups=first["sparse_groups"], sparse_layout=first["sparse_layout"]))
    train(_run_cfg(steps=4, checkpoint_dir=b, sparse_groups=2))  # a forced G = 2, resumed with auto
    kept = train(_run_cfg(steps=8, checkpoint_dir=b, resume=True))
    pick = ("sparse_groups", "sparse_layout", "losses", "sparse_auto")
    return [{k: r[k] for k in pick} for r in (first, resumed, unbroken, kept)]


def test_resume_keeps_the_chosen_layout(tmp_path):
    """W = 2 on one host: the first run measures and chooses (1D or G = 2); resumed with
    ``--sparse-groups auto`` it keeps that layout without measuring (``measure`` fails if
    called) and reaches the losses of an unbroken run forced to that layout. A checkpoint of a
    forced ``--sparse-groups 2`` resumed with ``auto`` stays at G = 2."""
    first, resumed, unbroken, kept = run_ranks(_job_resume, 2, (str(tmp_path),), timeout=300)[0]
    assert first["sparse_auto"]["links"]["compute_s"] > 0 and len(first["sparse_auto"]["candidates"]) == 2
    assert (resumed["sparse_groups"], resumed["sparse_layout"]) == (first["sparse_groups"], first["sparse_layout"])
    assert resumed["sparse_auto"]["why"].startswith("resumed: the layout recorded in ")
    assert resumed["sparse_auto"]["candidates"] == first["sparse_auto"]["candidates"]  # from the checkpoint
    np.testing.assert_allclose(resumed["losses"], unbroken["losses"], atol=1e-6, rtol=0)
    assert kept["sparse_groups"] == 2 and "candidates" not in kept["sparse_auto"]


def _measure_two_hosts(rank, world):
    """``measure`` with one rank a host (L = 1 of W = 2 on loopback): every probe runs, the
    ring's shifts counted."""
    import torch

    from embeddings import auto
    from embeddings.data import load_click_data
    from graphdist import comm
    shifts, real = [], comm.shift_rows

    def counted(send, dst, out, src, group=None):
        shifts.append((send.numel() * send.element_size(), dst, src))
        return real(send, dst, out, src, group)
    comm.shift_rows = counted
    links = auto.measure(_run_cfg(), load_click_data(SPEC), torch.device("cpu"), 1)
    return links.__dict__, shifts


def test_the_ring_probe_shifts_messages_of_the_syncs_size_to_the_next_host():
    """Across hosts the ring probe sends :data:`RING_MESSAGE_BYTES` a shift (a large message
    takes a link's two directions one after the other; the sync's all-reduce sends chunks),
    repeated to about :data:`LINK_PROBE_BYTES` on each link, 3 timed rounds; every rate positive
    (none within a host of one rank)."""
    from embeddings.auto import LINK_PROBE_BYTES, RING_MESSAGE_BYTES
    for rank, (links, shifts) in enumerate(run_ranks(_measure_two_hosts, 2, timeout=240)):
        assert links.pop("intra_bytes_per_s") == 0  # no other rank on the host
        assert all(v > 0 and np.isfinite(v) for v in links.values()), links
        reps = LINK_PROBE_BYTES // (2 * RING_MESSAGE_BYTES)  # L = 1: one rank sends and receives a host's bytes
        assert shifts == [(RING_MESSAGE_BYTES, 1 - rank, 1 - rank)] * (3 * reps)
