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

from dataclasses import dataclass, field

import numpy as np

from graphdist.errors import ConfigError
from graphdist.gnn.config import BUILTIN_MODELS, GCNConfig
from graphdist.gnn.plan_memory import ALLOC_SLACK, activation_peak  # noqa: F401 (plan's API)
from graphdist.memory import PROCESS_BYTES

GiB = 2 ** 30
ROUNDS = (1, 2, 4, 8, 16, 32, 64)
"""Exchange rounds ``--halo-rounds 0`` chooses from (the fewest that fit)."""


def round_choices(cfg, k: int) -> list[int]:
    """The exchange rounds a run may take, fewest first: ``--halo-rounds`` as given; 1 at k = 1
    and with stale halos or boundary sampling (their exchanges move whole); else :data:`ROUNDS`."""
    if k == 1 or cfg.halo_staleness or cfg.boundary_rate < 1.0:
        return [1]
    return [cfg.halo_rounds] if cfg.halo_rounds else list(ROUNDS)
RUNTIME_BYTES = PROCESS_BYTES
"""A trainer process before its part arrives (the one footprint every memory check adds,
:data:`graphdist.memory.PROCESS_BYTES`)."""
STATS_BYTES_PER_ROW = 48
"""Stats mode: bytes of a part's arrays other than features and CSR (``PartStats.plan_bytes``: ids,
labels, masks, degrees, both exchange plans) per owned row, with :data:`STATS_BYTES_PER_HALO_ROW`
an upper bound over the 28 parts of SBM (20k nodes) and R-MAT (scale 14) METIS artifacts at k = 2,
4, 8 (measured at most 0.92 of ``48 n + 32 h``; ``python benchmarks/memory_constants.py``)."""
STATS_BYTES_PER_HALO_ROW = 32
"""Stats mode: the same per halo row."""


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


@dataclass
class PartStats:
    """What the memory and traffic of one rank depend on."""

    n: int
    """owned rows"""
    halo: int
    """halo rows (plain)"""
    edges: int
    """stored in-edges of the owned rows"""
    own_edges: int
    """of which from owned columns"""
    loops: int
    """stored self-loops"""
    symmetric: bool
    """the owned block's pattern equals its transpose"""
    send: dict
    """message rows sent per layer, per halo mode"""
    recv: dict
    """message rows received per layer, per halo mode"""
    halo_entries: dict
    """entries of the received-rows operator per halo mode"""
    send_entries: int
    """entries of the mvc send operator"""
    plan_bytes: int
    """the part's arrays other than features and CSR (ids, labels, masks, degrees, plans)"""
    send_to: dict = field(default_factory=dict)
    """message rows sent per layer to each peer (a list by rank), per halo mode"""
    recv_from: dict = field(default_factory=dict)
    """message rows received per layer from each peer, per halo mode"""
    pre_send: int = 0
    """of the mvc rows sent, partial sums (boundary sampling always sends them)"""
    pre_recv: int = 0
    """of the mvc rows received, partial sums"""


