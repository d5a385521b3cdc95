"""``graphdist plan (SPEC [--parts K --method M] | --partition DIR | --nodes N --edges E ...)``

Flags from :class:`graphdist.gnn.plan.PlanConfig` (train-gcn's model and exchange flags plus the
plan's own); the command is :func:`graphdist.gnn.plan.plan`. Prints a per-rank table, or
``--json`` the keys a ``train-gcn`` report would have for the run it predicts, plus ``fits``.
A PyG ``--model``: the halo exchanges per layer and their bytes (:mod:`graphdist.gnn.plan_pyg`).
"""
from __future__ import annotations

import json

from graphdist import config
from graphdist.gnn.plan import PlanConfig

_TRAINING_ONLY = ("nproc", "nodes", "lr", "weight_decay", "weight_decay_all", "epochs", "row_normalize", "patience",
                  "reorder", "device", "report", "checkpoint_dir", "checkpoint_every", "keep_checkpoints", "resume",
                  "timeout_s", "malloc_mmap_mb", "progress", "summary", "max_restarts", "tensorboard")
# (--halo-route hosts with --hosts H: the route's plan and buffers are counted in each rank's memory;
# the bytes and times between hosts are the direct route's)


def _handler(args) -> int:
    from graphdist.fmt import fmt_bytes as human_bytes
    from graphdist.gnn.plan import plan
    cfg = config.from_namespace(PlanConfig, args)
    out = plan(cfg)
    if cfg.json:
        print(json.dumps({k: v for k, v in out.items() if k != "layers"}, indent=1))
        return 0
    if "halo/layers" in out:  # a PyG model: its exchanges and bytes only
        return _pyg_report(cfg, out)
    print(f"plan: {out['source']}, k={out['world_size']}, {cfg.model} {cfg.layers}x{cfg.hidden}, "
          f"F={out['features']}, C={out['classes']}, halo {out['comm/halo']}{' (auto)' if cfg.halo == 'auto' else ''} {cfg.halo_bits} bit"
          f"{rounds_note(cfg, out)}")
    cells = [f"{row['owned_rows']:7,d} {row['halo_rows']:7,d} {human_bytes(row['features_bytes']):>9} "
             f"{human_bytes(row['adjacency_bytes']):>9} {human_bytes(row['activation_bytes']):>11} "
             f"{human_bytes(row['optimizer_bytes'] + row['plan_bytes']):>14} {human_bytes(row['peak_bytes']):>9} "
             f"{row['time/epoch_s']:9.2f}" for row in out["ranks"]]
    runs = same_rows(cells)  # ranks that print alike share one row (stats mode: all of them)
    width = max(4, *(len(label) for label, _ in runs))
    print(f"{'rank':<{width}}   owned    halo  features adjacency activations optimizer+plan      peak  epoch s (est.)")
    for label, text in runs:
        print(f"{label:>{width}} {text}")
    route = max(r.get("route_plan_bytes", 0) for r in out["ranks"])
    if route:
        print(f"route across hosts (--halo-route hosts): its plan takes at most {human_bytes(route)} on a rank while it "
              "is built (in the peak above, as are the buffers of its two phases; bytes between hosts below are the "
              "direct route's)")
    modes = ", ".join(f"{m} {human_bytes(b)}" for m, b in out["comm/halo_bytes_per_epoch_by_mode"].items())
    print(f"halo bytes per epoch (all ranks, {cfg.halo_bits} bit): {modes or 'none (k=1)'}")
    if cfg.hosts and out["world_size"] > 1:
        intra = f"{cfg.intra_gbps:g} Gbit/s" if cfg.intra_gbps else "memory, not charged"
        print(f"links ({out['hosts']} hosts x {out['world_size'] // out['hosts']} ranks, {cfg.halo_bits} bit): "
              f"between hosts {human_bytes(out['comm/inter_host_bytes_per_epoch'])} per epoch, "
              f"{out['time/inter_host_s_per_epoch']:.3f} s at {cfg.link_gbps:g} Gbit/s (busiest host); "
              f"within hosts {human_bytes(out['comm/intra_host_bytes_per_epoch'])}, "
              f"{out['time/intra_host_s_per_epoch']:.3f} s ({intra})")
    if out["comm/choices"]:
        print(f"exchange choices at {cfg.link_gbps:g} Gbit/s"
              + (f", {cfg.link_latency_us:g} us per exchange" if cfg.link_latency_us else "") + ", fastest first:")
        print("  halo  bits   bytes/epoch  epoch s (est.)")
        for c in out["comm/choices"]:
            mark = " <- --halo/--halo-bits" if (c["comm/halo"], c["comm/halo_bits"]) == (out['comm/halo'], cfg.halo_bits) else ""
            exact = "" if c["exact"] else " (inexact)"
            print(f"  {c['comm/halo']:<5} {c['comm/halo_bits']:>4} {human_bytes(c['comm/halo_bytes_per_epoch']):>12} "
                  f"{c['time/epoch_s']:15.3f}{exact}{mark}")
    verdict = "fits" if out["fits"] else "does NOT fit"
    print(f"peak {human_bytes(out['mem/peak_bytes'])} per rank {verdict} in {human_bytes(out['mem/per_rank_bytes'])}")
    return 0


