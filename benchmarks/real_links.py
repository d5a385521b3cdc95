"""The exchange modes on real links (hosts as network namespaces, tbf-capped veth: graphdist.testbed)
side by side with the simulated link (``--link-gbps``) at the same rate on one host.

    sudo OMP_NUM_THREADS=1 python benchmarks/real_links.py [--spec SPEC] [--k 2] [--hosts 2] [--epochs 10]
        [--rates 0,1,0.1] [--variants mvc,plain,stale,bns0.1,auto] [--repeats 1] [--json FILE]

One partition artifact (METIS, k parts) serves every run. Per link rate (0 = the veth uncapped),
per variant and repeat, interleaved so that load hits them alike:
  real   ``graphdist train-gcn --partition DIR --nnodes H --nproc k/H`` on H test-bed hosts whose
         links are capped at the rate (each direction); the hosts' interface byte counters give
         the bytes that crossed the links;
  sim    the same job on one host (``--nproc k``) with ``--link-gbps RATE`` (no flag for 0).
Also per rate: the TCP goodput of the capped link (one stream each way at once, as a halo
exchange loads it), ``graphdist plan``'s epoch estimate per exchange mode at the link that
``--halo auto`` measured, and auto's own prediction and choice.
Needs root (the test bed); every worker runs with OMP_NUM_THREADS=1 (set it: the hosts share
the machine's cores).
"""
from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import harness

VARIANTS = {
    "plain": ["--halo", "plain"],
    "mvc": ["--halo", "mvc"],
    "mvc8": ["--halo", "mvc", "--halo-bits", "8"],
    "plain8": ["--halo", "plain", "--halo-bits", "8"],
    "stale": ["--halo", "mvc", "--halo-staleness", "1"],
    "bns0.1": ["--halo", "plain", "--boundary-rate", "0.1"],
    "auto": ["--halo", "auto"],
}

PROBE = r"""
import socket, sys, threading, time
role, peer, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
buf = bytearray(1 << 20)
def pump(sock, send):
    left = nbytes
    while left > 0:
        if send:
            left -= sock.send(memoryview(buf)[:min(len(buf), left)])
        else:
            r = sock.recv_into(buf, min(len(buf), left))
            if not r: break
            left -= r
if role == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 29499)); s.listen(1)
    c, _ = s.accept()
else:
    for _ in range(200):
        try:
            c = socket.create_connection((peer, 29499)); break
        except OSError:
            time.sleep(0.05)
c.sendall(b"g"); c.recv(1)  # both ready
t0 = time.perf_counter()
th = threading.Thread(target=pump, args=(c, True)); th.start(); pump(c, False); th.join()
print(f"{nbytes * 8 / (time.perf_counter() - t0) / 1e9:.4f}")
"""


def probe(tb, rate: float) -> float:
    """Goodput in Gbit/s of one TCP stream each way at once between host 0 and host 1."""
    nbytes = int(max(rate, 0.1) * 1e9 / 8 * 1.5) if rate else 300_000_000
    a = tb.popen(1, [sys.executable, "-c", PROBE, "server", "h0", str(nbytes)], stdout=subprocess.PIPE, text=True)
    b = tb.popen(0, [sys.executable, "-c", PROBE, "client", "h1", str(nbytes)], stdout=subprocess.PIPE, text=True)
    out = [float(p.communicate(timeout=300)[0].strip() or "nan") for p in (a, b)]
    return min(out)


def real_run(tb, args, var: str, out: Path) -> dict:
    nproc = args.k // args.hosts
    cmd = harness.graphdist_cmd("train-gcn", args.spec, "--partition", str(args.part), "--epochs", str(args.epochs),
                                *VARIANTS[var], "--nnodes", str(args.hosts), "--nproc", str(nproc),
                                "--rdzv-endpoint", "h0:29500")
    t0 = time.perf_counter()
    r, sent = harness.on_hosts(tb, cmd, out)
    return {"report": r, "wall_s": time.perf_counter() - t0, "link_tx_bytes": sent}


def sim_run(args, var: str, rate: float, out: Path) -> dict:
    cmd = harness.graphdist_cmd("train-gcn", args.spec, "--partition", str(args.part), "--epochs", str(args.epochs),
                                *VARIANTS[var], "--nproc", str(args.k), "--report", str(out)) + (
        ["--link-gbps", str(rate)] if rate else [])
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=harness.testbed_env(), timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"sim run {var} failed ({p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    return {"report": json.loads(out.read_text()), "wall_s": time.perf_counter() - t0}


def plan(args, var: str, gbps: float, latency_us: float, compute_s: float = 0.0) -> float:
    """``graphdist plan ... --json``'s ``time/epoch_s`` (run in this process: one start-up)."""
    import contextlib
    import io

    from graphdist.cli import main as gd
    argv = ["plan", "--partition", str(args.part), *VARIANTS[var], "--json"]
    if gbps:
        argv += ["--link-gbps", f"{gbps:.6g}", "--link-latency-us", f"{latency_us:.6g}"]
    if compute_s:
        argv += ["--compute-s", f"{compute_s:.6g}"]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = gd(argv)
    return float(json.loads(buf.getvalue())["time/epoch_s"]) if rc == 0 else float("nan")


