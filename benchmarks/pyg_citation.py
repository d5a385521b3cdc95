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

import re
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

import harness

sys.path.insert(0, str(harness.REPO / "examples"))


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
           str(harness.REPO / "examples" / "citation.py"), spec, "--model", model_name, "--runs", str(runs),
           "--seed", str(seed)]
    env = harness.checkout_env()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    accs = [float(m) for m in re.findall(r"^run \d+ .* test ([0-9.]+)$", out.stdout, re.M)]
    if out.returncode != 0 or len(accs) != runs:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return accs


def build_parser():
    p = harness.parser(__doc__)
    p.add_argument("--datasets", default="Cora,CiteSeer")
    p.add_argument("--models", default="appnp,tag")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--k", type=int, default=2)
    return p


def main(argv=None):
    a = build_parser().parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for ds in harness.csv(a.datasets):
        spec = f"planetoid:planetoid/{ds}"
        for m in harness.csv(a.models):
            t0 = time.perf_counter()
            ref = torch.tensor(one_process(spec, m, a.runs, a.seed)) * 100
            t1 = time.perf_counter()
            print(f"{ds} {m}, PyG one process: {[round(float(v), 1) for v in ref]}; {t1 - t0:.0f} s", flush=True)
            got = torch.tensor(distributed(spec, m, a.runs, a.seed, a.k)) * 100
            print(f"{ds} {m}, graphdist k = {a.k}: {[round(float(v), 1) for v in got]}; "
                  f"{time.perf_counter() - t1:.0f} s", flush=True)
            rows.append({"dataset": ds, "model": m, "one_process": ref.tolist(), f"k{a.k}": got.tolist(),
                         "one_process_s": t1 - t0, f"k{a.k}_s": time.perf_counter() - t1})
    print(harness.table(["dataset", "model", "PyG, one process", f"graphdist, k = {a.k}", "difference"],
                        [[r["dataset"], r["model"], _mean_std(r["one_process"]), _mean_std(r[f"k{a.k}"]),
                          f"{_mean(r[f'k{a.k}']) - _mean(r['one_process']):+.2f}"] for r in rows]))
    harness.write_json(a.json, rows)


def _mean(v: list[float]) -> float:
    return float(torch.tensor(v).mean())


def _mean_std(v: list[float]) -> str:
    t = torch.tensor(v)
    return f"{t.mean():.2f} +- {t.std():.2f}"


if __name__ == "__main__":
    main()