def part_stats(lg, check_symmetry: bool = True) -> PartStats:
    """:class:`PartStats` of a :class:`~graphdist.partition.local.LocalGraph` (without
    ``check_symmetry`` the owned block counts as unsymmetric: an upper bound, and no transpose
    is built)."""
    import scipy.sparse as sp
    n = lg.num_owned
    ptr, cols = lg.indptr.numpy(), lg.indices.numpy()
    rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(ptr))
    loops = int((cols == rows).sum())
    own = cols < n
    own_edges, symmetric = int(own.sum()), False
    if check_symmetry:
        m = sp.csr_matrix((np.ones(own_edges, dtype=np.int8), (rows[own], cols[own])), shape=(n, n))
        symmetric = (m != m.T).nnz == 0
        del m
    del rows
    to, frm = {"plain": list(lg.send_counts)}, {"plain": list(lg.recv_counts)}
    hent = {"plain": int((~own).sum())}
    send_entries = 0
    if lg.has_mvc:
        lay = lg.exchange_layout("mvc")
        to["mvc"], frm["mvc"] = list(lay.send_counts), list(lay.recv_counts)
        hc = cols[~own].astype(np.int64) - n
        hent["mvc"] = int(lg.halo_raw.numpy()[hc].sum()) + int(lg.pre_rows.numel())
        send_entries = int(lg.send_raw.sum()) + int(lg.pre_src.numel())
    skip = {"x", "indptr", "indices"}
    plan_bytes = sum(int(t.numel() * t.element_size()) for k, t in lg.to_dict().items()
                     if k not in skip and hasattr(t, "numel"))
    send, recv = {m: sum(c) for m, c in to.items()}, {m: sum(c) for m, c in frm.items()}
    pre = (sum(lg.pre_send_counts), sum(lg.pre_recv_counts)) if lg.has_mvc else (0, 0)
    return PartStats(n, lg.num_halo, int(cols.size), own_edges, loops, bool(symmetric), send, recv, hent,
                     send_entries, plan_bytes, to, frm, *pre)


def stats_parts(cfg: PlanConfig) -> list[PartStats]:
    """Even parts of a graph given by its statistics (stats mode)."""
    k, n_all = int(cfg.parts), int(cfg.num_nodes)
    e = 2 * int(cfg.num_edges) / k
    out = []
    for r in range(k):
        n = n_all // k + (1 if r < n_all % k else 0)
        h = int(round((cfg.replication - 1.0) * n)) if k > 1 else 0
        cut = int(e * cfg.cut_fraction) if k > 1 else 0
        msg = {"plain": h, "mvc": h}  # mvc moves at most the plain rows
        out.append(PartStats(n, h, int(e), int(e) - cut, 0, True, dict(msg), dict(msg), {"plain": cut, "mvc": cut},
                             0, STATS_BYTES_PER_ROW * n + STATS_BYTES_PER_HALO_ROW * h))
    return out


def input_held_why_not(cfg, k: int) -> str | None:
    """None when a run holds its input's halo rows (``--input-halo resident``,
    :mod:`graphdist.exchange.resident`), else why it exchanges them. Held rows are the exact rows
    the exchange would bring, so they stand in for 32-bit, fresh, whole exchanges only."""
    if getattr(cfg, "input_halo", "exchange") != "resident":
        return "--input-halo exchange asked for"
    if k <= 1:
        return "one rank: no halo"
    for bad, why in ((cfg.halo_bits != 32, f"--halo-bits {cfg.halo_bits} quantises the exchanged rows"),
                     (cfg.halo_staleness, "--halo-staleness exchanges last epoch's rows"),
                     (cfg.boundary_rate < 1.0, "--boundary-rate samples the exchanged rows"),
                     (cfg.label_rate > 0, "--label-rate adds labels to the input, which then needs a gradient")):
        if bad:
            return why
    return None


def layer_plan(cfg, f_in: int, n_classes: int, active: bool) -> list[dict]:
    """Per layer: input/output widths and the width it propagates at in training and in
    evaluation, from the model's own choice (:func:`graphdist.gnn.models.layer_widths`), and
    whether the first layer multiplies held halo rows (:func:`input_held_why_not`)."""
    from graphdist.gnn.models import layer_widths
    held = active and input_held_why_not(cfg, 2) is None
    return layer_widths(f_in, cfg.hidden, n_classes, cfg.layers, active=active, labels=cfg.label_rate > 0,
                        held=held)


