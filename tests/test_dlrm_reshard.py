"""Resharding a DLRM checkpoint (torch.distributed.checkpoint places every shard of the tables,
of their row-wise AdaGrad sums and the dense replicas wherever the new plan keeps them): a 1D
row-wise checkpoint written at W = 4 continues

* at W = 2 (1D), row-wise and table-wise: to the unbroken W = 4 run's losses (at G = 1 the update
  is the global-batch mean whatever W and the plan are), and to a single-process reference
  started from the checkpoint's tensors;
* as 2D with G = 2 replicas (W = 4), in both rank layouts (``--sparse-layout hosts`` to the
  end; ``torchrec`` for two steps, then its checkpoint continues as ``hosts``): to the
  single-process G-replica reference (see tests/test_dlrm_2d.py) started from the checkpoint's
  tensors, read here without any sharding;

and a checkpoint whose state another plan cannot hold (column-wise AdaGrad keeps one sum per
column block) is refused in one line naming both plans."""
from __future__ import annotations

import os
import shutil

import numpy as np
import torch

from graphdist.testing import run_ranks
from tests.test_dlrm_2d import RowAdagrad

SPEC = "criteo-synth:rows=1600,scale=0.0005,pooling=3,seed=3"
B, CUT, STEPS = 64, 4, 8


def _cfg(**kw):
    from embeddings.config import DLRMTrainConfig
    from embeddings.model import ModelConfig
    base = dict(spec=SPEC, sharding="row_wise", batch_size=B, eval_batch_size=256, seed=5,
                embedding_optimizer="rowwise_adagrad", embedding_lr=0.1, dense_optimizer="sgd", dense_lr=0.1,
                progress=False, print_plan=False, model=ModelConfig(embedding_dim=16, dense_arch=[16], over_arch=[16]))
    return DLRMTrainConfig(**{**base, **kw})


def _job(rank, world, kw):
    from embeddings.job import quiet_torchrec
    quiet_torchrec()
    from embeddings.trainer import train
    from graphdist.errors import ArtifactError
    try:
        rep = train(_cfg(**kw))
    except ArtifactError as e:
        return {"refused": str(e)}
    return {"losses": rep["losses"], "was": rep["run/resharded_from"], "digest": rep["plan_digest"]}


