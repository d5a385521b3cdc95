"""graphdist's DLRM training loop vs a plain torchrec loop: same model, plan, batch, ranks.

    python benchmarks/dlrm_throughput.py --nproc 2 --sharding row_wise --steps 150 --repeats 3

Both sides use the same DistributedModelParallel (built by ``embeddings.trainer.build_sharded``:
same plan, fused row-wise Adagrad, dense Adagrad) on the same ``criteo-synth`` rows:

* torchrec:  batches prebuilt in memory, then ``loss = dmp(b); loss.backward(); opt.step()``
             (no data work inside the timed loop: an upper bound for the plain loop)
* graphdist: ``embeddings.trainer.train`` (batches cut per rank on the fly, TrainPipelineSparseDist,
             tqdm off), its own ``throughput/samples_per_s``

The two run alternately ``--repeats`` times in one process group; medians are compared. Prints a
JSON line with both figures and the ratio graphdist / torchrec (target >= 0.95).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def _cfg(a):
    from embeddings.config import DLRMTrainConfig
    return DLRMTrainConfig(spec=a.spec, sharding=a.sharding, batch_size=a.batch_size, steps=a.steps,
                           eval_batch_size=8192, progress=False, print_plan=False, pipeline=not a.no_pipeline)


def _job(rank, world, a):
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.getLogger("torchrec").setLevel(logging.ERROR)
    from embeddings.data import make_batch
    from embeddings.trainer import build_sharded, load_splits, train
    import torch.distributed as dist
    torch.set_num_threads(a.threads)
    cfg = _cfg(a)
    data, _ = load_splits(cfg)
    per_epoch = len(data) // cfg.batch_size
    batches = [make_batch(data, (t % per_epoch) * cfg.batch_size, cfg.batch_size, rank, world)[0]
               for t in range(a.steps)]
    tr, gd = [], []
    for _ in range(a.repeats):
        dmp, opt, _ = build_sharded(cfg, data, torch.device("cpu"))
        dmp.train()
        for b in batches[:5]:  # warm-up, as the pipeline's first steps also pay for it
            opt.zero_grad()
            loss, _ = dmp(b)
            loss.backward()
            opt.step()
        dist.barrier()
        t0 = time.perf_counter()
        for b in batches:
            opt.zero_grad()
            loss, _ = dmp(b)
            loss.backward()
            opt.step()
        dist.barrier()
        tr.append(a.steps * cfg.batch_size / (time.perf_counter() - t0))
        del dmp, opt
        gd.append(train(cfg)["throughput/samples_per_s"])
    return {"torchrec": tr, "graphdist": gd}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="criteo-synth:rows=100000")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--sharding", default="row_wise")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--no-pipeline", action="store_true", help="graphdist side without TrainPipelineSparseDist")
    a = p.parse_args(argv)
    from graphdist.testing import run_ranks
    r = run_ranks(_job, a.nproc, (a,), timeout=3600)[0]
    tr, gd = statistics.median(r["torchrec"]), statistics.median(r["graphdist"])
    out = {"torchrec_samples_per_s": round(tr, 1), "graphdist_samples_per_s": round(gd, 1),
           "ratio": round(gd / tr, 3), "runs": r, "nproc": a.nproc, "sharding": a.sharding,
           "batch_size": a.batch_size, "steps": a.steps, "pipeline": not a.no_pipeline,
           "device": "cuda" if torch.cuda.is_available() else "cpu"}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
