"""Start local workers through torch's own launcher, and run a job's body with one error policy.

``launch(nproc, fn, cfg)`` starts ``nproc`` workers with ``torch.distributed.run``'s elastic agent
(the machinery behind ``torchrun``); each runs ``python -m graphdist.worker`` and calls
``fn(cfg)``. The config travels as JSON (:mod:`graphdist.config`), never as a rebuilt command
line. Workers read RANK/WORLD_SIZE/MASTER_ADDR from the environment exactly as under an external
``torchrun``, so multi-node runs use the same commands with no flag changes::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m graphdist train-gcn --partition parts/ --epochs 200

If a worker dies the agent stops the others and :func:`launch` names the failed rank.
"""
from __future__ import annotations

import logging
import os
import sys
import uuid

from graphdist import config as config_mod
from graphdist.errors import USER_ERRORS, DistributedError
from graphdist.runtime import env_world, free_port

__all__ = ["under_launcher", "launch", "run_job", "guarded", "print_error"]


def under_launcher() -> bool:
    """True inside a worker started by torchrun / ``--nproc`` (the env names this rank)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _path(obj) -> str:
    return f"{obj.__module__}:{obj.__qualname__}"


def launch(nproc: int, fn, cfg, *, monitor_interval: float = 0.2) -> int:
    """Run ``fn(cfg)`` on ``nproc`` local workers; return an exit code.

    Exit 2 when a worker reported a user error (it printed its own one-line message);
    otherwise a failed worker raises :class:`DistributedError` naming its rank and exit code.
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    lc = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"graphdist-{uuid.uuid4().hex[:8]}",
                      rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", max_restarts=0,
                      monitor_interval=monitor_interval, start_method="spawn")
    # the agent's own error log repeats what the workers and this function already say
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    env_before = os.environ.get("OMP_NUM_THREADS")
    if env_before is None:  # one thread per worker unless the user says otherwise (torchrun's default)
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    try:
        elastic_launch(lc, sys.executable)("-m", "graphdist.worker", _path(fn), _path(type(cfg)),
                                           config_mod.to_json(cfg))
    except ChildFailedError as e:
        codes = {int(r): f.exitcode for r, f in e.failures.items()}
        if any(c == 2 for c in codes.values()):
            return 2
        # the first worker to fail is the cause; the agent SIGTERMs (-15) the rest afterwards
        first = sorted(e.failures.items(), key=lambda kv: (kv[1].exitcode == -15, kv[1].timestamp, int(kv[0])))
        r = int(first[0][0])
        raise DistributedError(f"worker rank {r} failed with exit code {codes[r]}; "
                               f"the launcher stopped the other {nproc - 1} worker(s)") from None
    finally:
        if env_before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
    return 0


def run_job(fn, cfg, nproc: int) -> int:
    """``fn(cfg)`` here (one process, or already a worker of a launcher) or on ``nproc`` local
    workers; returns the exit code."""
    if nproc > 1 and not under_launcher():
        return launch(nproc, fn, cfg)
    return int(fn(cfg) or 0)


def print_error(e: BaseException) -> None:
    """One line on stderr. A user error that every rank hits alike is printed by rank 0 only;
    a distributed failure is printed by every rank that sees it (each names what it saw)."""
    rank, world, _ = env_world()
    if rank == 0 or world == 1 or isinstance(e, DistributedError):
        sys.stderr.write(f"graphdist: error: {e}\n")
        sys.stderr.flush()


def guarded(fn, *args) -> int:
    """``fn(*args)`` with the CLI's error policy: a user error (``USER_ERRORS``) becomes one line
    (:func:`print_error`) and exit code 2; Ctrl-C exits 130."""
    try:
        return int(fn(*args) or 0)
    except USER_ERRORS as e:
        print_error(e)
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("graphdist: interrupted\n")
        return 130
