"""``graphdist plan --hosts H`` against the test bed's interface counters: the halo bytes that cross
hosts per epoch, predicted vs counted, and the epoch time at a capped link.

    sudo python benchmarks/plan_hosts.py [--specs SPEC;SPEC] [--k 4] [--hosts 2] [--halos mvc,plain]
        [--partitions flat,hosts] [--epochs 2,6] [--gbps 0] [--baseline] [--json FILE]

Per spec and partition (``flat``: ``graphdist partition --parts K``; ``hosts``: the same with
``--hosts H``) and halo mode: ``graphdist train-gcn --partition DIR --nnodes H --nproc K/H`` on H
test-bed hosts (ranks host-major, as torchrun numbers them), at two epoch counts; the difference
of the hosts' summed interface tx bytes over the difference of the epochs is what crosses hosts
per epoch (start-up traffic cancels; what remains besides halo rows is TCP/IP framing, the
gradient all-reduce and the metrics). Against it ``graphdist plan --partition DIR --hosts H
--link-gbps G --json``: ``comm/inter_host_bytes_per_epoch`` and ``time/epoch_s``. The ranks of
one host exchange through loopback, which the counters do not see. With ``--baseline`` also the
same job on one host without a link (``--nproc K``), whose ``time/epoch_s`` plan then takes as
``--compute-s``. OMP_NUM_THREADS=1 per worker.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import harness

SPECS = "sbm:nodes=20000,classes=8,avg_degree=20,homophily=0.7,features=32,seed=0"


def train(tb, part: Path, args, halo: str, epochs: int, out: Path) -> dict:
    cmd = harness.graphdist_cmd(
        "train-gcn", "--partition", str(part), "--epochs", str(epochs), "--halo", halo,
        "--nnodes", str(args.hosts), "--nproc", str(args.k // args.hosts), "--rdzv-endpoint", "h0:29500",
        "--no-progress")
    r, tx = harness.on_hosts(tb, cmd, out)
    return {"tx_bytes": sum(tx), "epoch_s": r["time/epoch_s"],
            "final_loss": r["losses"][-1], "halo_bytes_per_epoch": r["comm/halo_bytes_per_epoch"]}


def baseline(part: Path, args, halo: str, out: Path) -> float:
    """``time/epoch_s`` of the same job on one host (``--nproc K``, loopback): the compute."""
    cmd = harness.graphdist_cmd("train-gcn", "--partition", str(part), "--epochs", str(max(harness.csv(args.epochs, int))),
                                "--halo", halo, "--nproc", str(args.k), "--no-progress", "--report", str(out))
    subprocess.run(cmd, check=True, env=harness.testbed_env(), capture_output=True, timeout=1800)
    return float(json.loads(out.read_text())["time/epoch_s"])


def plan(part: Path, args, halo: str, compute_s: float = 0.0) -> dict:
    cmd = harness.graphdist_cmd("plan", "--partition", str(part), "--halo", halo, "--hosts", str(args.hosts), "--json",
                                "--link-gbps", str(args.gbps or 10)) + (["--compute-s", f"{compute_s:.6g}"] if compute_s else [])
    p = subprocess.run(cmd, capture_output=True, text=True, env=harness.testbed_env(), timeout=600, check=True)
    return json.loads(p.stdout)


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--specs", default=SPECS)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--method", default="metis")
    ap.add_argument("--halos", default="mvc,plain")
    ap.add_argument("--partitions", default="flat,hosts")
    ap.add_argument("--epochs", default="2,6")
    ap.add_argument("--gbps", type=float, default=0.0, help="cap of each host's link (0 = the veth uncapped)")
    ap.add_argument("--baseline", action="store_true",
                    help="also run each job on one host without a link and give plan its epoch as --compute-s")
    ap.add_argument("--work", default="runs/plan_hosts")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from graphdist.testbed import Testbed
    e1, e2 = harness.csv(args.epochs, int)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    t0 = time.time()
    print(f"load: {os.getloadavg()}", flush=True)
    with Testbed(args.hosts, gbps=args.gbps or None) as tb:
        for si, spec in enumerate(s for s in args.specs.split(";") if s):
            for name in harness.csv(args.partitions):
                extra = ["--hosts", str(args.hosts)] if name == "hosts" else []
                part = harness.partition_once(spec, work / f"s{si}-{name}", "--parts", str(args.k), "--method",
                                              args.method, *extra, env=harness.testbed_env())
                for halo in harness.csv(args.halos):
                    runs = {e: train(tb, part, args, halo, e, work / f"s{si}-{name}-{halo}-e{e}.json") for e in (e1, e2)}
                    counted = (runs[e2]["tx_bytes"] - runs[e1]["tx_bytes"]) / (e2 - e1)
                    pl = plan(part, args, halo)
                    base = baseline(part, args, halo, work / f"s{si}-{name}-{halo}-base.json") if args.baseline else 0.0
                    measured = plan(part, args, halo, base) if base else {}
                    row = {"spec": spec, "partition": name, "halo": halo, "k": args.k, "hosts": args.hosts,
                           "gbps": args.gbps, "counted_inter_host_bytes_per_epoch": counted,
                           "plan_inter_host_bytes_per_epoch": pl["comm/inter_host_bytes_per_epoch"],
                           "plan_intra_host_bytes_per_epoch": pl["comm/intra_host_bytes_per_epoch"],
                           "halo_bytes_per_epoch_trainer": runs[e2]["halo_bytes_per_epoch"],
                           "halo_bytes_per_epoch_plan": pl["comm/halo_bytes_per_epoch"],
                           "counted_over_plan": counted / max(pl["comm/inter_host_bytes_per_epoch"], 1),
                           "real_epoch_s": runs[e2]["epoch_s"], "plan_epoch_s": pl["time/epoch_s"],
                           "plan_inter_host_s": pl["time/inter_host_s_per_epoch"],
                           "base_epoch_s": base, "plan_epoch_s_measured_compute": measured.get("time/epoch_s"),
                           "final_loss": runs[e2]["final_loss"], "tx_bytes": {e: runs[e]["tx_bytes"] for e in runs},
                           "load": harness.load()}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print(f"done in {time.time() - t0:.0f} s; load {os.getloadavg()}", flush=True)
    harness.write_json(args.json, rows)
    print("\n" + harness.table(
        ["graph", "partition", "halo", "counted B/epoch between hosts", "plan", "counted / plan", "plan within hosts",
         "real ms/epoch", "plan ms", "plan ms, --compute-s", "load"],
        [[r["spec"].split(",")[0], r["partition"], r["halo"], round(r["counted_inter_host_bytes_per_epoch"]),
          r["plan_inter_host_bytes_per_epoch"], f"{r['counted_over_plan']:.3f}", r["plan_intra_host_bytes_per_epoch"],
          round(r["real_epoch_s"] * 1e3), round(r["plan_epoch_s"] * 1e3),
          f"{(r['plan_epoch_s_measured_compute'] or float('nan')) * 1e3:.0f}", f"{r['load']:.1f}"] for r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