def plan_rows(args, real: list[dict], base: dict | None = None) -> list[dict]:
    """``graphdist plan``'s estimate for each variant of ``real`` (the real rows of one rate), at
    the link auto measured on it (when auto ran), the cap and the TCP goodput; with ``base``
    (``{variant: epoch s on one host without a link}``) also with that as ``--compute-s``."""
    if not real:
        return []
    rate, goodput = real[0]["rate_gbps"], real[0]["goodput_gbps"]
    links = [("none (compute)", 1e6, 0.0), ("cap", rate, 0.0), ("goodput", goodput if rate else 0.0, 0.0)]
    auto_rows = [r for r in real if r["variant"] == "auto" and r.get("auto_real")]
    if auto_rows:
        links.insert(0, ("auto-measured", *auto_link(auto_rows[0]["auto_real"])))
    out = []
    for var in dict.fromkeys(r["variant"] for r in real):
        for name, gbps, lat in links:  # plan's own compute estimate at the cap; the measured one at every link
            comps = ([0.0] if name in ("cap", "none (compute)") else []) + ([base[var]] if base and var in base else [])
            for comp in comps if name != "none (compute)" else [0.0]:
                out.append({"rate_gbps": rate, "variant": var, "plan_link": name, "plan_gbps": gbps,
                            "plan_latency_us": lat, "plan_compute_s": comp, "plan_epoch_s": plan(args, var, gbps, lat, comp),
                            "load": harness.load()})
                print(json.dumps(out[-1]), flush=True)
    return out


def auto_link(a: dict) -> tuple[float, float]:
    """(Gbit/s, latency us) of the link ``--halo auto`` measured at start-up."""
    return float(a.get("link_bytes_per_s") or 0) * 8 / 1e9, float(a.get("link_latency_s") or 0) * 1e6


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--spec", default="sbm:nodes=50000,classes=8,avg_degree=20,homophily=0.7,features=128,seed=0")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--rates", default="0,1,0.1")
    ap.add_argument("--variants", default="mvc,plain,stale,bns0.1,auto")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--work", default="runs/real_links")
    ap.add_argument("--sim-only", action="store_true",
                    help="only the one-host --link-gbps runs (e.g. to rerun them after a change to the link model)")
    ap.add_argument("--no-sim", action="store_true",
                    help="real links only (no --link-gbps runs); with --baseline, one run per variant on one host "
                         "without a link (the compute alone)")
    ap.add_argument("--baseline", action="store_true",
                    help="also run every variant once on one host with no link (--nproc k): the epoch's compute")
    ap.add_argument("--plan-only", default=None, metavar="ROWS_JSON",
                    help="no training: add plan's estimates for every real row of ROWS_JSON (a --json of this "
                         "script), at the TCP goodput and at the link auto measured, and write --json")
    return ap


def baselines(rows: list[dict]) -> dict:
    """Per variant the median of its baseline runs' epoch seconds (the compute plan is given)."""
    runs: dict = {}
    for r in rows:
        if "base_epoch_s" in r:
            runs.setdefault(r["variant"], []).append(r["base_epoch_s"])
    return {v: statistics.median(ts) for v, ts in runs.items()}


