"""Checkpoint + ``--resume`` reproduces an unbroken run's losses; checkpoints are atomic and
only the newest ``keep_checkpoints`` are kept."""
from __future__ import annotations

import os

import numpy as np

from graphdist.testing import run_ranks

SPEC = "criteo-synth:rows=3000,scale=0.0005,pooling=2,seed=1"


def _cfg(**kw):
    from embeddings.config import DLRMTrainConfig
    from embeddings.model import ModelConfig
    base = dict(spec=SPEC, sharding="row_wise", batch_size=64, eval_batch_size=512, seed=2,
                progress=False, print_plan=False, pipeline=True,
                model=ModelConfig(embedding_dim=8, dense_arch=[16], over_arch=[16]))
    base.update(kw)
    return DLRMTrainConfig(**base)


def _job(rank, world, root):
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.getLogger("torchrec").setLevel(logging.ERROR)
    from embeddings.trainer import train
    full = train(_cfg(steps=16))
    a = os.path.join(root, "ck")
    part = train(_cfg(steps=8, checkpoint_dir=a))  # "crash" after step 8
    resumed = train(_cfg(steps=16, checkpoint_dir=a, resume=True, checkpoint_every=4))
    from graphdist.errors import ConfigError
    try:  # settings that change the result are refused, each named with both values
        train(_cfg(steps=20, checkpoint_dir=a, resume=True, embedding_lr=0.05, dense_lr=0.02, sync_every=2))
        refused = ""
    except ConfigError as e:
        refused = str(e)
    return {"full": full["losses"], "part": part["losses"], "resumed": resumed["losses"],
            "auc_full": full["auc"], "auc_resumed": resumed["auc"], "refused": refused}


def test_resume_continues_to_same_losses(tmp_path):
    r = run_ranks(_job, 2, (str(tmp_path),), timeout=170)[0]
    assert len(r["full"]) == 16 and len(r["resumed"]) == 16
    np.testing.assert_allclose(r["part"], r["full"][:8], atol=1e-6, rtol=0)
    np.testing.assert_allclose(r["resumed"], r["full"], atol=1e-6, rtol=0)
    assert abs(r["auc_full"] - r["auc_resumed"]) < 1e-6
    assert "other settings (--embedding-lr 0.02 -> 0.05; --dense-lr 0.01 -> 0.02; --sync-every 1 -> 2)" \
        in r["refused"], r["refused"]
    ck = tmp_path / "ck"
    names = sorted(os.listdir(ck))
    assert (ck / "latest").read_text().strip() == "step_00000016"
    assert not [n for n in names if ".tmp" in n], names  # no half-written snapshot left
    # 8, 12 and 16 were written; the default --keep-checkpoints 2 keeps the newest two
    assert names == ["latest", "step_00000012", "step_00000016"], names
