"""Will a ``graphdist infer`` rank fit? Its peak resident bytes, from the pieces ``train-gcn``'s
check uses (:mod:`graphdist.gnn.plan_memory`, :mod:`graphdist.gnn.stats`) with the training taken
out: no gradients, no optimizer state, no saved activations. Checked on every rank once its part
is loaded and before the model is built, against the memory its machine can still give (the
ranks of a machine share it, :func:`graphdist.hosts.placement`) and its own process limit
(``ulimit -d`` / ``-v``), as :func:`graphdist.gnn.decide.decide` checks a training run::

    need = PROCESS_BYTES + part arrays (ids, labels, masks, plans)     the process, the part
           + max(forward, write)
    forward = features + normalised adjacency + weights                what the pass reads
              + evaluation pass (replayed: a layer's input, product and output, the halo
                rows sent and received) + the copy of the chosen layer's output
    write   = logits + embedding + predictions (the model is let go by then)
              + WRITER_BYTES + one row group of them as Parquet encodes it

Only graphdist's own ``gcn`` / ``sage`` are modelled (a user's ``--model`` is not, as in
``train-gcn``); GPU memory is not checked.
"""
from __future__ import annotations

from graphdist.gnn.plan_memory import RUNTIME_BYTES, activation_peak, adjacency_bytes
from graphdist.gnn.stats import PartStats, layer_plan

__all__ = ["infer_memory", "check_infer_fits", "WRITER_BYTES"]

GiB = 2 ** 30
WRITER_BYTES = 96 * 2 ** 20
"""pyarrow and its Parquet writer, loaded at the first write (libraries, mimalloc's pool): a rank's
resident set grew by 117 MiB writing 20,000 rows of 8 logits and 256 floats (21 MB) and by 164 MiB
writing 100,000 (row groups of 65,536 rows, 70 MB): 96 MiB plus one row group, rounded up
(SBM, 2 x 256, k = 1, 2026-12-06; BENCHMARKS.md "After training: outputs")."""


def infer_memory(ps: PartStats, cfg, f_in: int, n_classes: int, k: int, emb_width: int) -> dict:
    """Bytes of one inference rank by what holds them (``cfg``: the training's
    :class:`~graphdist.gnn.config.GCNConfig` as infer runs it: plain 32-bit rows, one round;
    ``emb_width``: the width of the written embedding)."""
    from graphdist.outputs import ROWS_PER_GROUP
    active = k > 1
    layers = layer_plan(cfg, f_in, n_classes, active, False)
    n = ps.n
    feats = n * f_in * 4
    kept = feats if layers[0]["eval_reuse"] and not active else 0  # the first product, kept
    widths = [f_in] + [cfg.hidden] * (cfg.layers - 1) + [n_classes]
    weights = 4 * sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))
    adj = adjacency_bytes(ps, cfg.model, "plain", active)
    act = activation_peak(ps, layers, cfg, "plain", active, k, train=False) + kept
    emb = n * emb_width * 4
    row = (n_classes + emb_width) * 4 + 16  # logits, embedding, prediction, id
    write = n * row + WRITER_BYTES + min(n, ROWS_PER_GROUP) * row
    total = RUNTIME_BYTES + ps.plan_bytes + max(feats + adj + weights + act + emb, write)
    return {"owned_rows": n, "halo_rows": ps.halo, "features_bytes": feats, "plan_bytes": ps.plan_bytes,
            "adjacency_bytes": adj, "weights_bytes": weights, "activation_bytes": act, "embedding_bytes": emb,
            "write_bytes": write, "runtime_bytes": RUNTIME_BYTES, "peak_bytes": int(total)}


def check_infer_fits(cfg, lg, n_classes: int, emb_width: int, device) -> dict | None:
    """Collective: this rank's :func:`infer_memory`, summed over the ranks of its machine against
    the memory available there, and against its own process limit; one line with the numbers
    (a :class:`~graphdist.errors.ConfigError`) when it does not fit. Returns the figures of every
    rank (None for a model that is not modelled: all ranks agree, the config is the same)."""
    from graphdist import comm
    from graphdist.gnn.config import BUILTIN_MODELS
    from graphdist.gnn.stats import part_stats
    from graphdist.hosts import placement
    from graphdist.memory import available_bytes, process_ceiling, resident_bytes
    if cfg.model not in BUILTIN_MODELS:
        return None
    k = comm.world()[1]
    need = infer_memory(part_stats(lg, check_symmetry=False), cfg, int(lg.x.shape[1]), n_classes, k,
                        emb_width)["peak_bytes"]
    where, me = placement(), comm.world()[0]
    machine = [where.machine_of_host[h] for h in where.host_of_rank]
    room = None
    if device.type != "cuda":  # the machine's free memory is shared by its ranks
        room = available_bytes() + (where.ranks_on_machine_of(me) - 1) * (resident_bytes() or 0)
    every = comm.all_gather_json({"need": need, "machine": machine[me], "room": room, "ceiling": process_ceiling()})
    _refuse(cfg, every, machine[me])
    return {"need_bytes_per_rank": [e["need"] for e in every], "room_bytes": room}


def _refuse(cfg, every: list[dict], mine) -> None:
    from graphdist.errors import ConfigError
    what = f"inference of {cfg.model} {cfg.layers}x{cfg.hidden}"
    fix = "use more ranks (--nproc, or an artifact of more parts)"
    for m in sorted({e["machine"] for e in every}, key=lambda m: (m != mine, str(m))):
        node = [e for e in every if e["machine"] == m]
        total, rooms = sum(e["need"] for e in node), [e["room"] for e in node if e["room"] is not None]
        if rooms and total > min(rooms):
            raise ConfigError(f"{what} needs about {max(e['need'] for e in node) / GiB:.2f} GiB per rank "
                              f"({total / GiB:.2f} GiB for the {len(node)} rank(s) on this machine), and "
                              f"{min(rooms) / GiB:.2f} GiB is available; {fix}")
    capped = [e for e in every if e["ceiling"] is not None and e["need"] > e["ceiling"]]
    if capped:
        e = max(capped, key=lambda e: e["need"] - e["ceiling"])
        raise ConfigError(f"{what} needs about {e['need'] / GiB:.2f} GiB per rank, and a rank may hold only "
                          f"{e['ceiling'] / GiB:.2f} GiB (its process memory limit, ulimit -d / -v); {fix}")
