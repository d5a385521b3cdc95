"""Do losses at W ranks drift from 1 rank because of rounding or because of a real difference?

    python benchmarks/archive/dlrm_stability.py --steps 60 --batch-size 512 --embedding-lr 0.05 --dense-lr 0.05
    python benchmarks/archive/dlrm_stability.py --steps 312                                # today's defaults

On ``criteo-synth:`` (100k rows) with ``--sharding`` table_wise and data_parallel, it trains

* ``train-dlrm``'s own loop at 1 and at ``--ranks`` ranks (gloo, one thread per rank), and
* an unsharded single-process reference (plain torch: the EmbeddingBagCollection, row-wise AdaGrad
  written out, torch's AdaGrad for the dense layers) in float32 and in float64,

all from the same initial weights on the same batches, and prints per pair the largest loss
difference and the first step where it exceeds 1e-5. If W ranks differ from 1 rank by about as
much as float32 differs from float64 in the *same* single-process code, the drift is rounding
amplified by the optimizer, not a dropped or duplicated sample (which would also separate the
float64 reference from every float32 run). The reference is also run with each batch cut into W
slices as the ranks cut it: in float64 cutting changes nothing (every sample counted once), in
float32 it reproduces the W-rank losses when the difference is summation order. Last, for the step
where W ranks and 1 rank part, the smallest |input| of any ReLU in that step's batch: a unit
within rounding of its kink (~1e-7) is switched on in one summation order and off in the other.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness  # noqa: E402


def _cfg(a, sharding="table_wise"):
    from embeddings.config import DLRMTrainConfig
    return DLRMTrainConfig(spec=a.spec, sharding=sharding, steps=a.steps, batch_size=a.batch_size,
                           embedding_lr=a.embedding_lr, dense_lr=a.dense_lr, progress=False, print_plan=False)


def _job(rank, world, a):
    from embeddings.job import quiet_torchrec
    quiet_torchrec()
    from embeddings.trainer import train
    return {st: train(_cfg(a, st))["losses"] for st in ("table_wise", "data_parallel")}


class _RowAdagrad:
    def __init__(self, params, lr, eps=1e-8):
        self.params, self.lr, self.eps = list(params), lr, eps
        self.state = [torch.zeros(p.shape[0], 1, dtype=p.dtype) for p in self.params]

    def step(self):
        for p, s in zip(self.params, self.state):
            s += p.grad.pow(2).mean(1, keepdim=True)
            p.data.sub_(self.lr * p.grad / (s.sqrt() + self.eps))


def reference(a, dtype, slices: int = 1, kinks: list | None = None) -> list[float]:
    """The unsharded model, one process, in ``dtype``; with ``slices`` > 1 each batch is cut as
    ``slices`` ranks cut it and the loss is the mean of the slices' mean losses (the arithmetic of
    W ranks in one process: the same sums in another order)."""
    from embeddings.build import load_splits
    from embeddings.data import make_batch
    from embeddings.model import LossWrapper, build_model
    cfg = _cfg(a)
    train, _ = load_splits(cfg)
    m = LossWrapper(build_model(cfg.model, 13, train.num_embeddings, cfg.seed)).to(dtype)
    eopt = _RowAdagrad([p for k, p in m.named_parameters() if "embedding_bags" in k], cfg.embedding_lr)
    dopt = torch.optim.Adagrad([p for k, p in m.named_parameters() if "embedding_bags" not in k],
                               lr=cfg.dense_lr, eps=1e-8)
    per_epoch, B = len(train) // cfg.batch_size, cfg.batch_size
    seen: list = []
    if kinks is not None:  # the smallest |input| of any ReLU per step: a unit on its kink
        relu_in = [mod for mod in m.modules() if isinstance(mod, torch.nn.Linear)][:-1]  # all but the logit
        for mod in relu_in:
            mod.register_forward_hook(lambda mod, inp, o: seen.append(o.detach().abs()))
    out = []
    for t in range(cfg.steps):
        seen.clear()
        for p in m.parameters():
            p.grad = None
        loss = 0.0
        for r in range(slices):
            b, _ = make_batch(train, (t % per_epoch) * B, B, r, slices)
            part, _ = m(type(b)(b.dense_features.to(dtype), b.sparse_features, b.labels.to(dtype)))
            loss = loss + part / slices
        loss.backward()
        if kinks is not None:
            kinks.append(min(float(x.min()) for x in seen))
        eopt.step()
        dopt.step()
        out.append(float(loss.detach()))
    return out


def _cmp(x, y) -> dict:
    d = np.abs(np.asarray(x) - np.asarray(y))
    over = np.nonzero(d > 1e-5)[0]
    return {"max_abs_diff": float(d.max()), "first_step_over_1e-5": int(over[0]) if over.size else None}


def build_parser():
    p = harness.parser(__doc__)
    p.add_argument("--spec", default="criteo-synth:")
    p.add_argument("--steps", type=int, default=312)
    p.add_argument("--ranks", type=int, default=4)
    from embeddings.config import DLRMTrainConfig
    d = DLRMTrainConfig()
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--embedding-lr", type=float, default=d.embedding_lr)
    p.add_argument("--dense-lr", type=float, default=d.dense_lr)
    return p


def main(argv=None) -> dict:
    a = build_parser().parse_args(argv)
    from graphdist.testing import run_ranks
    torch.set_num_threads(1)
    one = run_ranks(_job, 1, (a,), timeout=7200)[0]
    many = run_ranks(_job, a.ranks, (a,), timeout=7200)[0]
    kinks: list[float] = []
    r32, r64 = reference(a, torch.float32, kinks=kinks), reference(a, torch.float64)
    W = a.ranks
    s32, s64 = reference(a, torch.float32, W), reference(a, torch.float64, W)
    out = {"settings": {"steps": a.steps, "batch_size": a.batch_size, "embedding_lr": a.embedding_lr,
                        "dense_lr": a.dense_lr, "spec": a.spec},
           f"table_wise {W} ranks vs 1 rank": _cmp(many["table_wise"], one["table_wise"]),
           f"data_parallel {W} ranks vs 1 rank": _cmp(many["data_parallel"], one["data_parallel"]),
           "reference float32 vs float64": _cmp(r32, r64),
           f"table_wise {W} ranks vs reference float32": _cmp(many["table_wise"], r32),
           f"table_wise {W} ranks vs reference float64": _cmp(many["table_wise"], r64),
           "table_wise 1 rank vs reference float32": _cmp(one["table_wise"], r32),
           "table_wise 1 rank vs reference float64": _cmp(one["table_wise"], r64),
           f"reference in {W} slices vs whole, float64": _cmp(s64, r64),
           f"reference in {W} slices vs whole, float32": _cmp(s32, r32),
           f"table_wise {W} ranks vs reference in {W} slices, float32": _cmp(many["table_wise"], s32),
           f"data_parallel {W} ranks vs reference in {W} slices, float32": _cmp(many["data_parallel"], s32)}
    d = np.abs(np.asarray(many["table_wise"]) - np.asarray(one["table_wise"]))
    if (d > 1e-6).any():  # the loss of step t shows the update of step t - 1
        t = int(np.nonzero(d > 1e-6)[0][0]) - 1
        out[f"smallest |ReLU input| in step {t}, the step before {W} ranks and 1 rank part"] = kinks[t]
        out["median over all steps of the smallest |ReLU input| of a step"] = float(np.median(kinks))
    print(json.dumps(out, indent=1))
    harness.write_json(a.json, out)
    return out


if __name__ == "__main__":
    sys.exit(main() and 0)
