"""LightGCN quality side by side: PyG's ``LightGCN`` trained in one process vs ``graphdist
train-rec`` on k ranks, same data, split, hyperparameters and epochs.

    python benchmarks/rec_quality.py DATA_DIR [--epochs 1000] [--nproc 2] [--json FILE]

``DATA_DIR`` holds the LightGCN reference repository's lastfm files ``data1.txt`` (train) and
``test1.txt`` (test): ``user<TAB>item<TAB>count`` lines. Both sides read them through the same
spec, ``ratings:DATA_DIR/data1.txt,split=test1.txt`` (ids remapped, so both see one split).

PyG side (the reference's recipe, written on PyG): ``LightGCN(N, 64, 3)`` with normal(0.1)
initialisation, ``get_embedding(adj)`` with ``adj`` the normalised adjacency (``gcn_norm`` of both
directions of every training pair, no self-loops, computed once as a sparse CSR matrix: the same
output as passing ``edge_index``, without recomputing the normalisation in every layer),
per epoch the reference's sampler (as many uniformly drawn users as training pairs, users without
items skipped, a uniform positive, a uniform negative redrawn while it is a positive) with
numpy's generator, batches of 2048, ``recommendation_loss(pos, neg, node_id=[u, p, n],
lambda_reg=l2/2)`` (= the reference's BPR + L2), Adam. Evaluation every ``--eval-every`` epochs and
at the end: full ranking, training items excluded, recall@20 / NDCG@20 (graphdist's evaluator).
graphdist side: ``graphdist train-rec`` with ``--nproc`` workers, METIS parts.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pyg_run(spec: str, epochs: int, eval_every: int, seed: int, dim=64, layers=3, lr=1e-3, l2=1e-4, batch=2048):
    from torch_geometric.nn.models import LightGCN

    from graphdist.rec.data import load_ratings
    from graphdist.rec.metrics import RankingEval
    from graphdist.rec.rank import RankData
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    r = load_ratings(spec)
    U, I, N = r.num_users, r.num_items, r.num_nodes
    tr = r.train.numpy()
    indptr = np.concatenate([[0], np.cumsum(np.bincount(tr[:, 0], minlength=U))])
    pos_sets = [set(tr[indptr[u]:indptr[u + 1], 1].tolist()) for u in range(U)]
    # the normalised adjacency once, as a sparse CSR matrix (PyG's gcn_norm without self-loops, as
    # LGConv computes it on every call), given to LGConv in place of edge_index: same output
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    ei, w = gcn_norm(r.graph.edge_index, None, N, add_self_loops=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notes on sparse invariants / beta CSR support
        ei = torch.sparse_coo_tensor(ei.flip(0), w, (N, N)).coalesce().to_sparse_csr()
    model = LightGCN(N, dim, layers, normalize=False)
    torch.nn.init.normal_(model.embedding.weight, std=0.1)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    from graphdist.rec.sampling import build_index
    rd = RankData(torch.arange(N), U, np.zeros(I, dtype=np.int32), build_index(tr, U, I, np.ones(U, dtype=bool)),
                  r.test.numpy(), np.bincount(tr[:, 1], minlength=I).astype(np.float32))
    ev = RankingEval(rd, 20)  # one process: every user and item is "own"

    def evaluate(epoch):
        with torch.no_grad():
            m = ev(model.get_embedding(ei))
        return {"epoch": epoch, "recall@20": m["recall"], "ndcg@20": m["ndcg"]}

    def sample():
        users = rng.integers(0, U, tr.shape[0])
        out = []
        for u in users:
            lo, hi = indptr[u], indptr[u + 1]
            if lo == hi or hi - lo == I:
                continue
            p = tr[lo + rng.integers(hi - lo), 1]
            while True:
                n = int(rng.integers(I))
                if n not in pos_sets[u]:
                    break
            out.append((u, p, n))
        return torch.tensor(out, dtype=torch.int64)

    evals, losses, times = [], [], []
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        S = sample()
        tot, nb = 0.0, 0
        for b in range(0, S.shape[0], batch):
            u, p, n = S[b:b + batch, 0], S[b:b + batch, 1] + U, S[b:b + batch, 2] + U
            e = model.get_embedding(ei)
            pos, neg = (e[u] * e[p]).sum(1), (e[u] * e[n]).sum(1)
            loss = model.recommendation_loss(pos, neg, node_id=torch.cat([u, p, n]), lambda_reg=l2 / 2)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot, nb = tot + float(loss.detach()), nb + 1
        times.append(time.perf_counter() - t0)
        losses.append(tot / nb)
        if (eval_every and epoch % eval_every == 0) or epoch == epochs:
            evals.append(evaluate(epoch))
            print(f"[pyg] epoch {epoch} loss {losses[-1]:.4f} recall@20 {evals[-1]['recall@20']:.4f} "
                  f"ndcg@20 {evals[-1]['ndcg@20']:.4f} ({np.median(times):.2f} s/epoch)", flush=True)
    return {"recall@20": evals[-1]["recall@20"], "ndcg@20": evals[-1]["ndcg@20"], "eval": evals,
            "losses": losses, "time/epoch_s": float(np.median(times))}


def graphdist_run(spec: str, epochs: int, eval_every: int, seed: int, nproc: int, report: Path):
    from graphdist.rec import RecConfig, run
    cfg = RecConfig(spec=spec, parts=nproc, nproc=nproc, method="metis", epochs=epochs, eval_every=eval_every,
                    seed=seed, report=str(report), progress=False)
    return run(cfg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", type=Path, help="folder with data1.txt and test1.txt (LightGCN repo's lastfm)")
    ap.add_argument("--epochs", type=int, default=1000)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2020)
    ap.add_argument("--only", choices=["pyg", "graphdist"], default=None)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the PyG process")
    ap.add_argument("--json", type=Path, default=Path("runs/rec_quality.json"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    spec = f"ratings:{a.data_dir / 'data1.txt'},split=test1.txt"
    a.json.parent.mkdir(parents=True, exist_ok=True)
    out = {"spec": spec, "epochs": a.epochs, "seed": a.seed, "nproc": a.nproc}
    if a.only != "pyg":
        out["graphdist"] = graphdist_run(spec, a.epochs, a.eval_every, a.seed, a.nproc,
                                         a.json.with_name(a.json.stem + "_graphdist_report.json"))
        a.json.write_text(json.dumps(out, indent=2))
    if a.only != "graphdist":
        out["pyg"] = pyg_run(spec, a.epochs, a.eval_every, a.seed)
    if "pyg" in out and "graphdist" in out:
        out["ratio/recall@20"] = out["graphdist"]["recall@20"] / out["pyg"]["recall@20"]
        best = lambda rep: max(e["recall@20"] for e in rep["eval"])  # noqa: E731
        out["ratio/best_recall@20"] = best(out["graphdist"]) / best(out["pyg"])
    a.json.write_text(json.dumps(out, indent=2))
    for side in ("pyg", "graphdist"):
        if side in out:
            rep = out[side]
            print(f"{side:>9}: recall@20 {rep['recall@20']:.4f} ndcg@20 {rep['ndcg@20']:.4f} "
                  f"{rep['time/epoch_s']:.2f} s/epoch")
    if "ratio/recall@20" in out:
        print(f"graphdist / pyg recall@20: {out['ratio/recall@20']:.3f} (at epoch {a.epochs}), "
              f"{out['ratio/best_recall@20']:.3f} (best evaluated epoch)")
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
