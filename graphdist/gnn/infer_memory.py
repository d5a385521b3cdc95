"""Will a ``graphdist infer`` rank fit? Its peak resident bytes, from the pieces ``train-gcn``'s
check uses (:mod:`graphdist.gnn.plan_memory`, :mod:`graphdist.gnn.stats`) with the training taken
out: no gradients, no optimizer state, no saved activations. Checked on every rank once its part
is loaded and before the model is built, for the fewest exchange rounds that fit
(:mod:`graphdist.exchange.rounds`: a layer's halo rows move in slices, so a rank holds one
slice's buffers, not the whole exchange's), against the memory its machine can still give (the
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

import dataclasses

from graphdist.gnn.plan_memory import RUNTIME_BYTES, activation_peak, adjacency_bytes
from graphdist.gnn.stats import PartStats, layer_plan
from graphdist.outputs import WRITER_BYTES

__all__ = ["infer_memory", "check_infer_fits"]


def infer_memory(ps: PartStats, cfg, f_in: int, n_classes: int, k: int, emb_width: int) -> dict:
    """Bytes of one inference rank by what holds them (``cfg``: the training's
    :class:`~graphdist.gnn.config.GCNConfig` as infer runs it: plain 32-bit rows in
    ``cfg.halo_rounds`` rounds; ``emb_width``: the width of the written embedding)."""
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


def check_infer_fits(cfg, lg, n_classes: int, emb_width: int, device) -> tuple[int, dict | None]:
    """Collective: the exchange rounds inference takes and the figures of every rank: the fewest
    of ``cfg.halo_rounds`` (given) or 1, 2, 4, ... (0; 1 at k = 1) with which every rank's
    :func:`infer_memory` fits (:func:`graphdist.fits.fewest_fitting`: its machine's memory, its
    process limit; one line with the numbers when even the most rounds do not fit). A model
    that is not modelled (a user's ``--model``) takes the rounds given, else one, unchecked
    (figures None; all ranks agree, the config is the same)."""
    from graphdist import comm
    from graphdist.errors import ConfigError
    from graphdist.fits import fewest_fitting
    from graphdist.gnn.config import BUILTIN_MODELS
    from graphdist.gnn.decide import ROUNDS, round_choices
    from graphdist.gnn.stats import part_stats
    k = comm.world()[1]
    if cfg.model not in BUILTIN_MODELS:
        if cfg.halo_rounds > 1:
            raise ConfigError(f"--halo-rounds applies to --model gcn|sage only (graphdist's own layers), not to "
                              f"--model {cfg.model}")
        return 1, None
    cands = round_choices(cfg, k)
    # the owned block's symmetry checked (a hash, no transpose): a symmetric GCN block is stored once
    ps, f_in = part_stats(lg), int(lg.x.shape[1])
    needs = [infer_memory(ps, dataclasses.replace(cfg, halo_rounds=r), f_in, n_classes, k, emb_width)["peak_bytes"]
             for r in cands]
    name = f"inference of {cfg.model} {cfg.layers}x{cfg.hidden}"
    more = ", or more --halo-rounds (0: the fewest that fit)" if cfg.halo_rounds and cands[-1] < ROUNDS[-1] else ""
    i, figures = fewest_fitting(lambda i: name + (f" in {cands[i]} halo rounds" if cands[i] > 1 else ""),
                                f"use more ranks (--nproc, or an artifact of more parts){more}", needs, device)
    return cands[i], figures
