"""Accuracy of multi-hop PyG models (APPNP, TAGConv) trained on k ranks with graphdist against the
same PyG model trained in one process, on Cora and CiteSeer, 5 seeds (BENCHMARKS.md).

    GRAPHDIST_DATA=/path/to/datasets python benchmarks/pyg_citation.py [--models appnp,tag] [--k 2]

For each dataset and model: ``examples/citation.py`` under ``torchrun --nproc-per-node K``
(METIS parts; seeds 0..4; graphdist's lines), and the benchmark protocol in one process with
PyG alone (``T.NormalizeFeatures``, ``F.nll_loss``, ``torch.manual_seed(seed)``; the same model
class, the same public split; the data read by graphdist's loader, nothing else of graphdist).
Dropout draws differ between the two (each rank its own stream), so the runs differ by seed
noise, not by the model: the k = 1 ... k = K logits are equal at dropout 0 (tests/test_pyg_hops.py).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))


def one_process(spec: str, model_name: str, runs: int, seed: int) -> list[float]:
    """PyG alone, in one process: the benchmark protocol of examples/citation.py."""
    import citation
    import torch_geometric.transforms as T
    from torch_geometric.data import Data

    from graphdist.data import load_graph
    g = load_graph(spec)
    data = T.NormalizeFeatures()(Data(x=g.x.clone(), edge_index=g.edge_index, y=g.y))
    a = citation.parse_args([spec, "--model", model_name])
    model = citation.MODELS[model_name](g.num_features, int(g.y.max()) + 1, a)
    accs = []
    for run in range(runs):
        torch.manual_seed(seed + run)
        model.reset_parameters()
        opt = torch.optim.Adam(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
        best, test_acc, hist = float("inf"), 0.0, []
        for epoch in range(1, a.epochs + 1):
            model.train()
            opt.zero_grad()
            out = model(data.x, data.edge_index)
            F.nll_loss(out[g.train_mask], g.y[g.train_mask]).backward()
            opt.step()
            model.eval()
            with torch.no_grad():
                out = model(data.x, data.edge_index)
            val = float(F.nll_loss(out[g.val_mask], g.y[g.val_mask]))
            if val < best:
                best = val
                test_acc = float((out.argmax(1) == g.y)[g.test_mask].double().mean())
            hist.append(val)
            if a.early_stopping > 0 and epoch > a.epochs // 2:
                if val > torch.tensor(hist[-(a.early_stopping + 1):-1]).mean().item():
                    break
        accs.append(test_acc)
    return accs


def distributed(spec: str, model_name: str, runs: int, seed: int, k: int) -> list[float]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(k),
           os.path.join(ROOT, "examples", "citation.py"), spec, "--model", model_name, "--runs", str(runs),
           "--seed", str(seed)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    accs = [float(m) for m in re.findall(r"^run \d+ .* test ([0-9.]+)$", out.stdout, re.M)]
    if out.returncode != 0 or len(accs) != runs:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return accs


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="Cora,CiteSeer")
    p.add_argument("--models", default="appnp,tag")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--k", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(1)
    print(f"| dataset | model | PyG, one process | graphdist, k = {a.k} | difference |")
    print("| --- | --- | --- | --- | --- |")
    for ds in a.datasets.split(","):
        spec = f"planetoid:planetoid/{ds}"
        for m in a.models.split(","):
            t0 = time.perf_counter()
            ref = torch.tensor(one_process(spec, m, a.runs, a.seed)) * 100
            print(f"<!-- {ds} {m}, PyG one process: {[round(float(v), 1) for v in ref]}; "
                  f"{time.perf_counter() - t0:.0f} s -->", flush=True)
            got = torch.tensor(distributed(spec, m, a.runs, a.seed, a.k)) * 100
            print(f"| {ds} | {m} | {ref.mean():.2f} +- {ref.std():.2f} | {got.mean():.2f} +- {got.std():.2f} | "
                  f"{got.mean() - ref.mean():+.2f} |  <!-- runs {[round(float(v), 1) for v in ref]} vs "
                  f"{[round(float(v), 1) for v in got]}; {time.perf_counter() - t0:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
