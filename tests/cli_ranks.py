"""``graphdist`` commands on ranks forked as torchrun's workers, for tests (no launcher process,
no fresh imports: :func:`graphdist.testing.run_ranks`)::

    [(code, printed), ...] = run_cli([["train-gcn", SPEC, "--nproc", "2", ...], [...]], world_size=2)

(here, not in graphdist.testing: the core imports no workload room, and the CLI imports them all)."""
from __future__ import annotations

import os
import shutil
import tempfile

from graphdist.testing import run_ranks


def _cli_runs(rank, world_size, argvs, root):
    """Each ``argv`` through :func:`graphdist.cli.main` on this rank, as under torchrun; a run
    destroys the process group at its end, so the next one joins a fresh group from its own file
    store. What the run printed (file descriptors 1 and 2, so C++ and child writes too) is kept."""
    import sys

    import torch.distributed as dist

    from graphdist.cli import main
    out = []
    for i, argv in enumerate(argvs):
        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method=f"file://{root}/store{i}", rank=rank, world_size=world_size)
        log = os.path.join(root, f"out{i}-rank{rank}")
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        with open(log, "w") as f:
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
        try:
            code = main(list(argv))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        with open(log) as f:
            out.append((code, f.read()))
    return out


def run_cli(argvs: list[list[str]], world_size: int, *, timeout: float = 240.0) -> list[tuple[int, str]]:
    """``graphdist ARGV`` for each of ``argvs`` in turn, on ``world_size`` ranks forked by
    :func:`run_ranks` (as torchrun's workers: ``--nproc`` is then the group's size; no launcher,
    no fresh imports); returns rank 0's (exit code, what it printed) per run."""
    root = tempfile.mkdtemp(prefix="graphdist-cli-")
    try:
        return run_ranks(_cli_runs, world_size, ([list(a) for a in argvs], root), timeout=timeout)[0]
    finally:
        shutil.rmtree(root, ignore_errors=True)
