"""The CPU a command's processes spend on other things than the job: building the CLI's parser
and the DLRM evaluation's metrics, this checkout against an earlier one.

    git worktree add /tmp/before f7b4ec2
    python benchmarks/command_cpu.py --rounds 3 --before /tmp/before

Each row runs, alternated with the other checkout, a fresh interpreter and its children to the
end; the figures are medians over ``--rounds`` (after one untimed round) of the wall time and
the CPU (user + system) of the processes:

- ``graphdist train-gcn --help``: importing torch, then building every command's parser (each
  config module's source read for the flags' help, each class's annotations resolved);
- the DLRM evaluation's metrics (``embeddings.metrics.click_metrics``) of 100,000 scored
  samples, imports included (torchmetrics and torchrec's metrics, and the plotting library
  torchmetrics loads, before);
- whole jobs as a user starts them (``benchmarks/exit_teardown.py``'s two: ``train-dlrm
  criteo-synth: --nproc 2 --steps 100``, ``train-gcn sbm:... --parts 2 --epochs 5``).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import harness
from exit_teardown import JOBS

METRICS = ("import numpy as np\nfrom embeddings.metrics import click_metrics\n"
           "rng = np.random.default_rng(0)\ny = rng.integers(0, 2, 100_000).astype(np.float64)\n"
           "print(click_metrics(y, rng.normal(size=y.size) + y))")
PROBES = {"graphdist train-gcn --help": ["-m", "graphdist", "train-gcn", "--help"],
          "click_metrics, 100k samples": ["-c", METRICS]}


def build_parser():
    p = harness.parser(__doc__)
    p.add_argument("--rounds", type=int, default=3, help="alternated rounds per comparison (default 3)")
    p.add_argument("--before", type=Path, required=True, metavar="CHECKOUT",
                   help="the earlier checkout (git worktree add /tmp/before REV)")
    p.add_argument("--no-jobs", action="store_true", help="leave out the whole jobs (about 2 minutes)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    env = harness.checkout_env(OMP_NUM_THREADS="1")
    old = harness.checkout_env(args.before.resolve(), OMP_NUM_THREADS="1")
    cases = dict(PROBES)
    if not args.no_jobs:
        cases.update({name: ["-m", "graphdist", *job] for name, job in JOBS.items()})
    rows, out = [], {}
    with tempfile.TemporaryDirectory(prefix="command-cpu-") as cwd:
        for name, argv_ in cases.items():
            got = harness.alternate_processes({"before": (argv_, old), "this checkout": (argv_, env)},
                                              args.rounds, cwd)
            out[name] = got
            b, a = got["before"], got["this checkout"]
            rows.append([name, b["wall_s"], a["wall_s"], b["cpu_s"], a["cpu_s"], round(a["cpu_s"] / b["cpu_s"], 2)])
    print(harness.table(["process", "wall s before", "wall s now", "CPU s before", "CPU s now", "CPU ratio"], rows,
                        fmt=lambda v: f"{v:.2f}"))
    harness.write_json(args.json, {"rounds": args.rounds, "before": str(args.before), "cases": out})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