def _pyg_report(cfg, out: dict) -> int:
    """The text report of a PyG ``--model`` (:mod:`graphdist.gnn.plan_pyg`)."""
    from graphdist.fmt import fmt_bytes as human_bytes
    k = out["world_size"]
    print(f"plan: {out['source']}, k={k}, {cfg.model} (--layers {cfg.layers} --hidden {cfg.hidden}), "
          f"F={out['features']}, C={out['classes']}, {out['model/parameters']:,d} parameters, "
          f"halo {out['comm/halo']} {cfg.halo_bits} bit")
    size = lambda b: "?" if b is None else human_bytes(b)  # noqa: E731 (--halo auto: train-gcn's choice)
    cells = [f"{r['owned_rows']:7,d} {r['halo_rows']:7,d} {human_bytes(r['features_bytes']):>9} "
             f"{human_bytes(r['optimizer_bytes']):>9} {size(r['halo_bytes_sent_per_epoch']):>10} "
             f"{size(r['halo_bytes_received_per_epoch']):>14}" for r in out["ranks"]]
    runs = same_rows(cells)
    width = max(4, *(len(label) for label, _ in runs))
    print(f"{'rank':<{width}}   owned    halo  features optimizer sent/epoch received/epoch")
    for label, text in runs:
        print(f"{label:>{width}} {text}")
    print(f"halo exchanges per forward: {out['comm/halo_exchanges_per_forward']}"
          + ("" if k > 1 else " (k=1: nothing to exchange)"))
    for row in out["halo/layers"]:
        widths = sorted(set(row["widths"]))
        cols = "/".join(str(w) for w in widths)
        n = row["exchanges"]
        back = "" if k == 1 else f", {row['backward']} with gradients back" if row["backward"] else ", no gradients back"
        print(f"  {row['layer'] or '<model>'} ({row['class']}, {row['call']}, {row['halo']}): {n} "
              f"exchange{'' if n == 1 else 's'} of {cols} columns{back}")
    modes = ", ".join(f"{m} {human_bytes(b)}" for m, b in out["comm/halo_bytes_per_epoch_by_mode"].items())
    print(f"halo bytes per epoch (all ranks; training forward and backward at {cfg.halo_bits} bit, evaluation "
          f"at {cfg.eval_halo_bits}): {modes if k > 1 else 'none (k=1)'}")
    print(out["plan/not_modelled"])
    return 0


def same_rows(cells: list[str]) -> list[tuple[str, str]]:
    """Consecutive ranks whose rows print alike, as ``(label, row)``: ``("3", row)`` for one
    rank, ``("0-63", row)`` for a run of them."""
    out, start = [], 0
    for r in range(1, len(cells) + 1):
        if r == len(cells) or cells[r] != cells[start]:
            out.append((f"{start}" if r - start == 1 else f"{start}-{r - 1}", cells[start]))
            start = r
    return out


def register(sub) -> None:
    import argparse

    from graphdist.specs import kinds_help
    p = sub.add_parser("plan", epilog=kinds_help("graph"), formatter_class=argparse.RawDescriptionHelpFormatter,
                       help="predict a train-gcn run's per-rank memory, halo bytes and epoch time",
                       description="Predict what a train-gcn run needs per rank (owned/halo rows, memory of "
                                   "features, adjacency, activations and optimizer, halo bytes per epoch, epoch "
                                   "time) and whether it fits, from a dataset SPEC, a partition DIR, or a graph's "
                                   "statistics (--nodes, --edges, --features, --classes, --replication, --parts). "
                                   "For a PyG --model (gat, ..., MODULE:CLASS): the halo exchanges of each layer per "
                                   "forward (a multi-hop layer: one per propagation) and the halo bytes per epoch, "
                                   "per rank and in total; its memory and time are not modelled.")
    config.add_arguments(p, PlanConfig, skip=_TRAINING_ONLY)
    p.set_defaults(func=_handler)


def rounds_note(cfg, out: dict) -> str:
    """``, in R exchange rounds`` (and whether --halo-rounds 0 chose it) when R > 1."""
    r = out["comm/halo_rounds"]
    if r <= 1:
        return ""
    chose = "" if cfg.halo_rounds else " (the fewest that fit)" if out["fits"] else " (the most; none fits)"
    return f", in {r} exchange rounds{chose}"
