"""Graph recommenders: LightGCN with its embedding table row-sharded along the graph partition.

    data.py      interactions (rating logs, the LightGCN train/test layout) and the user-item graph
    synth.py     rec-synth: interactions from a planted low-rank preference model
    sampling.py  BPR triples drawn by global sample index (k ranks draw what one process draws)
    model.py     the adjacency, the sharded table, the per-batch row exchange, the BPR step
    metrics.py   recall@K / NDCG@K over all items, distributed; the popularity baseline
    setup.py     a rank's part and data
    trainer.py   the training loop, checkpoints, signals, report
    job.py       ``graphdist train-rec``: checks, then one process or N local workers

    from graphdist.rec import RecConfig, run
    run(RecConfig(spec="rec-synth:", parts=2, method="metis", epochs=20))
"""
from graphdist.rec.config import RecConfig
from graphdist.rec.data import Ratings, load_ratings
from graphdist.rec.job import run

__all__ = ["RecConfig", "Ratings", "load_ratings", "run"]