def rank_memory(ps: PartStats, cfg, f_in: int, n_classes: int, k: int, mode: str) -> dict:
    """Bytes of one rank, by what holds them (the exchange in ``cfg.halo_rounds`` rounds)."""
    active = k > 1
    layers = layer_plan(cfg, f_in, n_classes, active)
    n = ps.n
    loops_added = n if cfg.model == "gcn" else 0
    own_nnz = ps.own_edges - (ps.loops if cfg.model == "gcn" else 0) + loops_added
    sym = ps.symmetric and cfg.model == "gcn"
    adj = own_nnz * 8 * (1 if sym else 2) + 4 * (n + 1) * (1 if sym else 2)
    if active:
        hn = ps.halo_entries.get(mode, 0)
        adj += hn * 8 * 2 + 4 * (n + ps.recv.get(mode, 0) + 2)
        if mode == "mvc":
            adj += ps.send_entries * 8 * 2 + 4 * (n + ps.send.get(mode, 0) + 2)
    feats = n * f_in * 4
    held = active and (layers[0].get("eval_held", False) or layers[0].get("train_held", False))
    kept = n * f_in * 4 if layers[0]["eval_reuse"] and (not active or layers[0].get("eval_held", False)) else 0
    # held halo rows of the input (--input-halo resident): the rows, and in mvc the receiver's copy
    # of the partial sums' entries (at most the plain halo block's entries)
    resident = (ps.halo * f_in * 4 + (ps.halo_entries.get("plain", 0) * 8 if mode == "mvc" else 0)) if held else 0
    widths = [f_in] + [cfg.hidden] * (cfg.layers - 1) + [n_classes]
    params = sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))
    optimizer = params * 4 * 3  # gradient and two Adam moments
    act = activation_peak(ps, layers, cfg, mode, active, k)
    if active and getattr(cfg, "halo_staleness", 0):  # last epoch's rows held per layer and direction
        smooth = 2 if getattr(cfg, "staleness_smoothing", 0.0) > 0 else 1
        act += smooth * 4 * sum(lay["train_width"] * (ps.recv.get(mode, 0) + (ps.send.get(mode, 0) if lay["needs_input_grad"] else 0))
                                for lay in layers)
    total = RUNTIME_BYTES + feats + resident + ps.plan_bytes + adj + kept + params * 4 + optimizer + act
    return {"owned_rows": n, "halo_rows": ps.halo, "message_rows_in": ps.recv.get(mode, 0) if active else 0,
            "features_bytes": feats, "held_halo_bytes": resident, "adjacency_bytes": adj, "activation_bytes": act + kept,
            "optimizer_bytes": params * 4 + optimizer, "plan_bytes": ps.plan_bytes, "runtime_bytes": RUNTIME_BYTES,
            "peak_bytes": int(total)}


def halo_bytes_per_epoch(total_rows: int, layers: list[dict], cfg) -> int:
    """Bytes of halo rows all ranks send in one epoch (training forward and backward at
    ``--halo-bits``, evaluation forward at ``--eval-halo-bits``), as ``CommStats`` counts them."""
    from graphdist.exchange.quant import row_bytes
    per_row = 0
    held = input_held_why_not(cfg, 2) is None  # the first layer's held rows travel only at start-up
    for lay in layers:
        w = lay["train_width"]
        if not (held and lay.get("train_held")):
            per_row += row_bytes(w, cfg.halo_bits)
            if lay["needs_input_grad"]:
                per_row += row_bytes(w, cfg.halo_bits)
        if not (held and lay.get("eval_held")):
            per_row += row_bytes(lay["eval_width"], cfg.eval_halo_bits)
    return int(total_rows) * per_row


