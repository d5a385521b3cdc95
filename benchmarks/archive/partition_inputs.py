"""How the graph reaches KaMinPar and Mt-KaHyPar: time and memory of each way, side by side.

    python benchmarks/archive/partition_inputs.py                       # ~30M-edge SBM, every variant
    python benchmarks/archive/partition_inputs.py --spec SPEC --only kaminpar:parhip,mtkahypar:file

Every variant runs in a fresh child process that loads the graph, resets its peak-RSS counter
(``/proc/self/clear_refs``), then builds the partitioner's input and (KaMinPar) partitions; it
reports the seconds of each step and the peak RSS *above the loaded graph* (``VmHWM`` after the
reset minus the RSS before it).

    kaminpar:parhip      binary ParHiP file written with numpy ``tofile`` (graphdist's path)
    kaminpar:compress    the same file, loaded as KaMinPar's compressed graph
    kaminpar:text        METIS text through ``.astype(str)`` and a loop per node (the old path)
    kaminpar:networkit   kaminpar-networkit on a NetworKit graph built from COO arrays
    mtkahypar:file       hMetis text written by numpy's vectorised digits (graphdist's path)
    mtkahypar:list       the binding's list-of-nets constructor (one int array per net)
    mtkahypar:text       hMetis text through ``.astype(str)`` and a loop per net (the old path)

``kaminpar:networkit`` needs ``pip install kaminpar-networkit==3.7.3`` (it brings networkit; graphdist
itself does not use them). Mt-KaHyPar variants build the hypergraph only (the partitioning that follows is the same call
on the same object whichever way it was built).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness
import harness  # noqa: E402

SPEC = "sbm:nodes=600000,classes=47,avg_degree=50,homophily=0.9,features=0,seed=0"
VARIANTS = ["kaminpar:parhip", "kaminpar:compress", "kaminpar:text", "kaminpar:networkit",
            "mtkahypar:file", "mtkahypar:list", "mtkahypar:text"]


def _old_metis_text(path, s, vw):
    """The writer graphdist used before (kept here as the baseline)."""
    import numpy as np
    n = s.shape[0]
    with open(path, "w") as f:
        f.write(f"{n} {s.nnz // 2} 010\n")
        ptr, ind = s.indptr, (s.indices.astype(np.int64) + 1).astype(str)
        for r0 in range(0, n, 1 << 16):
            r1 = min(n, r0 + (1 << 16))
            f.write("\n".join(str(vw[r]) + (" " + " ".join(ind[ptr[r]:ptr[r + 1]]) if ptr[r + 1] > ptr[r] else "")
                              for r in range(r0, r1)) + "\n")


def _old_hmetis_text(path, nptr, pins, vw):
    import numpy as np
    with open(path, "w") as f:
        f.write(f"{nptr.size - 1} {vw.size} 10\n")
        p = (pins.astype(np.int64) + 1).astype(str)
        for r0 in range(0, nptr.size - 1, 1 << 16):
            r1 = min(nptr.size - 1, r0 + (1 << 16))
            f.write("\n".join(" ".join(p[nptr[r]:nptr[r + 1]]) for r in range(r0, r1)) + "\n")
        f.write("\n".join(map(str, vw.tolist())) + "\n")


def one(spec: str, variant: str, k: int) -> dict:
    import numpy as np
    from graphdist.data import load_graph
    from partitioners import backends
    from partitioners.common import make_weights, sym_csr
    g = load_graph(spec)
    w = backends.single_weight(make_weights(g, k, 0.03, "nodes"))
    base = harness.status_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    lib, how = variant.split(":")
    out = {"variant": variant, "nodes": g.num_nodes, "edges": g.num_edges}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graphdist-inputs-") as d:
        if lib == "kaminpar":
            import kaminpar
            s = sym_csr(g)
            if how in ("parhip", "compress"):
                kg = backends._kaminpar_graph(kaminpar, s, w, compress=how == "compress")
            elif how == "text":
                path = os.path.join(d, "g.metis")
                _old_metis_text(path, s, w)
                kg = kaminpar.load_graph(path, kaminpar.GraphFileFormat.METIS)
            else:
                import kaminpar_networkit
                import networkit as nk
                rows = np.repeat(np.arange(g.num_nodes, dtype=np.int64), np.diff(s.indptr))
                up = rows < s.indices
                ng = nk.graph.GraphFromCoo((rows[up], s.indices[up].astype(np.int64)), n=g.num_nodes)
                del rows, up
            out["input_s"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            if how == "networkit":
                part = kaminpar_networkit.KaMinPar(ng).computePartitionWithEpsilon(k, 0.03)
                a = np.asarray(part.getVector(), dtype=np.int64)
            else:
                a = backends._kaminpar_run(kaminpar, kg, k, 0.03, 0, "default")
            out["partition_s"] = time.perf_counter() - t1
            from partitioners.quality import edge_cut
            out["edge_cut"] = edge_cut(g, a)
        else:
            import mtkahypar
            mtk = mtkahypar.initialize(1, False)
            ctx = mtk.context_from_preset(mtkahypar.PresetType.DETERMINISTIC)
            ctx.set_partitioning_parameters(k, 0.03, mtkahypar.Objective.KM1)
            nptr, pins = backends.column_nets(g)
            if how == "text":
                path = os.path.join(d, "g.hgr")
                _old_hmetis_text(path, nptr, pins, w)
                hg = mtk.hypergraph_from_file(path, ctx, mtkahypar.FileFormat.HMETIS)
            else:
                hg = backends._mtkahypar_hypergraph(mtkahypar, mtk, ctx, nptr, pins, w, g.num_nodes,
                                                    via="list" if how == "list" else "file")
            out["input_s"] = time.perf_counter() - t0
            out["pins"] = int(hg.num_pins())
    out["peak_above_graph_bytes"] = harness.status_bytes("VmHWM") - base
    out["graph_rss_bytes"] = base
    return out


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--spec", default=SPEC)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--only", default=",".join(VARIANTS))
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.one:
        print(json.dumps(one(args.spec, args.one, args.parts)))
        return 0
    rows = []
    for v in harness.csv(args.only):
        r = harness.child_json([__file__, "--one", v, "--spec", args.spec, "--parts", str(args.parts)], args.timeout)
        r.setdefault("variant", v)
        rows.append(r)
        if "error" in r:
            print(f"{v:<20} error: {r['error']}", flush=True)
        else:
            print(f"{v:<20} input {r['input_s']:7.1f} s  partition {r.get('partition_s', float('nan')):7.1f} s  "
                  f"peak above graph {r['peak_above_graph_bytes'] / 2**30:6.2f} GiB  "
                  f"cut {r.get('edge_cut', '-')}", flush=True)
    harness.write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
