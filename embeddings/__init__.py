"""DLRM training on sharded embedding tables (``graphdist train-dlrm``), built on torchrec.

    config.py     DLRMTrainConfig: every flag of train-dlrm, typed and documented
    data.py       click data as arrays; per-rank (dense, KeyedJaggedTensor, labels) batches
    criteo.py     Criteo TSV streamed into a memory-mapped binary cache
    synth.py      criteo-synth: Criteo-shaped data with a planted click model
    model.py      DLRM / DCNv2 from torchrec modules, world-size independent initialisation
    sharding.py   sharding plans (forced types or torchrec's planner), their digest and report
    twod.py       2D sparse parallelism: rank layout, DMPCollection (CUDA) or its CPU equivalent
    cost.py       a layout's bytes per collective, placed on the hosts, and its estimated step time
    auto.py       --sparse-groups auto: candidates, start-up measurements, the choice
    build.py      splits, checks, the plan, the sharded model and its optimizers
    trainer.py    one rank's training loop, replica sync, signals, checkpoints, evaluation
    metrics.py    AUC, log loss, normalised entropy
    job.py        a whole job: checks, then one process or N local workers
    demo.py       the DLRM part of ``graphdist demo``

torchrec is not in graphdist's package metadata (it declares the CUDA-only ``fbgemm-gpu``);
``scripts/install.sh`` installs it with the right FBGEMM build, and a missing torchrec stops
``train-dlrm`` with one line that says so.
"""
from embeddings.config import DLRMTrainConfig
from embeddings.job import run

__all__ = ["DLRMTrainConfig", "run"]
