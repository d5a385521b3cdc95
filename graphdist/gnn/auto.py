"""``--halo auto``: the exact exchange (plain or mvc) with the lowest predicted epoch time.

Before anything is built, every rank turns its part into :class:`~graphdist.gnn.plan.PartStats`
and predicts its epoch for each exact mode with ``graphdist plan``'s estimate
(:func:`graphdist.gnn.plan_time.epoch_seconds`): sparse products and linears at rates measured on
rank 0 when the run starts, halo bytes over the link. The link is ``--link-gbps`` /
``--link-latency-us`` when given (a modelled network), else measured here: two timed
all-to-alls (64 KiB and 4 MiB per peer, best of three) fitted to latency + bytes / bandwidth.
The epoch time of a mode is its slowest rank's; the fastest mode wins (mvc on a tie, as it moves
fewer rows). Every rank decides from the same gathered numbers, so all agree.

The choice is plain data in the report (``comm/halo_auto``: the rates, the link, per mode the
bytes and predicted seconds). It is per run; choosing per layer and per peer pair, and a bit
width under an error budget, is not built yet. ``--halo-bits`` applies as given.
"""
from __future__ import annotations

import time

import torch

from graphdist import comm

__all__ = ["choose_halo", "measure_link", "resumed_choice"]


def measure_link(group=None) -> tuple[float, float]:
    """``(bytes per second, seconds of latency)`` of this job's all-to-all, the same on every rank
    (rank 0's fit of the slowest rank's times)."""
    _, world = comm.world(group)
    times = []
    for per_peer in (64 << 10, 4 << 20):
        n = per_peer // 4
        send = torch.zeros(n * world, dtype=torch.float32)
        out = torch.empty_like(send)
        best = float("inf")
        for _ in range(3):
            comm.barrier(group)
            t0 = time.perf_counter()
            comm.all_to_all_rows(out, send, [n] * world, [n] * world, group)
            best = min(best, time.perf_counter() - t0)
        times.append((per_peer * (world - 1), max(comm.all_gather_object(best, group))))
    (b1, t1), (b2, t2) = times
    bw = (b2 - b1) / max(t2 - t1, 1e-9)
    lat = max(t1 - b1 / bw, 0.0)
    return float(bw), float(lat)


def choose_halo(cfg, lg, n_classes: int) -> tuple[str, dict]:
    """``(mode, plan)``: the exact halo mode for this run and the data the choice rests on."""
    import dataclasses

    from graphdist.gnn.plan import halo_bytes_per_epoch, layer_plan, part_stats
    from graphdist.gnn.plan_time import epoch_seconds, measured_rates
    _, world = comm.world()
    f_in = int(lg.x.shape[1]) if lg.x is not None else 0
    active = world > 1
    layers = layer_plan(cfg, f_in, n_classes, active)
    modes = ["plain", "mvc"] if lg.has_mvc else ["plain"]
    if not active:
        return "plain", {"chosen": "plain", "why": "one rank: nothing to exchange", "modes": {}}
    rates = comm.all_gather_object(measured_rates() if comm.world()[0] == 0 else None)[0]
    if cfg.link_gbps > 0:
        bw, lat, link = cfg.link_gbps * 1e9 / 8, cfg.link_latency_us * 1e-6, "given (--link-gbps)"
    else:
        bw, lat = measure_link()
        link = "measured at start-up"
    ps = part_stats(lg, check_symmetry=False)
    mine = {}
    for m in modes:
        c = dataclasses.replace(cfg, halo=m, link_gbps=bw * 8 / 1e9, link_latency_us=lat * 1e6)
        sent = halo_bytes_per_epoch(ps.send[m], layers, c)
        mine[m] = (sent, epoch_seconds(ps, layers, c, m, True, sent, rates))
    every = comm.all_gather_object(mine)
    per_mode = {m: {"comm/halo_bytes_per_epoch": int(sum(r[m][0] for r in every)),
                    "time/epoch_s": max(r[m][1] for r in every)} for m in modes}
    chosen = min(modes, key=lambda m: (per_mode[m]["time/epoch_s"], m != "mvc"))
    return chosen, {"chosen": chosen, "modes": per_mode, "link": link, "link_bytes_per_s": bw, "link_latency_s": lat,
                    "rates": {"spmm_entries_cols_per_s": rates[0], "dense_flops_per_s": rates[1]}}


def resumed_choice(cfg) -> tuple[str, dict] | None:
    """On ``--resume``, the mode the checkpointed run chose (its settings record the resolved
    mode), so a resumed run continues with the same exchange; None otherwise."""
    if not (cfg.resume and cfg.checkpoint_dir):
        return None
    from graphdist.checkpoint import Checkpointer
    ck = Checkpointer(cfg.checkpoint_dir)
    snap = ck.latest()
    mode = ((ck.read_meta(snap).get("settings") or {}).get("halo")) if snap is not None else None
    if mode not in ("plain", "mvc"):
        return None
    return mode, {"chosen": mode, "why": f"resumed: the choice recorded in {snap}", "modes": {}}
