"""Probes behind the moved-rows target (issue 20 item 5): how far other objectives get.

    python benchmarks/archive/moved_probe.py separator             # METIS vertex separator at k=2 vs auto
    python benchmarks/archive/moved_probe.py seeds --seeds 20      # auto's start + role-bound refinement over many seeds
    python benchmarks/archive/moved_probe.py mtkahypar --parts 8   # Mt-KaHyPar km1 on the role-bound net model of the cover
    python benchmarks/archive/moved_probe.py paths --seeds 3       # each start refined on the plain halo vs its own cover's bound

Every figure is moved rows (``moved_rows``) over node-balanced METIS's plain halo at the same k
(imbalance 3%), the ratio of the target (<= 0.6 with node and edge imbalance <= 5%).

``separator``: at k=2 the rows moved with pre/post aggregation are twice the minimum vertex
cover of the cut edges, i.e. twice a vertex separator; METIS_ComputeVertexSeparator (node
balance only) gives a small one, so ``2 |S|`` is what a separator-based partition moves.
``seeds``: multi-constraint METIS (volume, hub-weighted cut, cut objectives) with seeds
0..N-1, each rebalanced and refined on its own cover's role bound and then by
``refine_moved``, as ``auto`` does per start: the best, median and worst of all of them.
``mtkahypar``: the roles of ``auto``'s result define a hypergraph whose connectivity bounds
the moved rows (:func:`partitioners.moved.moved_pins`); Mt-KaHyPar minimises it with one blended
weight; then the caps are restored and refined as in ``auto``.
``paths``: every start of ``auto``'s portfolio and seed, rebalanced and refined on the plain
halo volume (the issue-10 ``auto``) or on the role bound of its own cover (now), then
``refine_moved``: how often each is better, and the best start.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness  # noqa: E402

SNAP = os.environ.get("GRAPHDIST_SNAP", "../shared/datasets/snap")
GRAPHS = {"gnutella": f"edgelist:{SNAP}/p2p-Gnutella24.txt", "facebook": f"edgelist:{SNAP}/facebook_combined.txt"}


def setup(name: str, k: int):
    from graphdist.data import load_graph
    from partitioners import partition, quality
    from partitioners.common import make_weights
    g = load_graph(GRAPHS[name])
    base = quality(g, partition(g, k, method="metis", imbalance=0.03, seed=0), k=k)["comm_volume"]
    return g, base, make_weights(g, k, 0.03, "both")


def refine_like_auto(g, k, w, a0, seed):
    from partitioners.moved import moved_key, moved_pins, refine_moved, roles
    from partitioners.refine import VolumeRefiner
    ref = VolumeRefiner(g, k, w, pins=moved_pins(g, roles(g, a0, k)))
    a = ref.run(a0, rounds=50, seed=seed)
    if not (ref.loads(a) <= ref.caps[:, None] + 1e-9).all():
        return None
    return moved_key(g, refine_moved(g, a, k, w, rounds=50, seed=seed, alternations=3), k)[0]


def separator(name: str) -> dict:
    from partitioners import metis, partition
    from partitioners.common import sym_csr
    from partitioners.moved import moved_key
    g, base, w = setup(name, 2)
    s = sym_csr(g)
    n = int(g.num_nodes)
    lib, idx = metis._metis_lib(n, s.nnz)
    layout = metis._metis_libs()[idx][1]
    best = None
    for seed in range(3):
        opts = np.full(40, -1, dtype=idx)
        lib.METIS_SetDefaultOptions(metis._ptr(opts))
        opts[layout["seed"]], opts[layout["ufactor"]] = seed, 30
        part, size = np.zeros(n, idx), np.zeros(1, idx)
        xadj, adj = np.ascontiguousarray(s.indptr, dtype=idx), np.ascontiguousarray(s.indices, dtype=idx)
        rc = lib.METIS_ComputeVertexSeparator(metis._ptr(np.array([n], idx)), metis._ptr(xadj),
                                              metis._ptr(adj), metis._ptr(np.ones(n, idx)),
                                              metis._ptr(opts), metis._ptr(size), metis._ptr(part))
        if rc != 1:
            raise RuntimeError(f"METIS_ComputeVertexSeparator failed with status {rc}")
        part = part.astype(np.int64)
        moved = min(moved_key(g, np.where(part == 2, side, part), 2)[0] for side in (0, 1))
        if best is None or moved < best["moved"]:
            best = {"separator": int(size[0]), "moved": int(moved)}
    auto = moved_key(g, partition(g, 2).numpy(), 2)[0]
    return {"graph": name, "k": 2, "metis_halo": base, **best, "ratio": best["moved"] / base,
            "auto_moved": int(auto), "auto_ratio": auto / base}


def seeds(name: str, k: int, n_seeds: int) -> dict:
    from partitioners import metis
    g, base, w = setup(name, k)
    got = []
    for seed in range(n_seeds):
        for obj in ("vol", "hub", "cut"):
            a0 = metis.metis_partition(g, k, w, seed=seed, imbalance=0.009, objective="vol" if obj == "vol" else "cut",
                                          hub_cut=obj == "hub")
            m = refine_like_auto(g, k, w, a0, seed)
            if m is not None:
                got.append(m / base)
    got.sort()
    return {"graph": name, "k": k, "starts": 3 * n_seeds, "within_caps": len(got), "best": got[0],
            "median": got[len(got) // 2], "worst": got[-1]}


def mtkahypar(name: str, k: int) -> dict:
    import mtkahypar as mtk_mod
    from partitioners import backends, partition
    from partitioners.moved import moved_key, moved_pins, roles
    from partitioners.refine import VolumeRefiner
    g, base, w = setup(name, k)
    a = partition(g, k).numpy()
    pins = moved_pins(g, roles(g, a, k)).tocsc()
    pins = pins[:, np.flatnonzero(np.diff(pins.indptr) > 1)].tocsc()
    mtk = mtk_mod.initialize(1, False)
    ctx = mtk.context_from_preset(mtk_mod.PresetType.DETERMINISTIC)
    ctx.set_partitioning_parameters(k, 0.03, mtk_mod.Objective.KM1)
    ctx.logging = False
    mtk_mod.set_seed(0)
    t0 = time.perf_counter()
    hg = backends._mtkahypar_hypergraph(mtk_mod, mtk, ctx, pins.indptr.astype(np.int64), pins.indices,
                                        backends.single_weight(w), int(g.num_nodes))
    b = np.asarray(hg.partition(ctx).get_partition(), dtype=np.int64)
    sec = time.perf_counter() - t0
    over = (VolumeRefiner(g, k, w).loads(b) / np.asarray(w.caps)[:, None]).max(1) - 1
    fixed = refine_like_auto(g, k, w, b, 0)
    return {"graph": name, "k": k, "auto": moved_key(g, a, k)[0] / base, "mtkahypar": moved_key(g, b, k)[0] / base,
            "mtkahypar_node_over": float(over[0]), "mtkahypar_edge_over": float(over[1]), "mtkahypar_s": sec,
            "after_caps": None if fixed is None else fixed / base}


def paths(name: str, k: int, n_seeds: int) -> dict:
    from partitioners import hubsplit, metis
    from partitioners.moved import moved_key, refine_moved
    from partitioners.refine import VolumeRefiner
    g, base, w = setup(name, k)
    wins = {"own_cover": 0, "plain_halo": 0, "tie": 0}
    best = (np.inf, "")
    for seed in range(n_seeds):
        for spec in ("metis-vol@0.3", "metis-hub@0.3", "hubsplit@0.01"):
            if spec == "hubsplit@0.01":
                a0 = hubsplit.hubsplit_partition(g, k, w, frac=0.01, imbalance=0.01, seed=seed)
            else:
                a0 = metis.metis_partition(g, k, w, seed=seed, imbalance=0.009,
                                              objective="vol" if spec.startswith("metis-vol") else "cut",
                                              hub_cut=spec.startswith("metis-hub"))
            own = refine_like_auto(g, k, w, a0, seed)
            ref = VolumeRefiner(g, k, w)
            a = ref.run(a0, rounds=50, seed=seed)
            plain = (moved_key(g, refine_moved(g, a, k, w, rounds=50, seed=seed, alternations=3), k)[0]
                     if (ref.loads(a) <= ref.caps[:, None] + 1e-9).all() else None)
            o, p_ = (np.inf if own is None else own), (np.inf if plain is None else plain)
            wins["own_cover" if o < p_ else "plain_halo" if p_ < o else "tie"] += 1
            best = min(best, (o / base, f"{spec} seed {seed}"))
    return {"graph": name, "k": k, **wins, "best": best[0], "best_start": best[1]}


def build_parser():
    p = harness.parser(__doc__)
    p.add_argument("probe", choices=["separator", "seeds", "mtkahypar", "paths"])
    p.add_argument("--graphs", default="gnutella,facebook")
    p.add_argument("--parts", default="4,8,16")
    p.add_argument("--seeds", type=int, default=20)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    rows = []
    for name in harness.csv(args.graphs):
        if args.probe == "separator":
            rows.append(separator(name))
            print(json.dumps(rows[-1]), flush=True)
            continue
        for k in harness.csv(args.parts, int):
            r = (seeds(name, k, args.seeds) if args.probe == "seeds" else
                 paths(name, k, args.seeds) if args.probe == "paths" else mtkahypar(name, k))
            rows.append(r)
            print(json.dumps(r), flush=True)
    harness.write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
