"""The facts a ``train-gcn`` run decides from (:class:`graphdist.gnn.decide.Facts`), gathered
from its ranks before anything is built: every part's statistics, each rank's host, the memory
its host can still give and its own process limit, and where ``--halo auto`` must choose a mode,
the link (``--link-gbps`` or two timed all-to-alls) and the compute rates (timed on rank 0).

One gather and, for ``--halo auto``, one measurement: every rank then holds the same facts and
decides alike. What a resumed run's checkpoint recorded (the mode ``--halo auto`` chose, the rounds
``--halo-rounds 0`` chose) is read back, never measured again."""
from __future__ import annotations

from graphdist import comm
from graphdist.checkpoint import recorded_setting, resuming, with_recorded
from graphdist.errors import ConfigError
from graphdist.gnn.decide import Facts
from graphdist.hosts import placement
from graphdist.gnn.stats import from_dict, part_stats, to_dict
from graphdist.memory import available_bytes, process_ceiling, resident_bytes

__all__ = ["gather_facts", "check_node_data"]


def check_node_data(lg) -> None:
    """A GCN needs features, labels and a train mask (one line saying how to add them otherwise)."""
    if lg.x is not None and lg.y is not None and lg.train_mask is None:
        raise ConfigError("the graph has labels but no train/val/test split to train a GCN on: add ,train=0.1,val=0.1 "
                          "to an edgelist spec with labels=FILE (a random split of the labelled nodes), or "
                          "give an npz with train_mask, val_mask and test_mask arrays (docs/datasets.md)")
    if lg.x is None or lg.y is None or lg.train_mask is None:
        raise ConfigError("the graph needs features x, labels y and a train mask to train a GCN; for a "
                          "graph without node data add ,features=degree (or ,features=random:64) and "
                          ",labels=random:8 to an edgelist or npz spec")


def gather_facts(cfg, lg, ctx) -> Facts:
    """This job's :class:`~graphdist.gnn.decide.Facts` (a collective: every rank calls it, every
    rank gets the same)."""
    check_node_data(lg)
    where = placement()  # (graphdist.hosts: the hosts every rank agreed on; memory is a machine's)
    machine = [where.machine_of_host[h] for h in where.host_of_rank]
    local = where.ranks_on_machine_of(ctx.rank)
    room = None
    if ctx.device.type != "cuda":  # the machine's free memory is shared by its ranks
        room = available_bytes() + (local - 1) * (resident_bytes() or 0)
    mine = {"part": to_dict(part_stats(lg, check_symmetry=False)), "classes": int(lg.num_classes),
            "host": machine[ctx.rank], "room": room, "ceiling": process_ceiling(), "mvc": bool(lg.has_mvc)}
    every = comm.all_gather_json(mine)
    facts = Facts(parts=[from_dict(e["part"]) for e in every], f_in=int(lg.x.shape[1]),
                  n_classes=max(e["classes"] for e in every), hosts=[e["host"] for e in every],
                  room=None if room is None else [e["room"] for e in every], ceiling=[e["ceiling"] for e in every],
                  has_mvc=all(e["mvc"] for e in every), backend=comm.backend() or "gloo", recorded=_recorded(cfg))
    if cfg.halo == "auto" and facts.k > 1 and facts.recorded.get("halo") not in ("plain", "mvc"):
        facts.link, facts.rates = measure(cfg)
    return facts


def _recorded(cfg) -> dict:
    """What the checkpoint a resumed run continues recorded of the settings it resolved."""
    if not resuming(cfg):
        return {}
    out = {"halo": recorded_setting(cfg, "halo")}
    if not cfg.halo_rounds:
        out["halo_rounds"] = with_recorded(cfg, "halo_rounds").halo_rounds or None
    return out


def measure(cfg) -> tuple[dict, dict]:
    """``(link, rates)`` for ``--halo auto`` (collectives): the link as given (``--link-gbps``)
    or measured here, and the compute rates timed on rank 0, the same on every rank."""
    from graphdist.gnn.auto import measure_link
    from graphdist.gnn.plan_time import codec_rates, measured_rates
    timed = comm.all_gather_json(_rates(measured_rates(), codec_rates()) if comm.world()[0] == 0 else None)[0]
    if cfg.link_gbps > 0:
        link = {"bytes_per_s": cfg.link_gbps * 1e9 / 8, "latency_s": cfg.link_latency_us * 1e-6,
                "source": "given (--link-gbps)"}
    else:
        bw, lat = measure_link()
        link = {"bytes_per_s": bw, "latency_s": lat, "source": "measured at start-up"}
    return link, timed


def _rates(rates: tuple[float, float], codec: dict) -> dict:
    return {"spmm": rates[0], "dense": rates[1], "codec": {str(b): v for b, v in codec.items()}}
