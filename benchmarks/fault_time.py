"""Time lost per fault, on the test bed (root): a 2-host train-gcn run with --max-restarts 1
--resume auto whose second host's worker is killed after the first checkpoint ("killed"), and one
with --nnodes 1:2 whose second host is lost for good, launcher and worker ("lost": the job goes
on at k = 1 on the first host), against the same run unbroken, one after the other.

    python benchmarks/fault_time.py [--nodes 20000] [--epochs 200] [--every 20] [--last-call 30] [--json out.json]

Reports: the unbroken and the faulted run's wall time, the seconds from the kill to the restart's
log line (detection and the new group's rendezvous), to the "resumed" line (reload), the epochs
replayed (reached at the kill minus the checkpoint's), and whether the final losses match.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import harness


def _run(tb, argv, kill_after: Path | None, whole_node: bool = False):
    env = harness.checkout_env()
    env.pop("OMP_NUM_THREADS", None)
    events, last_epoch = {}, [0]
    procs = [tb.popen(i, argv[i], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env) for i in range(2)]

    def watch(stream):
        buf = b""
        while True:
            ch = stream.read(1)
            if not ch:
                return
            buf += ch
            if ch not in (b"\r", b"\n"):
                continue
            line = buf.decode(errors="replace")
            buf = b""
            m = re.search(r"\| (\d+)/\d+ \[", line)
            if m:
                last_epoch[0] = int(m.group(1))
            for key, pat in (("error", "graphdist: error: "), ("restart", "restart 1 of the worker group"),
                             ("resumed", "resumed from epoch")):
                if pat in line and key not in events:
                    events[key] = time.monotonic()
                    if key == "resumed":
                        events["resumed_epoch"] = int(re.search(r"resumed from epoch (\d+)", line).group(1))
    t = threading.Thread(target=watch, args=(procs[0].stderr,), daemon=True)
    t.start()
    t0 = time.monotonic()
    if kill_after is not None:
        while not kill_after.exists():
            time.sleep(0.05)
        kids = subprocess.run(["pgrep", "-P", str(procs[1].pid)], capture_output=True, text=True).stdout.split()
        events["kill"] = time.monotonic()
        events["kill_epoch"] = last_epoch[0]
        for pid in [procs[1].pid, *map(int, kids)] if whole_node else [int(kids[0])]:
            os.kill(pid, signal.SIGKILL)
    codes = [p.wait() for p in procs]  # (a lost host's launcher: -9)
    wall = time.monotonic() - t0
    t.join(5)
    return codes, wall, events


def build_parser():
    ap = harness.parser(__doc__)
    ap.add_argument("--nodes", type=int, default=20000)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--every", type=int, default=20, help="--checkpoint-every")
    ap.add_argument("--last-call", type=int, default=30, help="--rdzv-last-call of the lost-host run")
    return ap


def main(argv=None) -> None:
    a = build_parser().parse_args(argv)
    from graphdist.testbed import Testbed
    with tempfile.TemporaryDirectory() as d, Testbed(2) as tb:
        base = harness.graphdist_cmd("train-gcn", f"sbm:nodes={a.nodes}", "--parts", "2",
                                     "--epochs", str(a.epochs), "--checkpoint-every", str(a.every), "--nnodes", "2",
                                     "--nproc", "1", "--rdzv-endpoint", "h0:29500", "--resume", "auto")
        runs = {}
        cases = (("unbroken", [], False), ("killed", ["--max-restarts", "1"], True),
                 ("lost", ["--max-restarts", "1", "--nnodes", "1:2", "--rdzv-last-call", str(a.last_call)], True))
        for name, extra, kill in cases:
            ck = Path(d) / name
            argv = [[*base, *extra, "--checkpoint-dir", str(ck), "--report", f"{d}/{name}{i}.json"] for i in range(2)]
            codes, wall, ev = _run(tb, argv, ck / "latest" if kill else None, whole_node=name == "lost")
            rep = json.loads(Path(f"{d}/{name}0.json").read_text())
            runs[name] = {"exit_codes": codes, "wall_s": round(wall, 2), "final_loss": rep["losses"][-1],
                          "restarts": rep["run/restarts"], "time/epoch_s": rep["time/epoch_s"],
                          "world_size_at_end": rep["world_size"]}
            if kill:
                since = lambda k: round(ev[k] - ev["kill"], 2) if k in ev else None  # noqa: E731
                runs[name].update({
                    "kill_to_error_s": since("error"), "kill_to_restart_log_s": since("restart"),
                    "kill_to_resumed_s": since("resumed"), "time_lost_s": round(wall - runs["unbroken"]["wall_s"], 2),
                    "epoch_at_kill": ev.get("kill_epoch"), "resumed_from_epoch": ev.get("resumed_epoch"),
                    "epochs_replayed": (ev["kill_epoch"] - ev["resumed_epoch"]) if "resumed_epoch" in ev else None,
                    "final_loss_rel_diff": abs(rep["losses"][-1] - runs["unbroken"]["final_loss"])
                    / abs(runs["unbroken"]["final_loss"])})
    print(json.dumps(runs, indent=1))
    harness.write_json(a.json, runs)


if __name__ == "__main__":
    main()