def _reference(snap: str, groups: int) -> list[float]:
    """Steps CUT+1 .. STEPS of G model replicas started from the checkpoint's whole tensors
    (read by DCP's own converter in this one process, no plan involved): replica g trains on the
    g-th 1/G of each batch, dense gradients averaged over the replicas (DDP over the world), each
    replica's tables step by row-wise AdaGrad from the saved sums, replicas averaged every step."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from embeddings.build import load_splits
    from embeddings.data import make_batch
    from embeddings.model import LossWrapper, build_model
    cfg = _cfg()
    flat = os.path.join(os.path.dirname(snap), "whole.pt")
    dcp_to_torch_save(snap, flat)
    saved = torch.load(flat, weights_only=False)
    train, _ = load_splits(cfg)
    n = len(train.num_embeddings)
    reps = [LossWrapper(build_model(cfg.model, 13, train.num_embeddings, cfg.seed)) for _ in range(groups)]
    name = "model.sparse_arch.embedding_bag_collection.embedding_bags.t_{}.weight"
    for m in reps:
        m.load_state_dict(saved["model"])
    opts = []
    for m in reps:
        eo = []
        for i in range(n):
            o = RowAdagrad([m.get_parameter(name.format(i))], cfg.embedding_lr)
            o.state[0].copy_(saved["optim"]["state"][f"fused.{name.format(i)}"][f"t_{i}.momentum1"][:, None])
            eo.append(o)
        opts.append((eo, torch.optim.SGD([p for k, p in m.named_parameters() if "embedding_bags" not in k],
                                         lr=cfg.dense_lr)))
    per_epoch = len(train) // B
    losses = []
    for t in range(CUT, STEPS):
        step = 0.0
        for g, m in enumerate(reps):
            m.zero_grad(set_to_none=True)
            loss, _ = m(make_batch(train, (t % per_epoch) * B, B, g, groups)[0])
            loss.backward()
            step += float(loss.detach()) / groups
        losses.append(step)
        for ps in zip(*[[p for k, p in m.named_parameters() if "embedding_bags" not in k] for m in reps]):
            mean = sum(p.grad for p in ps) / groups
            for p in ps:
                p.grad = mean.clone()
        for eo, do in opts:
            for o in eo:
                o.step()
            do.step()
        with torch.no_grad():
            for i in range(n):
                ws = [m.get_parameter(name.format(i)) for m in reps]
                avg = sum(w.data for w in ws) / groups
                st = sum(eo[i].state[0] for eo, _ in opts) / groups
                for w, (eo, _) in zip(ws, opts):
                    w.data.copy_(avg)
                    eo[i].state[0].copy_(st)
    return losses


def test_a_w4_row_wise_checkpoint_resumes_at_w2_as_table_wise_and_as_2d(tmp_path):
    ck = str(tmp_path / "ck")
    whole = run_ranks(_job, 4, (dict(steps=STEPS, checkpoint_dir=ck, checkpoint_every=CUT),), timeout=300)[0]
    snap = os.path.join(ck, f"step_{CUT:08d}")
    dirs = {}
    for name in ("w2", "tw", "2d", "2d-torchrec"):  # what a crash right after step CUT's checkpoint leaves
        d = dirs[name] = str(tmp_path / f"ck-{name}")
        shutil.copytree(snap, os.path.join(d, f"step_{CUT:08d}"))
        with open(os.path.join(d, "latest"), "w") as f:
            f.write(f"step_{CUT:08d}\n")
    cut = {"losses": whole["losses"][:CUT], "digest": whole["digest"]}
    w2 = run_ranks(_job, 2, (dict(steps=STEPS, checkpoint_dir=dirs["w2"], resume=True),), timeout=300)[0]
    table_wise = run_ranks(_job, 2, (dict(steps=STEPS, checkpoint_dir=dirs["tw"], resume=True,
                                          sharding="table_wise"),), timeout=300)[0]
    two_d = run_ranks(_job, 4, (dict(steps=STEPS, checkpoint_dir=dirs["2d"], resume=True, sparse_groups=2),),
                      timeout=300)[0]
    two_d_tr = run_ranks(_job, 4, (dict(steps=STEPS - 2, checkpoint_dir=dirs["2d-torchrec"], resume=True,
                                        sparse_groups=2, sparse_layout="torchrec"),), timeout=300)[0]
    back = run_ranks(_job, 4, (dict(steps=STEPS, checkpoint_dir=dirs["2d-torchrec"], resume=True, sparse_groups=2),),
                     timeout=300)[0]  # the torchrec layout's checkpoint of step STEPS - 2 as hosts
    for r in (w2, two_d, two_d_tr, table_wise):
        assert r["losses"][:CUT] == cut["losses"]  # the history came with the checkpoint
        assert r["was"] == {"world_size": 4, "plan_digest": cut["digest"]} and r["digest"] != cut["digest"], r
    assert back["was"] == {"world_size": 4, "plan_digest": two_d_tr["digest"]} and back["digest"] == two_d["digest"]
    assert two_d["digest"] != two_d_tr["digest"] and back["losses"][:STEPS - 2] == two_d_tr["losses"]
    np.testing.assert_allclose(w2["losses"][CUT:], whole["losses"][CUT:], atol=1e-5, rtol=0)
    ref1 = _reference(snap, 1)
    np.testing.assert_allclose(w2["losses"][CUT:], ref1, atol=1e-5, rtol=0)
    np.testing.assert_allclose(table_wise["losses"][CUT:], ref1, atol=1e-5, rtol=0)  # another --sharding
    ref2 = _reference(snap, 2)
    np.testing.assert_allclose(two_d["losses"][CUT:], ref2, atol=1e-5, rtol=0)
    np.testing.assert_allclose(back["losses"][CUT:], ref2, atol=1e-5, rtol=0)
    assert max(abs(a - b) for a, b in zip(ref2, whole["losses"][CUT:])) > 1e-4  # 2D is another model


def test_state_another_plan_cannot_hold_is_refused_in_one_line(tmp_path):
    """Column-wise row-wise AdaGrad keeps one sum per row and column block; a row-wise plan keeps
    one per row: DCP would fail on the shapes (or, had they matched, fill wrong rows). Refused
    before any load, naming both plans."""
    ck = str(tmp_path / "ck")
    old = run_ranks(_job, 2, (dict(steps=2, sharding="column_wise", checkpoint_dir=ck),), timeout=300)[0]
    new = run_ranks(_job, 2, (dict(steps=4, checkpoint_dir=ck, resume=True),), timeout=300)[0]
    msg = new["refused"]
    assert "\n" not in msg and f"(world_size 2, plan_digest {old['digest']}) cannot be resharded" in msg, msg
    assert "momentum1 [" in msg and "other shapes" in msg and "resume on 2 ranks with the layout" in msg, msg
