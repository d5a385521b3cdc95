"""What one training step of a layout moves and how long it takes: the model behind
``--sparse-groups auto`` (:mod:`embeddings.auto`), plain numbers in and out (no process group).

A *layout* is 1D (``G = 1``: every table sharded over all W ranks) or 2D (``G`` replicas of an
S = W/G-rank sharding group, ``hosts`` or ``torchrec`` rank layout, :mod:`embeddings.twod`).
Ranks are host-major (L ranks per host, H = W/L hosts). One step of a layout is the
collectives torchrec and graphdist run (counted on gloo with torch's profiler, one step of
each sharding type)::

    input dist     per sharding type of the fused tables, inside each sharding group (S > 1):
                   3 all-to-alls (splits, lengths, ids), ids and lengths as int64
    output dist    table_wise / column_wise: 1 all-to-all of the pooled rows (fp32), and 1 of
                   their gradients in backward; row_wise / table_row_wise: gloo's reduce-scatter
                   (an all-reduce of the group's whole [S x b, D] pooled block) and, backward, an
                   all-gather of the gradients
    dense layers   DDP over all W ranks: 1 all-reduce of the dense gradients (+1 when
                   data_parallel tables are present: theirs)
    replica sync   with G > 1, every --sync-every steps, in every replica group (G ranks): an
                   all-gather of the row counts, one of the touched row ids (padded to the
                   largest), an all-reduce of those rows' weights and optimizer state

Bytes: an all-to-all moves each pair's bytes directly; an all-reduce (gloo's ring, in group
rank order) moves 2(n-1)/n of the buffer over every edge of the ring, an all-gather (n-1)
chunks. A byte crosses between hosts when its two ranks are on different hosts.

All the groups of one phase run at once, so a host's link carries all of them. The rates and
latencies are measured when the job starts (:func:`embeddings.auto.measure`); a gloo exchange
carries its two directions one after the other on a capped link (BENCHMARKS.md, "Real hosts"),
so rates count sent + received bytes together.

A rank's collectives are blocking (gloo): the link between hosts carries a step's bytes while
the ranks wait on them, so its time adds to the ranks' own work::

    step = compute + latency + within hosts + sync work + between hosts + sync between hosts

    latency       = collectives of 2 or more ranks x the measured latency of one of their kind
                    (inside a step a collective waits for the slowest rank to arrive, whatever
                    the group's size: on the test bed a 2-rank group's all-to-all was no cheaper)
    within hosts  = sum over phases of the busiest rank's bytes inside its host / the intra rate
    between hosts = sum over the other phases of the busiest host link's bytes / the inter rate
    sync between hosts = the sync's bytes on the busiest host link / the ring rate (its edges
                  carry both directions at once)
    sync work     = rows the busiest rank's replica sync averages x seconds per row (measured)

(Until 2026-12-06 the step was the larger of the ranks' work and the link's time, plus the
sync: the test bed's token bucket was then 256 KiB, 21 ms of line rate at 0.1 Gbit/s, which
filled while the link was idle and passed the head of every exchange at once, and the sum
overestimated the measured step 1.3-2.5x. With the bucket at 1 ms of line rate, as a physical
link sends, the sum came within 25% of the measured step in 31 of 48 estimates of the
default-size cells on a quiet box (three rounds of the four cells), the larger of the two in 21:
BENCHMARKS.md, "DLRM where 2D matters".)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from embeddings.sharding import EBC_PATH, ID_BYTES, optimizer_state_floats

A2A_TYPES = ("table_wise", "column_wise")
"""Output dist by all-to-all (pooled rows, their gradients back)."""
RS_TYPES = ("row_wise", "table_row_wise")
"""Output dist by reduce-scatter (gloo: an all-reduce) and all-gather."""


@dataclass
class GroupTraffic:
    """One step of a plan over one S-rank sharding group (group ranks 0..S-1)."""

    size: int
    """S."""
    a2a: np.ndarray
    """[S, S] bytes group rank r sends to q per step in all-to-alls (ids and lengths forward;
    table_wise/column_wise pooled rows forward and gradients backward)."""
    reduce: list = field(default_factory=list)
    """``(group ranks, bytes)`` per row-wise block: the pooled all-reduce (gloo's reduce-scatter)
    of an ``[S x b, D]`` fp32 block; its all-gather backward moves ``bytes / n`` per rank."""
    types: tuple = ()
    """Sharding types of the fused (sharded) tables."""
    data_parallel_bytes: int = 0
    """Gradients of the data_parallel tables, all-reduced over all W ranks with the dense ones."""
    touched: list = field(default_factory=list)
    """Per group rank: ``(rows one replica's part of the batch looks up, rows the whole global
    batch looks up, bytes of one row with its optimizer state)`` summed over the rank's shards,
    as ``(own, union, row_bytes)`` lists per shard."""


def plan_traffic(plan, num_embeddings: list[int], dim: int, size: int, group_batch: int, stats,
                 optimizer: str, replicas: int = 1, sync_every: int = 1) -> GroupTraffic:
    """The traffic of ``plan`` (made for ``size`` ranks training on ``group_batch`` samples
    per step; b = group_batch / size per rank), from the data's id statistics (``stats``,
    :class:`~embeddings.sharding.IdStats`). ``replicas`` and ``sync_every`` size the touched
    rows of a replica sync (a replica trains on ``group_batch`` samples, the global batch is
    ``replicas`` times that)."""
    mp = plan.plan[EBC_PATH]
    S, b = size, group_batch / size
    out = GroupTraffic(size=S, a2a=np.zeros((S, S)), touched=[[] for _ in range(S)])
    types, rw_cols = set(), {}
    for i, n in enumerate(num_embeddings):
        ps = mp[f"t_{i}"]
        st, p = ps.sharding_type, stats.pooling[i]
        if st == "data_parallel":
            out.data_parallel_bytes += 4 * int(n) * dim
            continue
        types.add(st)
        shards = [(s.placement.rank(), s.shard_offsets, s.shard_sizes) for s in ps.sharding_spec.shards]
        for r, off, (rows, cols) in shards:
            state = optimizer_state_floats(optimizer, rows, cols) / max(rows, 1)
            lo, hi = off[0], off[0] + rows
            steps = sync_every * group_batch
            out.touched[r].append((stats.distinct(i, lo, hi, steps), stats.distinct(i, lo, hi, steps * replicas),
                                   4.0 * (cols + state)))
        if S == 1:
            continue
        if st in A2A_TYPES:
            for o, _, (_, d) in shards:
                for r in range(S):
                    if r != o:  # ids (and one length per sample) to the owner, pooled rows back,
                        out.a2a[r, o] += b * (p + 1) * ID_BYTES + b * 4 * d  # gradients to it
                        out.a2a[o, r] += b * 4 * d
        else:
            group = tuple(sorted(s[0] for s in shards))
            rw_cols[group] = rw_cols.get(group, 0) + dim
            for q, off, (rows, _) in shards:
                frac = stats.row_fraction(i, off[0], off[0] + rows)
                for r in group:
                    if r != q:
                        out.a2a[r, q] += b * (p * frac + 1) * ID_BYTES
    out.reduce = [(g, len(g) * b * 4 * cols) for g, cols in sorted(rw_cols.items())]
    out.types = tuple(sorted(types))
    return out


@dataclass(frozen=True)
class Links:
    """What a step costs besides its bytes, and the rates of the links (measured at start-up)."""

    compute_s: float
    """One rank's training step (forward, backward, fused update) at the per-rank batch, with
    every table local and nothing exchanged."""
    a2a_latency_s: float
    """A small all-to-all over all W ranks."""
    allreduce_latency_s: float
    """A small all-reduce over all W ranks."""
    intra_bytes_per_s: float
    """Bytes per second one rank exchanges with the ranks of its own host (sent + received)."""
    inter_bytes_per_s: float
    """Bytes per second one host's link carries (sent + received, all its ranks together)."""
    sync_row_s: float = 0.0
    """Seconds of a replica sync's own work per row it averages (finding the touched rows,
    gathering and writing back the row and its optimizer state)."""
    ring_bytes_per_s: float = 0.0
    """Bytes per second one host's link carries (sent + received) when every rank sends to one
    rank of another host and receives from another, as a ring's edges do (0: as an all-to-all)."""


