"""The layouts ``--sparse-groups auto`` chooses from, trained side by side in one job on test-bed
hosts, against auto's estimates (issue 49): timed blocks alternate between the layouts, so the
load of a shared box hits every layout alike.

    python benchmarks/dlrm_side.py [--hosts 2] [--per-host 2] [--gbps 0.1] [--data criteo-synth:]
        [--layouts 1,2:hosts,2:torchrec,4] [--batch-size 256] [--block 10] [--rounds 6]
        [--args "--embedding-dim 16"] [--json FILE]

One torchrun job (``--nnodes H --nproc-per-node L``) on H test-bed hosts whose links are capped at
``--gbps``. Every rank first runs what ``train-dlrm --sparse-groups auto`` runs at start-up
(:func:`embeddings.auto.resolve`: the measurements, every candidate's estimate, the choice), then
builds one sharded model per layout in ``--layouts`` (``1``: 1D; ``G:LAYOUT``; ``G`` at G = W),
each as ``train-dlrm`` builds it, and trains them in turn, ``--block`` steps at a time, ``--rounds``
times (layouts in a rotated order each round), with ``train-dlrm``'s own step loop
(:func:`embeddings.trainer.run_steps`, replica sync included). Per layout: the median block's
seconds per step, the replica sync's seconds per step (rank 0), bytes between hosts per step (every host's interface tx counter around each
block, read inside its network namespace), AUC and NE after the same samples (every layout
trains the same steps), the memory per rank of its plan, and auto's estimate. Printed as one
JSON line by rank 0 (``--json`` also writes it).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import harness  # noqa: E402


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--per-host", type=int, default=2, help="ranks per host")
    ap.add_argument("--gbps", type=float, default=0.1)
    ap.add_argument("--data", default="criteo-synth:")
    ap.add_argument("--layouts", default="1,2:hosts,2:torchrec,4")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--args", default="", help="more train-dlrm flags (config fields), one string")
    return ap


def parse() -> argparse.Namespace:
    return build_parser().parse_args()


def tx_bytes() -> int:
    with open("/sys/class/net/eth0/statistics/tx_bytes") as f:
        return int(f.read())


def worker(a) -> None:
    from embeddings.auto import resolve
    from embeddings.build import build_sharded, load_splits
    from embeddings.config import DLRMTrainConfig
    from embeddings.job import quiet_torchrec
    from embeddings.trainer import evaluate, run_steps
    from graphdist import comm, config
    from graphdist.procgroup import init_distributed
    quiet_torchrec()
    ctx = init_distributed("cpu")
    rank, world = comm.world()
    from graphdist.hosts import placement
    local = placement().ranks_per_host or 1
    ns = argparse.ArgumentParser()
    config.add_arguments(ns, DLRMTrainConfig)
    extra = ns.parse_args([a.data, "--batch-size", str(a.batch_size), "--no-progress", *shlex.split(a.args)])
    cfg = config.from_namespace(DLRMTrainConfig, extra, print_plan=False)
    train, ev = load_splits(cfg)
    _, choice = resolve(config.from_namespace(DLRMTrainConfig, extra, print_plan=False, sparse_groups="auto"),
                        train, ctx.device, local)
    models = {}
    for lay in a.layouts.split(","):
        g, _, kind = lay.partition(":")
        c = config.from_namespace(DLRMTrainConfig, extra, print_plan=False, sparse_groups=int(g),
                                  sparse_layout=kind or "hosts")
        models[lay] = (c, build_sharded(c, train, ctx.device))
    names, times, sent = list(models), {n: [] for n in models}, {n: 0 for n in models}
    sync_s = {n: 0.0 for n in models}
    for n, (_, sm) in models.items():  # time each layout's replica sync
        if sm.sync is not None:
            def timed(*args, _f=sm.sync, _n=n, **kw):
                t0 = time.perf_counter()
                _f(*args, **kw)
                sync_s[_n] += time.perf_counter() - t0
            sm.sync = timed
    for r in range(a.rounds):
        for i in range(len(names)):
            n = names[(i + r) % len(names)]
            c, sm = models[n]
            comm.barrier()
            b0, t0 = tx_bytes() if rank % local == 0 else 0, time.perf_counter()
            run_steps(sm.dmp, sm.opt, None, train, c, range(r * a.block, (r + 1) * a.block), ctx.device, model=sm)
            comm.barrier()
            times[n].append((time.perf_counter() - t0) / a.block)
            if rank % local == 0:
                sent[n] += tx_bytes() - b0
    every = comm.all_gather_json(sent)
    out = {"load": os.getloadavg()[0], "choice": {k: choice[k] for k in ("sparse_groups", "sparse_layout", "why")},
           "links": choice.get("links"), "candidates": choice.get("candidates"), "layouts": {}}
    for n, (c, sm) in models.items():
        metrics = evaluate(sm.dmp, ev, c, ctx.device)
        est = next((x for x in choice.get("candidates", []) if (x["sparse_groups"], x["sparse_layout"]) ==
                    (c.sparse_groups, c.sparse_layout if c.sparse_groups > 1 else "hosts")), None)
        out["layouts"][n] = {
            "sparse_groups": c.sparse_groups, "sparse_layout": c.sparse_layout, "step_s": statistics.median(times[n]),
            "block_steps_s": times[n], "between_hosts_bytes_per_step": sum(e[n] for e in every) / (a.rounds * a.block),
            "sync_s_per_step": sync_s[n] / (a.rounds * a.block),
            "auc": metrics["auc"], "ne": metrics["ne"],
            "memory_bytes_per_rank": max(x["embedding_bytes"] for x in sm.desc["ranks"]),
            "estimate": est["estimate"] if est else None}
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def driver(a) -> int:
    from graphdist.testbed import Testbed
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(a.hosts), "--nproc-per-node", str(a.per_host),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", "h0:29500", __file__, *sys.argv[1:]]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    with Testbed(a.hosts, gbps=a.gbps or None) as tb:
        res = tb.run_all([cmd] * a.hosts, timeout=7200, env=env)
    text = "\n".join(t for _, t in res)
    found = [ln for ln in text.splitlines() if ln.startswith("RESULT ")]
    if not found:
        raise SystemExit(f"no result ({[rc for rc, _ in res]}):\n{text[-4000:]}")
    out = {"hosts": a.hosts, "per_host": a.per_host, "gbps": a.gbps, "data": a.data, "batch_size": a.batch_size,
           "block": a.block, "rounds": a.rounds, **json.loads(found[-1][len("RESULT "):])}
    print(json.dumps(out), flush=True)
    best = min(out["layouts"], key=lambda n: out["layouts"][n]["step_s"])
    ch = out["choice"]
    for n, r in out["layouts"].items():
        est = r["estimate"]["step_s"] if r["estimate"] else float("nan")
        mark = " <- auto" if (r["sparse_groups"], r["sparse_layout"] if r["sparse_groups"] > 1 else "hosts") == \
            (ch["sparse_groups"], ch["sparse_layout"] if ch["sparse_groups"] > 1 else "hosts") else ""
        print(f"{n:12} step {r['step_s'] * 1e3:7.1f} ms  est. {est * 1e3:7.1f} ms ({est / r['step_s']:.2f})  "
              f"{r['between_hosts_bytes_per_step'] / 1e6:6.2f} MB between hosts/step  auc {r['auc']:.4f}  "
              f"{r['memory_bytes_per_rank'] / 2**20:8.1f} MiB/rank{mark}{'  (fastest)' if n == best else ''}")
    chosen = [n for n, r in out["layouts"].items() if (r["sparse_groups"], r["sparse_layout"] if r["sparse_groups"] > 1
                                                        else "hosts") == (ch["sparse_groups"], ch["sparse_layout"])]
    if chosen:
        print(f"auto chose {chosen[0]}: {out['layouts'][best]['step_s'] / out['layouts'][chosen[0]]['step_s']:.2f}x "
              f"the fastest layout's speed ({best})")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    args = parse()
    if "RANK" in os.environ:
        worker(args)
    else:
        sys.exit(driver(args))
