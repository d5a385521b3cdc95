"""``--nproc N``: start N local workers through torch's own launcher (``torch.distributed.run``'s
elastic agent), each running ``python -m graphdist <command> <args without --nproc>``.

The workers read RANK/WORLD_SIZE/MASTER_ADDR from the environment exactly as under an external
``torchrun``, so multi-node runs use the same module with no flag changes::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m graphdist train-gcn --partition parts/ --epochs 200

If a worker dies the agent stops the others and this function names the failed rank.
"""
from __future__ import annotations

import os
import sys
import uuid

from graphdist.errors import DistributedError
from graphdist.runtime import free_port


def under_launcher() -> bool:
    """True inside a worker started by torchrun / ``--nproc`` (the env names this rank)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def launch(nproc: int, argv: list[str], *, monitor_interval: float = 0.2) -> int:
    """Run ``python -m graphdist *argv`` on ``nproc`` local workers; return an exit code.

    Exit 2 when a worker reported a user error (it printed its own one-line message);
    otherwise a failed worker raises :class:`DistributedError` naming its rank and exit code.
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    cfg = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"graphdist-{uuid.uuid4().hex[:8]}",
                       rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{free_port()}", max_restarts=0,
                       monitor_interval=monitor_interval, start_method="spawn")
    import logging
    # the agent's own error log repeats what the workers and this function already say
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    env_before = os.environ.get("OMP_NUM_THREADS")
    if env_before is None:  # one thread per worker unless the user says otherwise (torchrun's default)
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc))
    try:
        elastic_launch(cfg, sys.executable)("-m", "graphdist", *argv)
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
