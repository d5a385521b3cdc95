"""2D sparse parallelism (``--sparse-groups G``) on CPU: W = 4 gloo ranks, G = 2 replicas of a
2-rank sharding group (DistributedModelParallel on each sharding group + ReplicaSync), in both
rank layouts (``--sparse-layout hosts``, the default: sharding groups {0,1} {2,3}; ``torchrec``:
{0,2} {1,3}), against a single-process reference built here (tests/test_dlrm_cuda.py runs the same cases, job and checks
through torchrec's DMPCollection on 4 GPUs):

    G unsharded model replicas, replica g trains on the g-th 1/G of every global batch;
    dense layers (and data_parallel tables) step on the gradient averaged over all W ranks (DDP
    over the world, as DMPCollection); every sharded table steps in its own replica (row-wise
    AdaGrad with its own state, one accumulator per column block for column_wise), and every
    --sync-every steps the replicas' tables and AdaGrad states are averaged.

Also: the layout, the same tensors and groups as torchrec's DMPCollection, G = 1 through the
2D machinery bit-for-bit equal to the 1D path, the sync of touched rows bit-for-bit equal to the
whole-shard sync (DMPCollection's), the momentum-scaled optimizer, and resume.

The dense layers use SGD here: element-wise AdaGrad's first step divides each gradient by its own
size, so a dense weight whose gradient is at rounding level (~1e-9, e.g. a unit that is off for
the whole batch) moves by lr x (rounding noise) / eps, and such weights differ by up to 5e-5 after
20 steps between any two summation orders (1 vs 4 ranks in 1D too). The losses match either way;
the weight comparison is only meaningful where the update is a smooth function of the gradient.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch

from graphdist.testing import run_ranks
from tests.conftest import once_per_run

TYPES = ["table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel"]
SPEC = "criteo-synth:rows=1600,scale=0.0005,pooling=3,seed=3"
W, G, B, STEPS = 4, 2, 64, 20
TOL = 1e-5


def make_cfg(sharding, emb_opt="rowwise_adagrad", groups=G, sync_every=1, layout="hosts", **kw):
    from embeddings.config import DLRMTrainConfig
    from embeddings.model import ModelConfig
    kw = {"spec": SPEC, "batch_size": B, "steps": STEPS, **kw}
    return DLRMTrainConfig(sharding=sharding, eval_batch_size=256,
                           seed=5, embedding_optimizer=emb_opt, embedding_lr=0.1, dense_optimizer="sgd",
                           dense_lr=0.1,
                           sparse_groups=groups, sparse_layout=layout, sync_every=sync_every, progress=False,
                           print_plan=False,
                           model=ModelConfig(embedding_dim=16, dense_arch=[16], over_arch=[16]), **kw)


def _quiet():
    from embeddings.job import quiet_torchrec
    quiet_torchrec()


def _plain(k: str) -> str:
    return k.replace("module.", "").replace("_dmp_wrapped_module.", "")


def _weights(dmp) -> dict:
    """``{name: [(row0, col0, array)]}``: this rank's embedding shards and its dense weights."""
    def arr(t):
        return t.detach().cpu().numpy().copy()
    out = {}
    for k, v in dmp.state_dict().items():
        k = _plain(k)
        if hasattr(v, "to_local"):
            v = v.to_local()
        if hasattr(v, "local_shards") and hasattr(v, "local_offsets"):  # DTensor's LocalShardsWrapper
            out[k] = [(o[0], o[1], arr(s)) for s, o in zip(v.local_shards(), v.local_offsets())]
        elif hasattr(v, "local_shards"):  # ShardedTensor
            out[k] = [(*s.metadata.shard_offsets, arr(s.tensor)) for s in v.local_shards()]
        else:
            out[k] = [(0, 0, arr(v))]
    return out


def _device(rank: int, device_type: str) -> torch.device:
    if device_type == "cuda":
        torch.cuda.set_device(rank)
        return torch.device("cuda", rank)
    return torch.device("cpu")