@dataclass
class Phase:
    """The collectives of one kind that run at the same time (one per group)."""

    name: str
    collectives: float
    """How many of them one step runs (per step: a sync every N steps counts 1/N)."""
    kind: str
    """``a2a`` or ``allreduce`` (all-gathers are timed as all-to-alls)."""
    ranks: int
    """Ranks in each group (n)."""
    between: np.ndarray
    """[H] bytes per step each host's link carries (sent + received)."""
    within: np.ndarray
    """[W] bytes per step each rank exchanges inside its host (sent + received)."""
    rows: float = 0.0
    """Rows per step the busiest rank's replica sync gathers, averages and writes back."""
    serial: bool = False
    """The replica sync: after the update, its edges between hosts carrying both directions at
    once (timed at the ring rate, not the all-to-all one) and reported apart
    (``sync_between_hosts_s``)."""


class Hosts:
    """Ranks host-major: rank r on host r // L. Accumulates a phase's bytes."""

    def __init__(self, world: int, local: int):
        self.world, self.local = world, max(1, min(local or world, world))
        self.hosts = max(1, world // self.local)
        self.between, self.within = np.zeros(self.hosts), np.zeros(world)

    def send(self, r: int, q: int, nbytes: float) -> None:
        hr, hq = r // self.local, q // self.local
        if hr != hq:
            self.between[hr] += nbytes
            self.between[hq] += nbytes
        else:
            self.within[r] += nbytes
            self.within[q] += nbytes

    def ring(self, ranks, per_edge: float) -> None:
        n = len(ranks)
        if n > 1:
            for i in range(n):
                self.send(ranks[i], ranks[(i + 1) % n], per_edge)

    def phase(self, name: str, collectives: float, kind: str, ranks: int, rows: float = 0.0,
              serial: bool = False) -> Phase:
        p = Phase(name, collectives, kind, ranks, self.between, self.within, rows, serial)
        self.between, self.within = np.zeros(self.hosts), np.zeros(self.world)
        return p


def phases(tr: GroupTraffic, layout, local: int, dense_bytes: int, sync_every: int = 1) -> list[Phase]:
    """The phases of one step of the layout (:class:`embeddings.twod.Layout`) whose sharding
    groups each carry ``tr``; ``dense_bytes``: the dense layers' gradients (fp32)."""
    W, G, S = layout.world, layout.groups, layout.size
    h, out = Hosts(W, local), []
    if S > 1 and tr.types:
        for g in range(G):
            members = layout.sharding_group(g)
            for j in range(S):
                for k in range(S):
                    if tr.a2a[j, k]:
                        h.send(members[j], members[k], tr.a2a[j, k])
        n_a2a = sum(5 if t in A2A_TYPES else 3 for t in tr.types)
        out.append(h.phase("all-to-all", n_a2a, "a2a", S))
        if tr.reduce:
            for g in range(G):
                members = layout.sharding_group(g)
                for ranks, nbytes in tr.reduce:
                    n = len(ranks)
                    h.ring([members[j] for j in ranks], 2 * (n - 1) / n * nbytes)
            out.append(h.phase("reduce-scatter", 1, "allreduce", S))
            for g in range(G):
                members = layout.sharding_group(g)
                for ranks, nbytes in tr.reduce:
                    n = len(ranks)
                    h.ring([members[j] for j in ranks], (n - 1) * nbytes / n)
            out.append(h.phase("all-gather", 1, "a2a", S))
    h.ring(list(range(W)), 2 * (W - 1) / W * (dense_bytes + tr.data_parallel_bytes))
    out.append(h.phase("dense all-reduce", 2 if tr.data_parallel_bytes else 1, "allreduce", W))
    if G > 1:
        out += _sync_phases(tr, layout, h, sync_every)
    return out


def _sync_phases(tr: GroupTraffic, layout, h: Hosts, sync_every: int) -> list[Phase]:
    """The replica sync of the touched rows (every ``sync_every`` steps, counted per step)."""
    G, S = layout.groups, layout.size
    for j in range(S):
        own = sum(s[0] for s in tr.touched[j])
        h.ring(layout.replica_group(j), (G - 1) * own * ID_BYTES / sync_every)
    keys = h.phase("sync: touched row ids", 2 / sync_every, "a2a", G, serial=True)
    for j in range(S):
        nbytes = sum(s[1] * s[2] for s in tr.touched[j])
        h.ring(layout.replica_group(j), 2 * (G - 1) / G * nbytes / sync_every)
    rows = max(sum(s[1] for s in tr.touched[j]) for j in range(S)) / sync_every
    return [keys, h.phase("sync: touched rows", 1 / sync_every, "allreduce", G, rows, serial=True)]


def estimate(ph: list[Phase], links: Links, world: int) -> dict:
    """Seconds of one step, split (see the module docstring), and its bytes per step."""
    latency = inter = serial = intra = rows = 0.0
    for p in ph:
        lat = links.a2a_latency_s if p.kind == "a2a" else links.allreduce_latency_s
        latency += p.collectives * lat if p.ranks > 1 else 0.0
        busiest = float(p.between.max()) if p.between.size else 0.0
        if p.serial and busiest:
            serial += busiest / (links.ring_bytes_per_s or links.inter_bytes_per_s)
        elif busiest and links.inter_bytes_per_s:
            inter += busiest / links.inter_bytes_per_s
        intra += float(p.within.max()) / links.intra_bytes_per_s if links.intra_bytes_per_s else 0.0
        rows += p.rows
    sync = rows * links.sync_row_s
    step = links.compute_s + latency + intra + sync + inter + serial
    between = sum((p.between for p in ph), np.zeros(1)) if ph else np.zeros(1)
    within = sum((p.within for p in ph), np.zeros(1)) if ph else np.zeros(1)
    return {"step_s": step, "compute_s": links.compute_s, "latency_s": latency, "within_hosts_s": intra,
            "sync_work_s": sync, "between_hosts_s": inter, "sync_between_hosts_s": serial,
            "between_hosts_bytes_per_step": int(round(float(between.sum()) / 2)),
            "busiest_host_bytes_per_step": int(round(float(between.max()))),
            "within_host_bytes_per_step": int(round(float(within.sum()) / 2))}