def plan(cfg: PlanConfig) -> dict:
    """The prediction as a ``train-gcn`` report's keys plus ``fits`` and a per-rank breakdown."""
    from graphdist.runtime import host_memory_bytes
    cfg.validate()
    if cfg.num_nodes > 0:
        parts, f_in, n_classes, k, source = stats_parts(cfg), cfg.features, cfg.classes, int(cfg.parts), "stats"
    else:
        lgs, source = _parts(cfg)
        k = len(lgs)
        f_in = int(lgs[0].x.shape[1]) if lgs[0].x is not None else 0
        n_classes = max(int(p.num_classes) for p in lgs)
        parts = [part_stats(p) for p in lgs]
        del lgs
    if cfg.hosts and (cfg.hosts > k or k % cfg.hosts):
        raise ConfigError(f"--hosts {cfg.hosts} must divide the {k} ranks (K / H ranks on every host)")
    if cfg.model not in BUILTIN_MODELS:  # its exchanges and bytes only
        from graphdist.gnn.plan_pyg import plan_pyg
        return plan_pyg(cfg, parts, f_in, n_classes, k, source)
    active = k > 1
    layers = layer_plan(cfg, f_in, n_classes, active)
    mem = cfg.mem_per_rank * GiB if cfg.mem_per_rank else host_memory_bytes() / k
    from graphdist.gnn.plan_time import codec_rates, epoch_seconds, exchange_choices, link_seconds, measured_rates
    if cfg.compute_s:  # a measured epoch stands in for the estimate: nothing to time here
        rates, codec = (0.0, 0.0), None
    else:
        rates = (cfg.spmm_rate, measured_rates()[1]) if cfg.spmm_rate else measured_rates()
        codec = codec_rates() if active else None
    choices = exchange_choices(parts, layers, cfg, active, rates, codec)
    if cfg.halo == "auto":  # as train-gcn resolves it: the fastest exact mode at --halo-bits
        import dataclasses
        fast = [c["comm/halo"] for c in choices if c["comm/halo_bits"] == cfg.halo_bits]
        cfg = dataclasses.replace(cfg, halo=fast[0] if fast else "plain")
    cfg = fewest_rounds(cfg, parts, f_in, n_classes, k, mem)  # for the mode auto chose
    halo = {m: halo_bytes_per_epoch(sum(p.send.get(m, 0) for p in parts), layers, cfg) if active else 0
            for m in ("plain", "mvc") if all(m in p.send for p in parts)}
    wire, links = link_seconds(parts, layers, cfg, cfg.halo) if active else ([(0.0, 0.0)] * k, {})
    if cfg.boundary_rate < 1.0 and active:  # the expected bytes of the sampled training exchanges
        halo[cfg.halo] = links["comm/inter_host_bytes_per_epoch"] + links["comm/intra_host_bytes_per_epoch"]
    ranks = []
    for ps, w in zip(parts, wire):
        row = rank_memory(ps, cfg, f_in, n_classes, k, cfg.halo)
        share = ps.send.get(cfg.halo, 0) / max(1, sum(p.send.get(cfg.halo, 0) for p in parts))
        row["halo_bytes_sent_per_epoch"] = int(halo.get(cfg.halo, 0) * share)
        row["time/epoch_s"] = epoch_seconds(ps, layers, cfg, cfg.halo, active, rates, w, codec)
        ranks.append(row)
    peaks = [r["peak_bytes"] for r in ranks]
    return {"mem/peak_bytes": max(peaks), "mem/peak_bytes_per_rank": peaks,
            "comm/halo_bytes_per_epoch": halo.get(cfg.halo, 0), "comm/halo_bytes_per_epoch_by_mode": halo,
            "comm/halo": cfg.halo, "comm/halo_bits": cfg.halo_bits, "comm/halo_rounds": cfg.halo_rounds, "time/epoch_s": max(r["time/epoch_s"] for r in ranks),
            "fits": bool(max(peaks) <= mem), "mem/per_rank_bytes": int(mem), "world_size": k, "source": source,
            "features": f_in, "classes": n_classes, "layers": layers, "ranks": ranks,
            "comm/choices": choices, "hosts": cfg.hosts or k, **links,
            "rates": {"spmm_entries_cols_per_s": rates[0], "dense_flops_per_s": rates[1]}}


def fewest_rounds(cfg, parts: list[PartStats], f_in: int, n_classes: int, k: int, mem: float, mode=None):
    """``cfg`` with ``halo_rounds`` resolved: the fewest of :func:`round_choices` whose largest
    rank fits ``mem`` bytes (the most when none does)."""
    import dataclasses
    for r in round_choices(cfg, k):
        c = dataclasses.replace(cfg, halo_rounds=r)
        if max(rank_memory(ps, c, f_in, n_classes, k, mode or cfg.halo)["peak_bytes"] for ps in parts) <= mem:
            return c
    return c


