"""The route plan's peak per rank (``--halo-route hosts``): the plan built from each rank's own send
list and one all-to-all (:func:`graphdist.exchange.route.gather_route`, now) against the plan
built from every rank's send lists gathered onto every rank (before issue 47), side by side on
the same parts, each in fresh rank processes.

    python benchmarks/route_plan.py --partition DIR [--hosts 2] [--halo plain,mvc] [--variants own,all] [--json FILE]

k ranks (k = the artifact's parts, forked by :func:`graphdist.testing.run_ranks`, gloo on this
machine), host-major on ``--hosts`` hosts (the placement the job's ranks agree on, set here). Each rank maps
its part; then its peak is the rise of its resident set
over the plan's build (the kernel's high-water mark ``VmHWM``, reset through
``/proc/self/clear_refs`` just before). Also per rank: its message rows sent and received per
exchange, the bytes of its part (every tensor of its part file: features, CSR, layouts) and the
bound the memory check counts (:func:`graphdist.exchange.route_plan.plan_peak_bytes`).
``--variants own`` runs the plan of now alone: the all-gathered one holds about ten int64 arrays
the size of all message rows of the job on every rank, which at products size and k = 8 does not
fit k ranks on a 24 GiB box.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import harness  # noqa: E402


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--partition", required=True)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--halo", default="plain,mvc")
    ap.add_argument("--variants", default="own,all", help="own (own lists, now), all (all gathered, before)")
    return ap


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _all_gathered(lg, halo: str, rank: int, hosts: list[int]):
    """The plan as gather_route built it before: every rank's send keys gathered onto every rank,
    then :func:`graphdist.exchange.route.build_routes` for this rank."""
    import torch

    from graphdist import comm
    from graphdist.exchange.route import build_routes, send_keys
    counts = list(lg.exchange_layout(halo).send_counts)  # (as it was: the layout computed for its counts)
    seen = comm.all_gather_rows(torch.tensor([counts], dtype=torch.int64))
    every = comm.all_gather_rows(send_keys(lg, halo)[0])
    keys = list(torch.split(every, [int(c) for c in seen.sum(1)]))
    return build_routes(keys, seen.tolist(), hosts, ranks=[rank])[0]


def _rank(rank, ws, directory, hosts, halo, variant):
    import torch

    from graphdist.exchange.route import exchange_counts, gather_route
    from graphdist.exchange.route_plan import plan_peak_bytes
    from graphdist.partition.parts import load_part
    torch.set_num_threads(1)
    from graphdist.memory import set_mmap_threshold
    set_mmap_threshold(4)  # as a train-gcn rank does (--malloc-mmap-mb 4)
    per = ws // hosts
    import torch.distributed as dist

    from graphdist import hosts as placement
    placement.set_placement(placement.Placement.host_major(ws, hosts), dist.group.WORLD)  # host-major, as on real hosts
    lg = load_part(directory, rank)
    part = sum(int(t.numel()) * t.element_size() for t in lg.to_dict().values() if isinstance(t, torch.Tensor))
    n_send, n_recv = (sum(c) for c in exchange_counts(lg, halo))
    from graphdist import comm
    comm.barrier()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident set
    before = _status("VmRSS")
    if variant == "own lists":
        route, _ = gather_route(lg, halo, True)
    else:
        route = _all_gathered(lg, halo, rank, [r // per for r in range(ws)])
    peak = _status("VmHWM") - before
    comm.barrier()
    return {"rank": rank, "halo": halo, "variant": variant, "n_send": n_send, "n_recv": n_recv, "part_bytes": part,
            "peak_bytes": peak, "bound_bytes": plan_peak_bytes(n_send, n_recv, per),
            "index_bytes": route.index_bytes(), "cross_send": route.cross_send}


def main() -> int:
    args = build_parser().parse_args()
    from graphdist.partition.artifact import read_meta
    from graphdist.testing import run_ranks
    k = int(read_meta(args.partition)["k"])
    names = {"own": "own lists", "all": "all gathered"}
    variants = [names[v] for v in args.variants.split(",")]
    rows = []
    for halo in args.halo.split(","):
        for variant in variants:
            got = run_ranks(_rank, k, args=(args.partition, args.hosts, halo, variant), timeout=3600)
            rows += got
            for r in got:
                print(json.dumps(r), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    mib = 2 ** 20
    print(f"\n{args.partition}, k = {k} on {args.hosts} hosts")
    print("| halo | rank | message rows sent / received | part | plan peak, own lists (now) | bound counted "
          "| plan peak, all gathered (before) | now / part |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for halo in args.halo.split(","):
        now = {r["rank"]: r for r in rows if r["halo"] == halo and r["variant"] == "own lists"}
        old = {r["rank"]: r for r in rows if r["halo"] == halo and r["variant"] == "all gathered"}
        for rk in sorted(now):
            a, b = now[rk], old.get(rk)
            before = f"{b['peak_bytes'] / mib:,.0f} MiB" if b else "not run"
            print(f"| {halo} | {rk} | {a['n_send']:,} / {a['n_recv']:,} | {a['part_bytes'] / mib:,.0f} MiB | "
                  f"{a['peak_bytes'] / mib:,.0f} MiB | {a['bound_bytes'] / mib:,.0f} MiB | {before} | "
                  f"{a['peak_bytes'] / a['part_bytes']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