def _train_2d(rank, world, sharding, emb_opt, sync_every, device_type="cpu", layout="hosts"):
    """build_sharded + the trainer's step loop (sync included) + the trainer's final sync
    (on CUDA: torchrec's DMPCollection and its sync())."""
    from embeddings.build import build_sharded, load_splits
    from embeddings.trainer import _global_losses, run_steps
    dev = _device(rank, device_type)
    cfg = make_cfg(sharding, emb_opt, sync_every=sync_every, device=device_type, layout=layout)
    train, _ = load_splits(cfg)
    sm = build_sharded(cfg, train, dev)
    local = run_steps(sm.dmp, sm.opt, None, train, cfg, range(STEPS), dev, model=sm)
    if STEPS % sync_every:
        sm.sync()
    return {"losses": _global_losses(local, world), "weights": _weights(sm.dmp),
            "groups": sm.layout.describe()["sharding_groups"], "dmp": type(sm.dmp).__name__, "sync": getattr(sm.sync, "__qualname__", type(sm.sync).__name__)}


def touched_vs_whole_shards() -> dict:
    """The same 7 steps (sync every 2, and at the end) twice per sharding type: with the sync of
    the touched rows (ReplicaSync's call) and with the whole-shard sync (DMPCollection's,
    ``ReplicaSync.sync_all``)."""
    import dataclasses
    from embeddings.build import build_sharded, load_splits
    from embeddings.trainer import run_steps
    out = {}
    for st in ("row_wise", "column_wise"):  # shifted local rows; one table in several shards
        cfg = make_cfg(st, sync_every=2, steps=7)
        train, _ = load_splits(cfg)
        out[st] = {}
        for how in ("touched", "whole"):
            sm = build_sharded(cfg, train, torch.device("cpu"))
            sync = sm.sync if how == "touched" else sm.sync.sync_all
            losses = run_steps(sm.dmp, sm.opt, None, train, cfg, range(7), torch.device("cpu"),
                               model=dataclasses.replace(sm, sync=sync))
            sync()
            out[st][how] = {"losses": losses, "weights": _weights(sm.dmp), "bytes": sm.sync.bytes_moved,
                            "state": [s.numpy().copy() for _, ss in sm.sync.tables for s in ss]}
    return out


CASES = [(st, "rowwise_adagrad", 1) for st in TYPES] + [("row_wise", "rowwise_adagrad_scaled", 1),
                                                        ("table_wise", "rowwise_adagrad", 3)]
"""(sharding, embedding optimizer, --sync-every) compared with the reference, on CPU and CUDA."""
TORCHREC_CASES = [(st, "rowwise_adagrad", 1) for st in ("table_wise", "row_wise", "column_wise")]
"""The same with ``--sparse-layout torchrec`` (the other rank layout; table- and column-wise
shards are placed through torchrec's ``remap_rank``, which differs between the layouts)."""


def job_reference_runs(rank, world, device_type="cpu"):
    """Every case of :data:`CASES`, the trainer and ``--sharding auto`` at W = 4, G = 2 (and on
    CPU :func:`touched_vs_whole_shards`); ``device_type`` "cuda" (one GPU per rank, NCCL) runs
    the same through DMPCollection."""
    _quiet()
    from embeddings.trainer import train
    dev = _device(rank, device_type)
    out = {case: _train_2d(rank, world, *case, device_type) for case in CASES}
    out.update({("torchrec", *case): _train_2d(rank, world, *case, device_type, "torchrec")
                for case in TORCHREC_CASES})
    out["trainer"] = train(make_cfg("table_wise", device=device_type), dev)
    out["auto"] = train(make_cfg("auto", device=device_type), dev)  # the planner, run for S = 2 ranks
    if device_type == "cpu":  # DMPCollection's sync has one mode: whole shards
        out["touched_vs_whole"] = touched_vs_whole_shards()
    return out


