"""What a process pays to exit after importing torch, and what graphdist's exit saves.

    python benchmarks/exit_teardown.py --rounds 5
    python benchmarks/exit_teardown.py --rounds 3 --before /tmp/before   # also whole jobs, two checkouts

The interpreter's teardown walks every object alive for the cyclic garbage collector; torch and
torchrec make millions at import. Every process that ran a job leaves through
``graphdist.launch.leave``, which first puts them out of the collector's reach
(``graphdist.proc.skip_final_collection``, ``gc.freeze``). Part one times, alternated, a fresh
interpreter that imports torch (and one that imports torchrec) and exits as any Python program
does, against the same import then ``skip_final_collection()``: wall seconds and CPU seconds
(user + system of the child), medians over ``--rounds``.

With ``--before CHECKOUT`` (a checkout of an earlier commit, e.g. ``git worktree add /tmp/before
HEAD~1``), part two times whole jobs as a user starts them, ``python -m graphdist train-dlrm
criteo-synth: --nproc 2 --steps 100`` and ``train-gcn sbm:nodes=2000,... --parts 2 --epochs 5``,
each with that checkout's graphdist and with this one's, alternated: the command and its workers
together.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import harness

IMPORTS = {"torch": "import torch", "torchrec": "import torchrec"}
WARMUP = 1  # untimed rounds first (harness.alternate), dropped from the CPU lists too
JOBS = {"train-dlrm k=2": ["train-dlrm", "criteo-synth:", "--nproc", "2", "--steps", "100", "--no-progress"],
        "train-gcn k=2": ["train-gcn", "sbm:nodes=2000,classes=4,avg_degree=8,features=8,seed=1", "--parts", "2",
                          "--epochs", "5", "--no-progress"]}


def build_parser():
    p = harness.parser(__doc__)
    p.add_argument("--rounds", type=int, default=5, help="alternated rounds per comparison (default 5)")
    p.add_argument("--before", type=Path, default=None, metavar="CHECKOUT",
                   help="also time whole jobs with this checkout's graphdist against this one's")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    env = harness.checkout_env(OMP_NUM_THREADS="1")
    rows, out = [], {"imports": {}, "jobs": {}}
    with tempfile.TemporaryDirectory(prefix="exit-teardown-") as cwd:
        for name, stmt in IMPORTS.items():
            frozen = f"{stmt}\nfrom graphdist.proc import skip_final_collection\nskip_final_collection()"
            got = harness.alternate_processes({"exits as any program": (["-c", stmt], env),
                                               "skip_final_collection": (["-c", frozen], env)},
                                              args.rounds, cwd, warmup=WARMUP)
            out["imports"][name] = got
            rows += [[f"python -c '{stmt}'", side, v["wall_s"], v["cpu_s"]] for side, v in got.items()]
        if args.before is not None:
            old = harness.checkout_env(args.before.resolve(), OMP_NUM_THREADS="1")
            for name, job in JOBS.items():
                got = harness.alternate_processes({f"before ({args.before})": (["-m", "graphdist", *job], old),
                                                   "this checkout": (["-m", "graphdist", *job], env)},
                                                  args.rounds, cwd, warmup=WARMUP)
                out["jobs"][name] = got
                rows += [[name, side, v["wall_s"], v["cpu_s"]] for side, v in got.items()]
    print(harness.table(["process", "exit", "wall s (median)", "CPU s (median)"], rows, fmt=lambda v: f"{v:.2f}"))
    harness.write_json(args.json, {"rounds": args.rounds, **out})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
