"""What a run's costs are computed from: each part's statistics (:class:`PartStats`, from a
:class:`~graphdist.partition.local.LocalGraph`, or even parts of a graph given by its size in
``graphdist plan``'s stats mode) and what each layer of the model exchanges
(:func:`layer_plan`). Plain data, the same whether a trainer gathers them from its ranks or
``graphdist plan`` reads every part in one process."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

__all__ = ["PartStats", "part_stats", "pattern_symmetric", "stats_parts", "layer_plan", "STATS_BYTES_PER_ROW", "STATS_BYTES_PER_HALO_ROW"]

STATS_BYTES_PER_ROW = 48
"""Stats mode: bytes of a part's arrays other than features and CSR (``PartStats.plan_bytes``: ids,
labels, masks, degrees, both exchange plans) per owned row, with :data:`STATS_BYTES_PER_HALO_ROW`
an upper bound over the 28 parts of SBM (20k nodes) and R-MAT (scale 14) METIS artifacts at k = 2,
4, 8 (measured at most 0.92 of ``48 n + 32 h``; ``python benchmarks/memory_constants.py``)."""
STATS_BYTES_PER_HALO_ROW = 32
"""Stats mode: the same per halo row."""


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
    """:class:`PartStats` of a :class:`~graphdist.partition.local.LocalGraph` (the owned block's
    symmetry by :func:`pattern_symmetric`; without ``check_symmetry`` it counts as unsymmetric:
    an upper bound, and the pass is saved)."""
    n = lg.num_owned
    ptr, cols = lg.indptr.numpy(), lg.indices.numpy()
    rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(ptr))
    loops = int((cols == rows).sum())
    del rows
    own = cols < n
    own_edges = int(own.sum())
    symmetric = pattern_symmetric(ptr, cols, n) if check_symmetry else False
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


def pattern_symmetric(ptr: np.ndarray, cols: np.ndarray, n: int, chunk: int = 1 << 22) -> bool:
    """Whether the owned block of a local CSR (columns ``< n``) has the pattern of its transpose,
    without building the transpose: each entry ``(r, c)`` hashed to 64 bits (splitmix64 of
    ``r * 2^32 + c``) and summed, against the same sum over ``(c, r)``; equal multisets give
    equal sums, unequal ones a chance of about 2^-64 of equal sums. Rows in chunks of about
    ``chunk`` entries, so the memory is bounded (the check of a products-size part: seconds)."""
    ptr = np.asarray(ptr, dtype=np.int64)
    a = b = np.uint64(0)
    lo = 0
    while lo < n:
        hi = int(min(n, np.searchsorted(ptr, ptr[lo] + chunk, side="right") - 1))
        hi = max(hi, lo + 1)
        c = np.asarray(cols[ptr[lo]:ptr[hi]]).astype(np.int64)
        r = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(ptr[lo:hi + 1]))
        own = c < n
        r, c = r[own].astype(np.uint64), c[own].astype(np.uint64)
        with np.errstate(over="ignore"):
            a += _mix((r << np.uint64(32)) | c).sum(dtype=np.uint64)
            b += _mix((c << np.uint64(32)) | r).sum(dtype=np.uint64)
        lo = hi
    return bool(a == b)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def stats_parts(cfg) -> list[PartStats]:
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


def to_dict(ps: PartStats) -> dict:
    """``ps`` as JSON-able plain data (what the ranks gather); :func:`from_dict` reads it back."""
    return dataclasses.asdict(ps)


def from_dict(d: dict) -> PartStats:
    return PartStats(**d)


def layer_plan(cfg, f_in: int, n_classes: int, active: bool, held: bool) -> list[dict]:
    """Per layer: input/output widths and the width it propagates at in training and in
    evaluation, from the model's own choice (:func:`graphdist.gnn.models.layer_widths`), and
    where the first layer multiplies held halo rows (``held``: the run holds them, as
    :func:`graphdist.gnn.decide.decide` resolves ``--input-halo``)."""
    from graphdist.gnn.models import layer_widths
    held = active and held
    return layer_widths(f_in, cfg.hidden, n_classes, cfg.layers, active=active, labels=cfg.label_rate > 0,
                        held=held)
