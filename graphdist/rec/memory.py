"""Will a ``train-rec`` rank fit? An estimate of its peak resident memory from its part, checked on
every rank after loading and before the first step, so a graph that does not fit stops with one
line naming the memory it needs instead of being killed half-way.

Per rank (``n`` own rows, ``h`` halo rows, ``D`` dim, ``L`` layers, ``m`` own triples per batch,
``s`` own triples scheduled per epoch, ``I_own`` own items)::

    need = PROCESS_BYTES + part file                                   the process, the part
           + 4 D (TABLE_COPIES n + 2 (L + 1) (n + h))                      rows, Adam, layers
           + PER_TRIPLE_DIM * m * D + PER_SAMPLE * s                       batch, epoch schedule
           + 4 D * (I_own + max shard) + 16 * users * K                    evaluation

The coefficients are rounded up from the measured runs in BENCHMARKS.md ("Graph recommender at
scale"); ``PROCESS_BYTES`` is the process footprint every memory check adds
(:data:`graphdist.memory.PROCESS_BYTES`, measured); the local ranks of a node share its memory.
"""
from __future__ import annotations

import torch

from graphdist import comm
from graphdist.errors import ConfigError
from graphdist.memory import PROCESS_BYTES

__all__ = ["estimate_rank_bytes", "check_rank_fits", "exchange_rounds", "ROUND_BYTES", "MAX_ROUNDS"]

GiB = 2 ** 30
TABLE_COPIES = 5
"""Rows, gradient, two Adam moments, the layer-mean."""
PER_TRIPLE_DIM = 120
"""Bytes per own triple and dimension in a step: [E | E0] rows of user, positive and negative,
their gradients, the batch table and the received rows (float32)."""
PER_SAMPLE = 260
"""Bytes per own scheduled triple: the epoch's samples, requests and schedule arrays (int64) at their peak."""


ROUND_BYTES = 16 * 2 ** 20
"""``--halo-rounds 0``: the most bytes of float32 rows one round of one layer's exchange may send
and receive on a rank."""
MAX_ROUNDS = 8
"""``--halo-rounds 0`` takes at most this many: every round's halo block keeps a row pointer over
all own rows, so past about 8 rounds the blocks cost more than the buffers save (BENCHMARKS.md,
"Graph recommender at scale")."""


def exchange_rounds(cfg, n_send: int, n_recv: int) -> int:
    """The exchange rounds to train in: ``cfg.halo_rounds`` as given, or (0) the fewest that keep
    every rank's send and receive rows of one round under :data:`ROUND_BYTES` (``n_send`` /
    ``n_recv``: this rank's message rows of one exchange), at most :data:`MAX_ROUNDS`. Collective
    (one all-reduce) for 0, so that every rank takes the same number."""
    if cfg.halo_rounds:
        return int(cfg.halo_rounds)
    need = -(-(int(n_send) + int(n_recv)) * 4 * int(cfg.dim) // ROUND_BYTES)
    r = comm.all_reduce_max(torch.tensor([float(need)]))
    return int(min(MAX_ROUNDS, max(1.0, float(r[0]))))


def estimate_rank_bytes(lg, rd, cfg, n_eval_users: int) -> int:
    """Estimated peak resident bytes of this rank (see the module docstring)."""
    D, L = int(cfg.dim), int(cfg.layers)
    n, h = int(lg.num_owned), int(lg.num_halo)
    idx = rd.index
    share = idx.users.size / max(idx.num_users, 1)
    nb = idx.num_batches(cfg.batch_size)
    m = cfg.batch_size * share
    s = idx.rate * idx.users.size
    if cfg.steps is not None:
        s = min(s, cfg.steps * m)
    s = min(s, nb * m)
    items_own = int(rd.item_rows().size)
    shard = items_own  # (the ring's item shard in flight taken as large as this rank's own)
    need = (PROCESS_BYTES + lg.nbytes() + 4 * D * (TABLE_COPIES * n + 2 * (L + 1) * (n + h)) + PER_TRIPLE_DIM * m * D
            + PER_SAMPLE * s + 4 * D * (items_own + shard) + 16 * n_eval_users * cfg.topk)
    return int(need)


def check_rank_fits(lg, rd, cfg, n_eval_users: int) -> int:
    """Collective: every rank's estimate, summed over the ranks of its machine, against the memory
    available there, and each rank's against its own process limit (``ulimit -d`` / ``-v``); one
    line naming the memory needed on every rank when it does not fit."""
    from graphdist.hosts import placement
    from graphdist.memory import available_bytes, process_ceiling
    need = estimate_rank_bytes(lg, rd, cfg, n_eval_users)
    have, ceiling = available_bytes(), process_ceiling()
    local = comm.all_gather_json((need, have, ceiling))
    where, me = placement(), comm.world()[0]
    machine = where.machine_of_host[where.host_of_rank[me]]  # its ranks share its memory
    node = [x for r, x in enumerate(local) if where.machine_of_host[where.host_of_rank[r]] == machine]
    total, avail = sum(x[0] for x in node), max(x[1] for x in node)
    worst = max(x[0] for x in local)
    fix = "use more parts (graphdist partition ... --parts K), a smaller --batch-size or a --steps cap"
    if total > avail:
        raise ConfigError(f"train-rec needs about {worst / GiB:.2f} GiB per rank ({total / GiB:.2f} GiB for the "
                          f"{len(node)} rank(s) on this machine) but {avail / GiB:.2f} GiB is available; {fix}")
    capped = [x for x in local if x[2] is not None and x[0] > x[2]]
    if capped:
        x = max(capped, key=lambda x: x[0] - x[2])
        raise ConfigError(f"train-rec needs about {x[0] / GiB:.2f} GiB per rank but a rank may hold only "
                          f"{x[2] / GiB:.2f} GiB (its process memory limit, ulimit -d / -v); {fix}")
    return need