def _parts(cfg: PlanConfig):
    """The LocalGraph of every part: mapped from the artifact, or cut from the spec here."""
    if cfg.partition:
        from graphdist.partition.artifact import read_meta
        from graphdist.partition.parts import load_part
        k = int(read_meta(cfg.partition)["k"])
        return [load_part(cfg.partition, r) for r in range(k)], str(cfg.partition)
    from graphdist.data import load_graph
    from graphdist.partition.layout import SharedArrays, build_layout, checked_assignment
    from graphdist.partition.setup import partition_in_process
    g = load_graph(cfg.spec)
    k = int(cfg.parts or 1)
    a = checked_assignment(g, partition_in_process(g, k, cfg.method, cfg.seed), k)
    sh = SharedArrays(g, a, k)
    return [build_layout(g, a, r, k, shared=sh) for r in range(k)], f"{cfg.spec} ({cfg.method}, k={k})"


def check_fits(cfg, lg, world_size: int) -> int:
    """Before a rank trains: the exchange rounds to train in, ``cfg.halo_rounds`` or (0) the
    fewest of :data:`ROUNDS` with which this machine's ranks fit its memory (``MemAvailable``, or
    their memory cgroup's room, plus their own resident sets) and each rank its own process limit
    (``ulimit -d`` / ``-v``); when none fits, stop every rank with one line (needed and
    available GiB) instead of being killed half-way. The estimate is :func:`rank_memory` with
    the owned block taken as unsymmetric (an upper bound). Every rank decides from the same
    gathered figures."""
    import dataclasses
    import os

    from graphdist import comm
    from graphdist.memory import available_bytes, process_ceiling, resident_bytes
    cands = round_choices(cfg, world_size)
    if lg.x is None:
        return cands[0]
    ps = part_stats(lg, check_symmetry=False)
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    f_in, n_cls = int(lg.x.shape[1]), max(int(lg.num_classes), 1)
    needs = [rank_memory(ps, dataclasses.replace(cfg, halo_rounds=r), f_in, n_cls, world_size, cfg.halo)["peak_bytes"]
             for r in cands]
    rss = resident_bytes() or 0  # the machine's free memory is shared by its ranks
    seen = comm.all_gather_object([needs, available_bytes() + (local - 1) * rss, process_ceiling()])
    have = min(s[1] for s in seen)
    caps = [s[2] for s in seen if s[2] is not None]
    cap = min(caps) if caps else None
    for i, r in enumerate(cands):
        per_rank = max(s[0][i] for s in seen)
        need_all = per_rank * local
        if need_all <= have and (cap is None or per_rank <= cap):
            return r
    rounds = f" in {cands[-1]} halo rounds" if cands[-1] > 1 else ""
    more = "more --halo-rounds (0: the fewest that fit), " if cfg.halo_rounds and cands[-1] < ROUNDS[-1] else ""
    if need_all <= have:  # the machine has room; a rank's own limit (ulimit -d / -v) has not
        raise ConfigError(f"training {cfg.model} {cfg.layers}x{cfg.hidden} on this part needs about "
                          f"{per_rank / GiB:.1f} GiB per rank{rounds}, and a rank may hold only {cap / GiB:.1f} "
                          "GiB (its process memory limit, ulimit -d / -v); use more parts (ranks), a smaller --hidden, "
                          f"{more}or --halo-bits 8")
    raise ConfigError(f"training {cfg.model} {cfg.layers}x{cfg.hidden} on this part needs about "
                      f"{need_all / GiB:.1f} GiB on this machine ({local} rank(s)){rounds}, and {have / GiB:.1f} GiB "
                      f"is available; use more parts (ranks), a smaller --hidden, {more}or --halo-bits 8")
