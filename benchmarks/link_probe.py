"""What one halo-exchange-sized gloo all-to-all gets from a capped test-bed link.

    sudo python benchmarks/link_probe.py [--gbps 0.1,1] [--mb 0.5,2,7] [--gap-ms 0,200] [--repeats 5]

Two test-bed hosts, one gloo rank each (``init_method=tcp://h0``), links capped at each rate
(tbf, each direction). Per message size and gap between exchanges: the median seconds of
``all_to_all_single`` moving that many bytes each way at once, as an effective rate
(bytes * 8 / seconds) against the cap, next to what ``--link-gbps`` assumes (bytes * 8 / cap).
``--oneway``: rank 0 sends, rank 1 sends nothing back (one direction of the link loaded).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import harness

WORKER = r"""
import json, os, statistics, sys, time
import torch, torch.distributed as dist
rank, sizes, gaps, reps = int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
oneway = sys.argv[5] == "1"
dist.init_process_group("gloo", init_method="tcp://10.77.0.1:29511", rank=rank, world_size=2)
out = []
for mb in sizes:
    n = int(mb * 1e6) // 4
    send = torch.ones(2 * n); recv = torch.empty(2 * n)
    # one way: rank 0 sends n floats to rank 1, rank 1 sends nothing back
    ins = ([n, n] if rank == 0 else [0, n]) if oneway else None
    outs = ([n, 0] if rank == 0 else [n, n]) if oneway else None
    if oneway:
        send = torch.ones(sum(ins)); recv = torch.empty(sum(outs))
    for gap in gaps:
        ts = []
        for _ in range(reps + 1):
            dist.barrier()
            time.sleep(gap / 1000)
            t0 = time.perf_counter()
            dist.all_to_all_single(recv, send, output_split_sizes=outs, input_split_sizes=ins)
            ts.append(time.perf_counter() - t0)
        out.append({"mb": mb, "gap_ms": gap, "s": statistics.median(ts[1:]), "all_s": ts})
print(json.dumps(out))
dist.destroy_process_group()
"""


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--gbps", default="0.1,1")
    ap.add_argument("--mb", default="0.5,2,7")
    ap.add_argument("--gap-ms", default="0,200")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--oneway", action="store_true", help="rank 0 sends, rank 1 only receives")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from graphdist.testbed import Testbed
    sizes, gaps = harness.csv(args.mb, float), harness.csv(args.gap_ms, float)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    rows = []
    for rate in harness.csv(args.gbps, float):
        with Testbed(2, gbps=rate) as tb:
            ps = [tb.popen(i, [sys.executable, "-c", WORKER, str(i), json.dumps(sizes), json.dumps(gaps),
                               str(args.repeats), "1" if args.oneway else "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                  for i in range(2)]
            outs = [p.communicate(timeout=900) for p in ps]
            if any(p.returncode for p in ps):
                raise SystemExit("\n".join(o[1][-2000:] for o in outs))
            for r in json.loads(outs[1 if args.oneway else 0][0]):  # one way: the receiver's clock
                # the all-to-all moves mb each way (half of the 2*n floats goes to the peer)
                nbytes = r["mb"] * 1e6
                r.update(rate_gbps=rate, oneway=args.oneway, effective_gbps=nbytes * 8 / r["s"] / 1e9,
                         sim_s=nbytes * 8 / (rate * 1e9))
                rows.append(r)
    print(harness.table(["cap Gbit/s", "MB each way", "gap ms", "measured s (median)", "`--link-gbps` s",
                         "effective Gbit/s", "measured / sim"],
                        [[f"{r['rate_gbps']:g}", f"{r['mb']:g}", f"{r['gap_ms']:g}", f"{r['s']:.3f}", f"{r['sim_s']:.3f}",
                          f"{r['effective_gbps']:.3f}", f"{r['s'] / r['sim_s']:.2f}"] for r in rows]))
    harness.write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
