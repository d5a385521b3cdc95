"""``graphdist plan``: will a ``train-gcn`` run fit, and what will it cost? Per rank: owned and
halo rows, the memory of features, activations, adjacency and optimizer state, halo bytes per
epoch per exchange mode, and an epoch-time estimate; the peak is the largest rank's. For a PyG
``--model``, the halo exchanges of each layer and their bytes only (:mod:`graphdist.gnn.plan_pyg`).

Sizes come from a partition artifact (each part file is mapped, nothing trained), from a dataset
spec partitioned here, or, for a graph too large to load, from its statistics (nodes, undirected
edges, features, classes and a replication factor ``1 + halo rows / nodes``).

Halo bytes are exact: every exchange of an epoch (training forward and backward, evaluation
forward) moves ``M`` message rows (the plan's, summed over ranks: halo rows in ``plain``,
raw rows plus partial sums in ``mvc``) of ``quant.row_bytes(width, bits)`` bytes, with the
widths the model's layers choose (:func:`graphdist.gnn.models.layer_widths`), which is what
``CommStats`` counts. Memory is a sum of the arrays a rank holds (the adjacency as the trainer
builds it, the part's plan arrays, the kept product of the evaluation's first layer) plus the
activations live at the peak of an epoch, replayed tensor by tensor (:func:`activation_peak`),
on top of the process's own footprint (:data:`RUNTIME_BYTES`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from graphdist.errors import ConfigError
from graphdist.gnn.config import BUILTIN_MODELS, GCNConfig
from graphdist.gnn.decide import ROUNDS, Decisions, Facts, decide
from graphdist.gnn.plan_memory import rank_memory
from graphdist.gnn.stats import PartStats, layer_plan, part_stats, stats_parts

__all__ = ["PlanConfig", "plan", "plan_facts"]

GiB = 2 ** 30


@dataclass
class PlanConfig(GCNConfig):
    """``graphdist plan``: the model and exchange fields of :class:`GCNConfig` and what to plan."""

    mem_per_rank: float = 0.0
    """memory of one rank in GiB for the fits check (0 = this machine's physical memory)"""
    link_gbps: float = 10.0
    """bandwidth of the link between ranks in Gbit/s, for the epoch-time estimate (with --hosts:
    each host's link to the others, shared by its ranks)"""
    hosts: int = 0
    """hosts the K ranks run on, host-major as torchrun numbers them (rank r on host r // (K/H)):
    halo bytes between hosts go over --link-gbps, between ranks of one host over --intra-gbps
    (0 = one rank per host)"""
    intra_gbps: float = 0.0
    """with --hosts: bandwidth between the ranks of one host in Gbit/s (0 = not charged: they
    exchange through memory)"""
    spmm_rate: float = 0.0
    """sparse products in entries x columns per second (0 = measure on this machine)"""
    compute_s: float = 0.0
    """seconds of one epoch's compute per rank as measured (train-gcn's time/epoch_s of the same
    job without a slow link, e.g. --nproc K on one host), used instead of the estimate from
    sparse products and linears, which leaves out elementwise work, the optimizer and the
    framework (0 = estimate)"""
    features: int = 0
    """stats mode: feature columns F"""
    classes: int = 0
    """stats mode: number of classes C"""
    num_nodes: int = field(default=0, metadata={"flag": "--nodes"})
    """stats mode (a graph too large to load): number of nodes N"""
    num_edges: int = field(default=0, metadata={"flag": "--edges"})
    """stats mode: number of undirected edges (each stored twice)"""
    replication: float = 0.0
    """stats mode: replication factor 1 + (halo rows over all ranks) / N at --parts K (graphdist
    partition reports it as quality.replication_factor)"""
    cut_fraction: float = 0.1
    """stats mode: share of stored edges whose source is on another rank"""
    json: bool = False
    """print the prediction as JSON (the keys of a train-gcn report)"""

    def validate(self) -> None:
        from graphdist.config import check_choices
        check_choices(self)
        stats = self.num_nodes > 0
        if not stats and self.spec is None and self.partition is None:
            raise ConfigError("give a dataset SPEC, --partition DIR, or the statistics --nodes N --edges E "
                              "--features F --classes C --replication R --parts K")
        if stats:
            for name, v in (("edges", self.num_edges), ("features", self.features), ("classes", self.classes),
                            ("parts", self.parts or 0)):
                if v < 1:
                    raise ConfigError(f"--{name} must be >= 1 with --nodes (stats mode), got {v}")
            if self.replication < 1.0 and (self.parts or 1) > 1:
                raise ConfigError(f"--replication must be >= 1 with --nodes and --parts > 1, got {self.replication}")
            if not 0.0 <= self.cut_fraction <= 1.0:
                raise ConfigError(f"--cut-fraction must be in [0, 1], got {self.cut_fraction}")
        if self.model not in BUILTIN_MODELS:  # a PyG model: its exchanges and bytes (plan_pyg.py)
            self._check_pyg_model()
        for name, v, lo in (("layers", self.layers, 1), ("hidden", self.hidden, 1)):
            if v < lo:
                raise ConfigError(f"--{name} must be >= {lo}, got {v}")
        if not 0 <= self.halo_rounds <= ROUNDS[-1]:
            raise ConfigError(f"--halo-rounds must be in 0..{ROUNDS[-1]}, got {self.halo_rounds}")
        if self.mem_per_rank < 0 or self.link_gbps <= 0 or self.spmm_rate < 0:
            raise ConfigError("--mem-per-rank and --spmm-rate must be >= 0 and --link-gbps > 0")
        if self.compute_s < 0:
            raise ConfigError(f"--compute-s must be >= 0, got {self.compute_s}")
        if self.hosts < 0 or self.intra_gbps < 0:
            raise ConfigError(f"--hosts and --intra-gbps must be >= 0, got {self.hosts} and {self.intra_gbps}")


def plan(cfg: PlanConfig) -> dict:
    """The prediction as a ``train-gcn`` report's keys plus ``fits``, a per-rank breakdown and the
    run's decisions (``run/decisions``: what :func:`graphdist.gnn.decide.decide` resolves for
    these parts, as the run resolves it)."""
    cfg.validate()
    parts, f_in, n_classes, source, loads = _parts(cfg)
    k = len(parts)
    if cfg.hosts and (cfg.hosts > k or k % cfg.hosts):
        raise ConfigError(f"--hosts {cfg.hosts} must divide the {k} ranks (K / H ranks on every host)")
    if cfg.model not in BUILTIN_MODELS:  # its exchanges and bytes only
        from graphdist.gnn.plan_pyg import plan_pyg
        return plan_pyg(cfg, parts, f_in, n_classes, k, source)
    rates = _rates(cfg, k > 1)
    facts = plan_facts(cfg, parts, f_in, n_classes, rates)
    dec = decide(cfg, facts)
    out = _figures(dec.applied(cfg), dec, facts, parts, rates)
    if loads is not None:  # an in-process run's ranks first load the whole graph
        for row, load in zip(out["ranks"], loads):
            row["load_peak_bytes"] = int(load)
            row["peak_bytes"] = max(row["peak_bytes"], int(load))
        out["mem/peak_bytes_per_rank"] = [r["peak_bytes"] for r in out["ranks"]]
        out["mem/peak_bytes"] = max(out["mem/peak_bytes_per_rank"])
        host_need = {h: max(p for p, hh in zip(out["mem/peak_bytes_per_rank"], facts.hosts) if hh == h)
                     * facts.hosts.count(h) for h in set(facts.hosts)}
        out["fits"] = out["fits"] and all(host_need[h] <= facts.room[facts.hosts.index(h)] for h in host_need)
    return {**out, "source": source, "run/decisions": dec.as_dict()}


def plan_facts(cfg: PlanConfig, parts: list[PartStats], f_in: int, n_classes: int, rates) -> Facts:
    """The facts a run of these parts would decide from, built here without communication: the
    owned blocks taken as unsymmetric (as a run measures them, an upper bound), ``--hosts`` hosts
    each with ``--mem-per-rank`` per rank (or this machine's memory), the link of ``--link-gbps``
    and ``rates`` (:func:`_rates`) where ``--halo auto`` needs them."""
    from graphdist.runtime import host_memory_bytes
    k = len(parts)
    hosts = int(cfg.hosts or k)
    per = k // hosts
    room = int(cfg.mem_per_rank * GiB * per) if cfg.mem_per_rank else host_memory_bytes()
    facts = Facts(parts=[p if cfg.num_nodes > 0 else dataclasses.replace(p, symmetric=False) for p in parts],
                  f_in=f_in, n_classes=n_classes, hosts=[r // per for r in range(k)], room=[room] * k,
                  ceiling=[None] * k, has_mvc=all("mvc" in p.send for p in parts))
    if cfg.halo == "auto" and k > 1:
        (spmm, dense), codec = rates
        facts.link = {"bytes_per_s": cfg.link_gbps * 1e9 / 8, "latency_s": cfg.link_latency_us * 1e-6,
                      "source": "given (--link-gbps)"}
        facts.rates = {"spmm": spmm, "dense": dense, "codec": {str(b): v for b, v in (codec or {}).items()}}
    return facts


def _rates(cfg, active: bool):
    """``((sparse, dense) rates, codec rates or None)`` for the time estimate: measured here, or
    given (``--spmm-rate``); none with ``--compute-s`` (a measured epoch stands in for them)."""
    from graphdist.gnn.plan_time import codec_rates, measured_rates
    if cfg.compute_s:
        return (0.0, 0.0), None
    rates = (cfg.spmm_rate, measured_rates()[1]) if cfg.spmm_rate else measured_rates()
    return rates, codec_rates() if active else None


def _figures(cfg, dec: Decisions, facts: Facts, parts: list[PartStats], rates) -> dict:
    """Per rank and in all: memory (the owned blocks' symmetry counted), halo bytes and the epoch
    estimate at the decided mode, rounds and residency; the table of exchange choices."""
    from graphdist.gnn.plan_time import epoch_seconds, exchange_choices, halo_bytes_per_epoch, link_seconds
    k, f_in, n_classes = len(parts), facts.f_in, facts.n_classes
    active, held = k > 1, dec["input_halo"] == "resident"
    layers = layer_plan(cfg, f_in, n_classes, active, held)
    rates, codec = rates
    choices = exchange_choices(parts, layers, cfg, active, rates, codec)
    halo = {m: halo_bytes_per_epoch(sum(p.send.get(m, 0) for p in parts), layers, cfg) if active else 0
            for m in ("plain", "mvc") if all(m in p.send for p in parts)}
    wire, links = link_seconds(parts, layers, cfg, cfg.halo) if active else ([(0.0, 0.0)] * k, {})
    if cfg.boundary_rate < 1.0 and active:  # the expected bytes of the sampled training exchanges
        halo[cfg.halo] = links["comm/inter_host_bytes_per_epoch"] + links["comm/intra_host_bytes_per_epoch"]
    ranks = []
    for ps, w in zip(parts, wire):
        row = rank_memory(ps, cfg, f_in, n_classes, k, cfg.halo, held)
        share = ps.send.get(cfg.halo, 0) / max(1, sum(p.send.get(cfg.halo, 0) for p in parts))
        row["halo_bytes_sent_per_epoch"] = int(halo.get(cfg.halo, 0) * share)
        row["time/epoch_s"] = epoch_seconds(ps, layers, cfg, cfg.halo, active, rates, w, codec)
        ranks.append(row)
    peaks = [r["peak_bytes"] for r in ranks]
    mem = dec.memory or {}
    return {"mem/peak_bytes": max(peaks), "mem/peak_bytes_per_rank": peaks,
            "comm/halo_bytes_per_epoch": halo.get(cfg.halo, 0), "comm/halo_bytes_per_epoch_by_mode": halo,
            "comm/halo": cfg.halo, "comm/halo_bits": cfg.halo_bits, "comm/halo_rounds": cfg.halo_rounds,
            "time/epoch_s": max(r["time/epoch_s"] for r in ranks), "fits": dec.refusal is None,
            "mem/per_rank_bytes": int(facts.room[0] // max(1, facts.hosts.count(0))), "world_size": k,
            "features": f_in, "classes": n_classes, "layers": layers, "ranks": ranks, "comm/choices": choices,
            "hosts": cfg.hosts or k, **links, "mem/check": mem,
            "rates": {"spmm_entries_cols_per_s": rates[0], "dense_flops_per_s": rates[1]}}


def _parts(cfg: PlanConfig) -> tuple[list[PartStats], int, int, str, list[int] | None]:
    """``(every part's statistics, features, classes, source, load peaks)``: from the statistics
    given (stats mode), mapped from the artifact, or cut from the spec here; the load peaks
    (:func:`_cut_here`) only for the last."""
    if cfg.num_nodes > 0:
        return stats_parts(cfg), cfg.features, cfg.classes, "stats", None
    if cfg.partition:
        from graphdist.partition.artifact import read_meta
        from graphdist.partition.parts import load_part
        k = int(read_meta(cfg.partition)["k"])
        lgs, source, loads = [load_part(cfg.partition, r) for r in range(k)], str(cfg.partition), None
    else:
        lgs, source, loads = _cut_here(cfg)
    f_in = int(lgs[0].x.shape[1]) if lgs[0].x is not None else 0
    n_classes = max(int(p.num_classes) for p in lgs)
    return [part_stats(p) for p in lgs], f_in, n_classes, source, loads


def _cut_here(cfg: PlanConfig):
    """Every part cut from the spec here, as an in-process run cuts it, and each rank's peak
    resident bytes while it does: every rank loads the whole graph and builds its part; rank 0 also
    partitions it and measures its quality. Each step is measured as it runs here
    (:func:`graphdist.memory.measured`, with the run's ``--malloc-mmap-mb``), on top of this
    process's resident set before the load (a rank's, before its part arrives)."""
    from graphdist.data import load_graph
    from graphdist.memory import measured
    from graphdist.partition.layout import SharedArrays, build_layout, checked_assignment
    from graphdist.partition.setup import partition_in_process
    from graphdist.runtime import set_mmap_threshold
    from partitioners.quality import quality
    set_mmap_threshold(cfg.malloc_mmap_mb)
    with measured() as load:
        g = load_graph(cfg.spec)
    k = int(cfg.parts or 1)
    with measured() as cut:
        a = checked_assignment(g, partition_in_process(g, k, cfg.method, cfg.seed), k)
    with measured() as judged:
        if k > 1:
            quality(g, a, k=k)
    with measured() as built:
        first = build_layout(g, a, 0, k)
    sh = SharedArrays(g, a, k)
    lgs = [first] + [build_layout(g, a, r, k, shared=sh) for r in range(1, k)]
    if load["peak"] is None:  # no high-water mark here: the load is not counted
        return lgs, f"{cfg.spec} ({cfg.method}, k={k})", None
    held = load["start"] + load["kept"]
    steps = [load["start"] + load["peak"], held + built["peak"]]
    loads = [max(steps + ([held + cut["peak"], held + judged["peak"]] if r == 0 else [])) for r in range(k)]
    return lgs, f"{cfg.spec} ({cfg.method}, k={k})", loads
