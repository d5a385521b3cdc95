"""Full-batch GCN / GraphSAGE on a partitioned graph (``graphdist train-gcn``).

    config.py    GCNConfig: every flag of train-gcn, typed and documented
    models.py    GCN and SAGE layers written for one device; the halo exchange is injected
    trainer.py   one rank's training loop (data-parallel weights, checkpoints, report)
    job.py       a whole job: checks, then one process or N local workers
    demo.py      the GCN part of ``graphdist demo``
"""
from graphdist.gnn.config import GCNConfig
from graphdist.gnn.job import run

__all__ = ["GCNConfig", "run"]