def plan_vs_real(rows: list[dict]) -> str:
    """A table, per link and variant: the real epochs (ms), plan's epoch with the measured
    compute, and plan over the mean of the real epochs."""
    out = []
    for r in rows:
        if r.get("plan_link") == "cap" and r.get("plan_compute_s"):
            real = [x["real_epoch_s"] for x in rows if x.get("rate_gbps") == r["rate_gbps"]
                    and x.get("variant") == r["variant"] and "real_epoch_s" in x]
            if real:
                out.append([r["rate_gbps"] or "veth", r["variant"], " / ".join(f"{x * 1e3:.1f}" for x in real),
                            f"{r['plan_epoch_s'] * 1e3:.1f}", f"{r['plan_epoch_s'] / statistics.mean(real):.2f}"])
    return harness.table(["link", "variant", "real ms/epoch", "plan ms/epoch (measured compute)", "plan / real"], out)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from graphdist.testbed import Testbed
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    args.part = harness.partition_once(args.spec, work / f"part-k{args.k}", "--parts", str(args.k), "--method", "metis",
                                       env=harness.testbed_env())
    rates = harness.csv(args.rates, float)
    variants = harness.csv(args.variants)
    t_start = time.time()
    rows = []
    if args.plan_only:
        rows = [r for r in json.loads(Path(args.plan_only).read_text()) if "plan_epoch_s" not in r]
        base = baselines(rows)
        for rate in dict.fromkeys(r["rate_gbps"] for r in rows if "real_epoch_s" in r):
            rows += plan_rows(args, [r for r in rows if r.get("rate_gbps") == rate and "real_epoch_s" in r], base)
        harness.write_json(args.json, rows)
        print(plan_vs_real(rows))
        return 0
    print(f"load: {os.getloadavg()}", flush=True)
    if args.sim_only:
        for rep in range(args.repeats):
            for rate in rates:
                for var in variants:
                    sim = sim_run(args, var, rate, work / f"simonly-{rate}-{var}-{rep}.json")
                    sr = sim["report"]
                    rows.append({"rate_gbps": rate, "variant": var, "repeat": rep, "sim_epoch_s": sr["time/epoch_s"],
                                 "sim_wait_s": sr.get("time/link_wait_s_per_epoch"), "load": harness.load(),
                                 "sim_mode": sr.get("comm/halo"), "sim_final_loss": sr["losses"][-1]})
                    print(json.dumps(rows[-1]), flush=True)
        harness.write_json(args.json, rows)
        return 0
    if args.baseline:  # the compute alone: every variant on one host, no link (the median of --repeats runs)
        for rep, var in itertools.product(range(args.repeats), variants):
            sim = sim_run(args, var, 0.0, work / f"base-{var}-{rep}.json")
            sr = sim["report"]
            rows.append({"rate_gbps": None, "variant": var, "repeat": rep, "base_epoch_s": sr["time/epoch_s"],
                         "load": harness.load(),
                         "base_final_loss": sr["losses"][-1], "base_mode": sr.get("comm/halo"),
                         "base_bits": sr.get("comm/halo_bits")})
            print(json.dumps(rows[-1]), flush=True)
    for rate in rates:
        with Testbed(args.hosts, gbps=rate or None) as tb:
            goodput = probe(tb, rate)
            print(f"--- rate {rate or 'uncapped'} Gbit/s: TCP goodput {goodput:.3f} Gbit/s each way at once", flush=True)
            for rep in range(args.repeats):
                for var in variants:
                    real = real_run(tb, args, var, work / f"real-{rate}-{var}-{rep}.json")
                    rr = real["report"]
                    row = {"rate_gbps": rate, "variant": var, "repeat": rep, "goodput_gbps": goodput,
                           "real_epoch_s": rr["time/epoch_s"],
                           "halo_bytes_per_epoch": rr.get("comm/halo_bytes_per_epoch"),
                           "link_tx_bytes": real["link_tx_bytes"], "real_wall_s": real["wall_s"],
                           "load": harness.load(), "real_final_loss": rr["losses"][-1],
                           "real_mode": rr.get("comm/halo"), "real_bits": rr.get("comm/halo_bits")}
                    if not args.no_sim:
                        sim = sim_run(args, var, rate, work / f"sim-{rate}-{var}-{rep}.json")
                        sr = sim["report"]
                        row.update({"sim_epoch_s": sr["time/epoch_s"], "sim_wait_s": sr.get("time/link_wait_s_per_epoch"),
                                    "sim_wall_s": sim["wall_s"], "sim_final_loss": sr["losses"][-1],
                                    "auto_sim_mode": sr.get("comm/halo"),
                                    "auto_sim": {k: (sr.get("comm/halo_auto") or {}).get(k)
                                                 for k in ("link", "link_bytes_per_s", "link_latency_s", "modes", "bits")}})
                    if var == "auto":
                        a = rr.get("comm/halo_auto") or {}
                        row["auto_real"] = {k: a.get(k) for k in ("link", "link_bytes_per_s", "link_latency_s", "chosen",
                                                                  "modes", "bits") if k in a}
                        row["auto_real_mode"] = rr.get("comm/halo")
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k not in ("auto_real", "auto_sim")}), flush=True)
            base = baselines(rows)
            rows += plan_rows(args, [r for r in rows if r.get("rate_gbps") == rate and "real_epoch_s" in r], base)
    print(f"done in {time.time() - t_start:.0f} s; load {os.getloadavg()}", flush=True)
    harness.write_json(args.json, rows)
    print("\n" + harness.table(
        ["link", "variant", "real ms/epoch", "`--link-gbps` ms/epoch (wait)", "sim / real"],
        [[r["rate_gbps"] or "veth", r["variant"], f"{r['real_epoch_s'] * 1e3:.1f}",
          f"{r['sim_epoch_s'] * 1e3:.1f} ({(r['sim_wait_s'] or 0) * 1e3:.1f})", f"{r['sim_epoch_s'] / r['real_epoch_s']:.2f}"]
         for r in rows if "real_epoch_s" in r and "sim_epoch_s" in r]))
    print("\n" + harness.table(
        ["link", "variant", "plan at (Gbit/s, us)", "plan ms/epoch"],
        [[r["rate_gbps"] or "veth", r["variant"], f"{r['plan_link']} ({r['plan_gbps']:.3f}, {r['plan_latency_us']:.0f})",
          f"{r['plan_epoch_s'] * 1e3:.1f}"] for r in rows if "plan_epoch_s" in r]))
    print("\n" + plan_vs_real(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