class RowAdagrad:
    """Row-wise AdaGrad with one accumulator per (row, column block); ``c`` > 1: the
    momentum-scaled step ``lr / (sqrt(v / c) + eps)``."""

    def __init__(self, params, lr, blocks=1, c=1.0, eps=1e-8):
        self.params, self.lr, self.blocks, self.c, self.eps = list(params), lr, blocks, c, eps
        self.state = [torch.zeros(p.shape[0], blocks) for p in self.params]

    def step(self):
        for p, s in zip(self.params, self.state):
            g = p.grad.view(p.shape[0], self.blocks, -1)
            s += g.pow(2).mean(-1)
            p.data.view(p.shape[0], self.blocks, -1).sub_(
                self.lr * g / ((s / self.c).sqrt()[..., None] + self.eps))


@functools.lru_cache(maxsize=None)
def reference(sharding: str, emb_opt: str, sync_every: int, tables: tuple | None = None):
    """Losses and final weights of the single-process G-replica reference. ``tables``: per
    table ``(type, column blocks)`` when they differ (``--sharding auto``'s plan)."""
    from embeddings.build import load_splits
    from embeddings.data import make_batch
    from embeddings.model import LossWrapper, build_model
    torch.set_num_threads(1)
    cfg = make_cfg(sharding, emb_opt, sync_every=sync_every)
    train, _ = load_splits(cfg)
    n = len(train.num_embeddings)
    tables = tables or ((sharding, W // G if sharding == "column_wise" else 1),) * n
    reps = [LossWrapper(build_model(cfg.model, 13, train.num_embeddings, cfg.seed)) for _ in range(G)]
    # data_parallel tables are DDP over the world, like the dense layers; the others are replicas
    synced = [t != "data_parallel" for t, _ in tables]
    emb_all = [[m.get_parameter(f"model.sparse_arch.embedding_bag_collection.embedding_bags.t_{i}.weight")
                for i in range(n)] for m in reps]
    emb = [[p for i, p in enumerate(e) if synced[i]] for e in emb_all]
    dense = [[p for k, p in m.named_parameters() if "embedding_bags" not in k] +
             [p for i, p in enumerate(e) if not synced[i]] for m, e in zip(reps, emb_all)]
    c = G if emb_opt == "rowwise_adagrad_scaled" else 1
    eopt = [[RowAdagrad([p], cfg.embedding_lr, tables[i][1], c if synced[i] else 1) for i, p in enumerate(e)]
            for e in emb_all]
    dopt = [torch.optim.SGD([p for k, p in m.named_parameters() if "embedding_bags" not in k], lr=cfg.dense_lr)
            for m in reps]
    per_epoch = len(train) // B
    losses = []
    for t in range(STEPS):
        step_loss = 0.0
        for g, m in enumerate(reps):
            for p in m.parameters():
                p.grad = None
            batch, _ = make_batch(train, (t % per_epoch) * B, B, g, G)  # replica g: the g-th 1/G
            loss, _ = m(batch)
            loss.backward()
            step_loss += float(loss.detach()) / G
        losses.append(step_loss)
        for ps in zip(*dense):  # DDP over the world: every replica gets the mean gradient
            mean = sum(p.grad for p in ps) / G
            for p in ps:
                p.grad = mean.clone()
        for g in range(G):
            for o in eopt[g]:
                o.step()
            dopt[g].step()
        if (t + 1) % sync_every == 0 or t + 1 == STEPS:
            with torch.no_grad():
                for ps in zip(*emb):
                    avg = sum(p.data for p in ps) / G
                    for p in ps:
                        p.data.copy_(avg)
                for i in (i for i in range(n) if synced[i]):
                    ss = [eopt[g][i].state[0] for g in range(G)]
                    avg = sum(ss) / G
                    for s in ss:
                        s.copy_(avg)
    return losses, {k: v.detach().numpy().copy() for k, v in reps[0].state_dict().items()}


@pytest.fixture(scope="session")
def ranks(tmp_path_factory):
    return once_per_run(tmp_path_factory, "dlrm_2d", lambda _: run_ranks(job_reference_runs, W, timeout=600))


def _check_weights(res, ref_sd, what, tol=TOL):
    n = 0
    for k, shards in res["weights"].items():
        for r0, c0, a in shards:
            ref = ref_sd[k]
            ref = ref[r0:r0 + a.shape[0], c0:c0 + a.shape[1]] if a.ndim == 2 else ref
            err = float(np.abs(a - ref).max()) if a.size else 0.0
            assert err <= tol, f"{what}: {k}[{r0}:, {c0}:] max abs diff {err:.3g}"
            n += a.size
    return n


GROUPS = {"hosts": [[0, 1], [2, 3]], "torchrec": [[0, 2], [1, 3]]}
"""Sharding groups of W = 4, G = 2 in each layout."""


def check_matches_reference(ranks, case, tol=TOL, dmp=("DistributedModelParallel", "ReplicaSync")):
    """Every rank's 20 losses and every weight it holds equal the G-replica reference; ``dmp``:
    what sharded and synced the model (the CPU path's DistributedModelParallel on a sharding
    group and ReplicaSync, or DMPCollection and its sync). ``case``: a :data:`CASES` entry
    (``--sparse-layout hosts``) or ``("torchrec", *entry)``."""
    layout, key = (case[0], case) if case[0] == "torchrec" else ("hosts", case)
    sharding, emb_opt, sync_every = case[-3:]
    ref_losses, ref_sd = reference(sharding, emb_opt, sync_every)
    seen = 0
    for rank, out in enumerate(ranks):
        res = out[key]
        assert (res["dmp"], res["sync"]) == dmp, f"rank {rank}: sharded by {res['dmp']}, synced by {res['sync']}"
        assert res["groups"] == GROUPS[layout], f"rank {rank}: sharding groups {res['groups']}"
        np.testing.assert_allclose(res["losses"], ref_losses, atol=tol, rtol=0,
                                   err_msg=f"{sharding} {emb_opt} sync {sync_every} rank {rank}")
        seen += _check_weights(res, ref_sd, f"{sharding} rank {rank}", tol)
    assert seen >= sum(v.size for v in ref_sd.values())  # every weight compared at least once
    assert ref_losses[-1] < ref_losses[0]


def check_trainer_report(ranks, tol=TOL):
    """Sync every 3 steps is a different model than every step (the reference test can fail),
    and the trainer's report carries the same losses and the 2D layout."""
    a = reference("table_wise", "rowwise_adagrad", 1)[0]
    b = reference("table_wise", "rowwise_adagrad", 3)[0]
    assert max(abs(x - y) for x, y in zip(a, b)) > 1e-4
    rep = ranks[0]["trainer"]
    np.testing.assert_allclose(rep["losses"], a, atol=tol, rtol=0)
    plan = rep["plan"]
    assert plan["sharding_groups"] == [[0, 1], [2, 3]] and plan["replica_groups"] == [[0, 2], [1, 3]]
    assert plan["sparse_layout"] == "hosts"
    assert [r["a2a_group_size"] for r in plan["ranks"]] == [2] * 4
    assert rep["sparse_groups"] == 2 and rep["mem/peak_bytes"] > 0
    assert 0 < rep["comm/replica_sync_bytes_per_step"] <= rep["comm/replica_sync_whole_bytes_per_step"]
    assert all(r["sync_bytes_per_step"] <= rep["comm/replica_sync_bytes_per_step"] for r in plan["ranks"])


def check_auto(ranks, tol=TOL):
    """--sharding auto: torchrec's planner for S = W/G ranks, the same plan on every rank, and the
    mixed plan it picks (per table: replicas synced, or data_parallel over the world) trains as
    the reference built from that plan."""
    reps = [out["auto"] for out in ranks]
    assert len({r["plan_digest"] for r in reps}) == 1
    plan = reps[0]["plan"]
    assert all(set(t["ranks"]) <= {0, 1} for t in plan["tables"].values())  # group ranks of S = 2
    assert [r["a2a_group_size"] for r in plan["ranks"]] == [W // G] * W
    tables = tuple((t["type"], len(t["ranks"]) if t["type"] == "column_wise" else 1)
                   for t in plan["tables"].values())
    ref = reference("auto", "rowwise_adagrad", 1, tables)[0]
    for rank, r in enumerate(reps):
        np.testing.assert_allclose(r["losses"], ref, atol=tol, rtol=0, err_msg=f"auto rank {rank}")


ALL_CASES = CASES + [("torchrec", *c) for c in TORCHREC_CASES]


@pytest.mark.parametrize("case", ALL_CASES, ids=["-".join(map(str, c)) for c in ALL_CASES])
def test_matches_g_replica_reference(ranks, case):
    check_matches_reference(ranks, case)


def test_sync_matters_and_trainer_report(ranks):
    check_trainer_report(ranks)
    rep = ranks[0]["trainer"]  # on CPU a sync moves the touched rows only: less than whole shards
    assert rep["comm/replica_sync_bytes_per_step"] < rep["comm/replica_sync_whole_bytes_per_step"]


def test_auto_plans_for_the_sharding_group_and_matches_the_reference(ranks):
    check_auto(ranks)


def test_layout_hand_checked():
    from embeddings.twod import Layout, layout_for
    from graphdist.errors import ConfigError
    lay = Layout(8, 2, local_size=4, kind="torchrec")  # two nodes of 4
    assert lay.describe()["sharding_groups"] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert lay.describe()["replica_groups"] == [[0, 1], [2, 3], [4, 5], [6, 7]]  # inside a node
    assert lay.position(5) == (1, 2) and lay.node_group_size == 2
    assert [lay.slot(r) for r in range(8)] == [0, 4, 1, 5, 2, 6, 3, 7]
    assert Layout(8, 4, kind="torchrec").describe()["sharding_groups"] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    hosts = Layout(8, 2, local_size=4)  # the default: sharding groups inside the nodes
    assert hosts.kind == "hosts"
    assert hosts.describe()["sharding_groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert hosts.describe()["replica_groups"] == [[0, 4], [1, 5], [2, 6], [3, 7]]  # across the nodes
    assert hosts.position(5) == (1, 1) and hosts.node_group_size == 4
    assert [hosts.slot(r) for r in range(8)] == list(range(8))
    assert Layout(8, 4, local_size=4).describe()["sharding_groups"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert Layout(8, 2, local_size=2).node_group_size == 2  # a 4-rank group on 2 nodes of 2
    for kind in ("hosts", "torchrec"):
        assert [Layout(4, 1, kind=kind).slot(r) for r in range(4)] == [0, 1, 2, 3]
        lay = Layout(8, 2, 4, kind)
        assert sorted(lay.global_rank(*lay.position(r)) for r in range(8)) == list(range(8))
    with pytest.raises(ConfigError, match="--sparse-groups 3 must divide the world size 4"):
        layout_for(4, 3)


def _job_same_as_dmpcollection(rank, world):
    """Per layout: the CPU path's process groups and synced tensors are DMPCollection's own
    (``hosts``: DMPCollection's ``use_inter_host_allreduce=True``)."""
    import types

    import torch.distributed as dist
    from torchrec.distributed.model_parallel import DMPCollection
    from torchrec.distributed.types import DMPCollectionContext
    _quiet()
    from embeddings.build import build_sharded, load_splits

    def ptrs(d):
        return {str(k): [(t.data_ptr(), tuple(t.shape)) for t in v] for k, v in d.items()}
    out = {}
    for layout in GROUPS:
        cfg = make_cfg("row_wise", layout=layout)
        train, _ = load_splits(cfg)
        sm = build_sharded(cfg, train, torch.device("cpu"))
        fake = types.SimpleNamespace(_device=torch.device("cpu"), _dmp_wrapped_module=sm.dmp._dmp_wrapped_module)
        mesh, spg, rpg = DMPCollection._create_process_groups(fake, rank, world, world // G,
                                                              use_inter_host_allreduce=layout == "hosts")
        ctx = DMPCollectionContext(module=None, plan=None, sharding_group_size=world // G)
        DMPCollection._group_sharded_modules(fake, [ctx])
        DMPCollection._cache_sync_tensors(fake, [ctx])
        out[layout] = {"mesh": mesh.mesh.tolist(), "ours": sm.layout.describe()["sharding_groups"],
                       "spg": (dist.get_process_group_ranks(spg), dist.get_process_group_ranks(sm.sync.replica_pg)),
                       "rpg": dist.get_process_group_ranks(rpg),
                       "w": (ptrs(ctx.weights_by_dtype), ptrs(sm.sync.weights_by_dtype)),
                       "o": (ptrs(ctx.optimizer_tensors_by_dtype), ptrs(sm.sync.optimizer_tensors_by_dtype))}
    return out


def test_same_groups_and_tensors_as_dmpcollection():
    for rank, res in enumerate(run_ranks(_job_same_as_dmpcollection, W, timeout=300)):
        for layout, r in res.items():
            assert r["mesh"] == r["ours"] == GROUPS[layout], f"rank {rank} {layout}"
            assert r["rpg"] == r["spg"][1], f"rank {rank} {layout}"
            assert r["w"][0] == r["w"][1] and r["w"][1], f"rank {rank} {layout}: weights to sync differ"
            assert r["o"][0] == r["o"][1] and r["o"][1], f"rank {rank} {layout}: optimizer states to sync differ"
        assert set(res) == {"hosts", "torchrec"}


def test_touched_row_sync_is_bit_for_bit_the_whole_shard_sync(ranks):
    """G = 2: averaging only the rows some replica looked up since the last sync gives exactly
    the losses, table rows, dense weights and AdaGrad state of averaging whole shards, for less."""
    for rank, out in enumerate(ranks):
        for st, res in out["touched_vs_whole"].items():
            a, b = res["touched"], res["whole"]
            assert a["losses"] == b["losses"], f"{st} rank {rank}"
            assert a["weights"].keys() == b["weights"].keys()
            for k in a["weights"]:
                for (r0, c0, x), (r1, c1, y) in zip(a["weights"][k], b["weights"][k]):
                    assert (r0, c0) == (r1, c1) and np.array_equal(x, y), f"{st} rank {rank} {k}[{r0}:, {c0}:]"
            assert len(a["state"]) == len(b["state"]) > 0
            assert all(np.array_equal(x, y) for x, y in zip(a["state"], b["state"])), f"{st} rank {rank}"
            assert 0 < a["bytes"] < b["bytes"], f"{st} rank {rank}: {a['bytes']} vs {b['bytes']} bytes"


def _job_g1(rank, world):
    """Every sharding type through the 2D machinery with one group vs the 1D path."""
    _quiet()
    from embeddings.build import (ShardedModel, build_sharded, fill_embeddings, load_splits, make_optimizer,
                                  plan_for)
    from embeddings.trainer import run_steps
    from embeddings.twod import Layout, build_dmp_2d
    out = {}
    for st in TYPES:
        cfg = make_cfg(st, groups=1)
        train, _ = load_splits(cfg)
        losses = {}
        for how in ("1d", "2d"):
            if how == "1d":
                sm = build_sharded(cfg, train, torch.device("cpu"))
            else:
                module, plan, desc = plan_for(cfg, train, world, world, "cpu", None)
                lay = Layout(world, 1, world)
                dmp, sync = build_dmp_2d(module, plan, torch.device("cpu"), lay)
                fill_embeddings(dmp, cfg.seed, train.num_embeddings, cfg.model.embedding_dim)
                sm = ShardedModel(dmp, make_optimizer(cfg, dmp), desc, lay, sync)
            losses[how] = run_steps(sm.dmp, sm.opt, None, train, cfg, range(STEPS), torch.device("cpu"), model=sm)
        out[st] = losses
    return out


def test_one_group_through_2d_machinery_is_bit_for_bit_1d():
    for rank, r in enumerate(run_ranks(_job_g1, 2, timeout=400)):
        for st, losses in r.items():
            assert losses["1d"] == losses["2d"], f"{st} rank {rank}"


def test_scaled_rowwise_adagrad_is_stock_fbgemm_with_scaled_lr_and_eps():
    """lr / (sqrt(v / c) + eps) == EXACT_ROWWISE_ADAGRAD with lr * sqrt(c), eps * sqrt(c), on
    FBGEMM's CPU kernel, state included."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import ComputeDevice
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen as TBE

    from embeddings.build import optimizer_class
    R, D, lr, c = 6, 4, 0.3, 4.0
    cls, kw = optimizer_class("rowwise_adagrad_scaled", lr, int(c))
    assert kw["lr"] == pytest.approx(lr * math.sqrt(c)) and kw["eps"] == pytest.approx(1e-8 * math.sqrt(c))
    torch.manual_seed(0)
    tbe = TBE([(R, D, EmbeddingLocation.HOST, ComputeDevice.CPU)], optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
              learning_rate=kw["lr"], eps=kw["eps"], pooling_mode=PoolingMode.SUM)
    w = tbe.split_embedding_weights()[0].clone().double()
    v = torch.zeros(R, dtype=torch.float64)
    idx, off = torch.tensor([0, 1, 1, 3, 0]), torch.tensor([0, 2, 5])
    for _ in range(4):
        gout = torch.randn(2, D)
        tbe(idx, off).backward(gout)
        g = torch.zeros(R, D, dtype=torch.float64)  # per row, duplicates summed (FBGEMM "exact")
        for bag, (a, b) in enumerate(zip(off[:-1], off[1:])):
            for i in idx[a:b]:
                g[i] += gout[bag].double()
        v += g.pow(2).mean(1)
        w -= lr * g / ((v / c).sqrt() + 1e-8)[:, None]
    assert float((tbe.split_embedding_weights()[0].double() - w).abs().max()) < 1e-6
    assert float((tbe.get_optimizer_state()[0]["sum"].double() - v).abs().max()) < 1e-6
    assert float(tbe.get_optimizer_state()[0]["sum"][2]) == 0.0  # row 2 never looked up: no state


def _job_resume(rank, world, root):
    import os
    _quiet()
    from embeddings.trainer import train
    cfg = functools.partial(make_cfg, "row_wise", sync_every=2)
    full = train(cfg(steps=12))
    ck = os.path.join(root, "ck")
    train(cfg(steps=6, checkpoint_dir=ck))  # stops after 6 (a multiple of --sync-every)
    res = train(cfg(steps=12, checkpoint_dir=ck, resume=True, checkpoint_every=4))
    return full["losses"], res["losses"], full["auc"], res["auc"]


def test_resume_in_2d_continues_to_same_losses(tmp_path):
    full, res, a, b = run_ranks(_job_resume, W, (str(tmp_path),), timeout=400)[0]
    assert len(res) == 12
    np.testing.assert_allclose(res, full, atol=1e-6, rtol=0)
    assert abs(a - b) < 1e-6


def test_bad_groups_and_plan_too_big_for_a_group_are_one_line(capsys):
    from embeddings.build import load_splits, plan_for
    from embeddings.job import precheck
    from graphdist.cli import main
    spec = "criteo-synth:rows=400,scale=0.001"
    assert main(["train-dlrm", spec, "--nproc", "3", "--sparse-groups", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["graphdist: error: --sparse-groups 2 must divide the world size 3 (W = G x S: G replicas "
                   "of an S-rank sharding group)"]
    # a budget that holds the plan over 4 ranks (1D) but not over a 2-rank sharding group (2D)
    cfg = make_cfg("table_wise", spec=spec, batch_size=8, groups=1)
    train, _ = load_splits(cfg)
    need = {g: max(r["embedding_bytes"] for r in plan_for(make_cfg("table_wise", spec=spec, groups=g),
                                                          train, 4, 4, "cpu")[2]["ranks"]) for g in (1, 2)}
    assert need[2] > need[1]
    gb = (need[1] + need[2]) / 2 / 2**30
    precheck(make_cfg("table_wise", spec=spec, batch_size=8, groups=1, memory_budget_gb=gb, nproc=4), 4, "cpu")
    assert "memory per rank: up to" in capsys.readouterr().err  # said before the run (a 1D plan fits)
    assert main(["train-dlrm", spec, "--nproc", "4", "--sparse-groups", "2", "--sharding", "table_wise",
                 "--batch-size", "8", "--memory-budget-gb", str(gb), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sharding plan does not fit: rank 0 (of a 2-rank sharding group) needs" in err[0], err
