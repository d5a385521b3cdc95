"""The splits of a host-aware partition by the rows that cross hosts: the graph into host groups
by the rows the hosts route sends (:func:`route_split`, one candidate of
:mod:`partitioners.hier`), and each host group into ``k / hosts`` parts so that the rows crossing
hosts are sent to as few of the other hosts' parts as possible (:func:`cross_split`, below).

Ranks exchange halo rows part to part: a row ``u`` of host 0 whose out-neighbours on host 1 lie
in two of host 1's parts crosses the link twice (once per receiving rank), and with ``--halo
mvc`` so do the partial sums of a destination ``v`` whose in-neighbours on host 0 lie in two of
its parts. Splitting a host group on its induced subgraph alone (by edge cut) ignores that, and
the rows between hosts end up well above what the host split itself needs (SNAP p2p-Gnutella24,
METIS, K = 4, H = 2: 16,309 plain rows per layer between hosts after the flat split, against
9,342 distinct (row, other host) pairs of its volume host split; BENCHMARKS.md, "Real hosts").

So each group ``h`` is split by Mt-KaHyPar's km1 (connectivity - 1) on a hypergraph of ``h``'s
nodes with two kinds of nets:

- a **cross net** per node ``u`` on another host: ``u``'s out-neighbours in ``h``, weight
  :data:`CROSS_WEIGHT` (its connectivity - 1 = the extra copies of ``u`` sent across hosts, and
  for ``mvc`` the extra partial sums; the graph's edges are symmetric here);
- a **local net** per node ``v`` of ``h``: ``v`` and its out-neighbours in ``h``, weight 1 (the
  rows between ranks of one host, through memory: cheaper, not free).

Single-pin nets are never cut and are left out. Without Mt-KaHyPar the caller splits the
induced subgraph by its own method instead.
"""
from __future__ import annotations

import numpy as np

from partitioners.common import as_numpy, in_csr

__all__ = ["CROSS_WEIGHT", "MAX_PINS", "cross_split", "route_split", "rows_between_hosts"]

CROSS_WEIGHT = 100
"""Weight of a cross net against a local net's 1: a row crossing hosts counts as much as 100
rows between ranks of one host (the inter-host rows come first, the local ones break ties)."""


MAX_PINS = 4_000_000
"""Most pins (directed edges into the group) a cross-net split is tried on: the nets are handed
to Mt-KaHyPar as Python lists, and Mt-KaHyPar did not finish a 2M-edge graph within 300 s here
(BENCHMARKS.md, partitioners); larger groups are split by the method on their induced subgraph."""


def _nets(src: np.ndarray, dst: np.ndarray, weight: int):
    """One net per distinct ``src``: its ``dst`` set, as ``(list of int64 pin arrays, list of
    weights)``; nets of one pin dropped."""
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    if not src.size:
        return [], []
    starts = np.flatnonzero(np.r_[True, src[1:] != src[:-1]])
    nets = [x for x in (np.unique(x) for x in np.split(dst, starts[1:])) if x.size > 1]
    return nets, [int(weight)] * len(nets)


def _dealt(vwgt: np.ndarray, parts: int) -> np.ndarray:
    """Nodes dealt to ``parts`` in turn, heaviest first: a balanced split where nothing connects them."""
    return np.argsort(np.argsort(-np.asarray(vwgt), kind="stable"), kind="stable") % parts


def cross_split(graph, top: np.ndarray, h: int, per: int, vwgt: np.ndarray, *, imbalance: float,
                seed: int) -> np.ndarray:
    """``int64[len(group)]`` part (``0 .. per-1``) of every node of host group ``h`` (ascending
    global id), by Mt-KaHyPar km1 on the cross and local nets (module docstring); ``vwgt``: the
    integer balance weight of the group's nodes. Raises ``MissingBackendError`` without it, and
    ``ValueError`` above :data:`MAX_PINS`."""
    from partitioners.backends import mtkahypar_handle
    mtkahypar_handle()  # no Mt-KaHyPar: said before any work
    top = np.asarray(top)
    indptr, indices = in_csr(graph)
    n = top.shape[0]
    nodes = np.flatnonzero(top == h)
    loc = np.full(n, -1, dtype=np.int64)
    loc[nodes] = np.arange(nodes.size, dtype=np.int64)
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))  # edge src -> dst (in-CSR rows)
    src = np.asarray(indices, dtype=np.int64)
    into = top[dst] == h
    if int(into.sum()) > MAX_PINS:
        raise ValueError(f"host group {h} has {int(into.sum()):,} edges into it, above {MAX_PINS:,}")
    cross = into & (top[src] != h)
    local = into & (top[src] == h)
    nets, wts = _nets(src[cross], loc[dst[cross]], CROSS_WEIGHT)
    own = np.arange(nodes.size, dtype=np.int64)  # a local net holds its own node too
    ln, lw = _nets(np.r_[loc[src[local]], own], np.r_[loc[dst[local]], own], 1)
    return _km1(int(nodes.size), per, nets + ln, wts + lw, vwgt, imbalance=imbalance, seed=seed)


def route_split(graph, hosts: int, vwgt: np.ndarray, *, imbalance: float, seed: int) -> np.ndarray:
    """``int64[N]`` host (``0 .. hosts-1``) of every node by Mt-KaHyPar km1 on one net per node
    ``u``: ``u`` and every node that reads ``u``'s row (its out-neighbours). A net's connectivity - 1
    is the number of other hosts ``u``'s row is sent to by ``--halo-route hosts``, so the km1 it
    minimises is exactly the plain rows crossing hosts per layer through the route
    (:func:`rows_between_hosts` ``routed=True``), where METIS's volume objective counts them per
    part and its edge cut counts edges. On SNAP facebook_combined at 2 hosts: 196 rows against
    METIS's 360 (volume) and 480 (cut); p2p-Gnutella24 8,897 against 9,342 and 10,519.
    ``vwgt``: the integer balance weight of every node. Raises ``MissingBackendError`` without
    Mt-KaHyPar and ``ValueError`` above :data:`MAX_PINS` pins."""
    from partitioners.backends import mtkahypar_handle
    indptr, indices = in_csr(graph)
    n = int(indptr.shape[0] - 1)
    if int(indices.shape[0]) + n > MAX_PINS:
        raise ValueError(f"{int(indices.shape[0]) + n:,} pins (edges + nodes), above {MAX_PINS:,}")
    mtkahypar_handle()  # no Mt-KaHyPar: said before any work
    own = np.arange(n, dtype=np.int64)
    dst = np.repeat(own, np.diff(indptr))  # in-CSR rows: edge src -> dst, dst reads src's row
    nets, wts = _nets(np.r_[np.asarray(indices, dtype=np.int64), own], np.r_[dst, own], 1)
    return _km1(n, hosts, nets, wts, vwgt, imbalance=imbalance, seed=seed)


def _km1(n: int, parts: int, nets: list, wts: list, vwgt: np.ndarray, *, imbalance: float,
         seed: int) -> np.ndarray:
    """``int64[n]`` part of every node by Mt-KaHyPar's deterministic km1 on ``nets`` (pin arrays)
    of weights ``wts``; without a net of two pins, the nodes dealt to the parts in turn."""
    from partitioners.backends import mtkahypar_handle
    if not nets:  # nothing connects the nodes: any balanced split
        return _dealt(vwgt, parts)
    mtkahypar, mtk = mtkahypar_handle()
    ctx = mtk.context_from_preset(mtkahypar.PresetType.DETERMINISTIC)
    ctx.set_partitioning_parameters(int(parts), float(imbalance), mtkahypar.Objective.KM1)
    ctx.logging = False
    mtkahypar.set_seed(int(seed))
    hg = mtk.create_hypergraph(ctx, n, len(nets), nets, [int(x) for x in vwgt], wts)
    return np.asarray(hg.partition(ctx).get_partition(), dtype=np.int64)


def rows_between_hosts(graph, assignment, k: int, hosts: int, routed: bool = False) -> tuple[int, int]:
    """``(rows moved between hosts per layer with pre/post aggregation, plain halo rows between
    hosts per layer)`` of a host-major assignment (part ``p`` on host ``p // (k / hosts)``).

    ``routed=False``: as the direct exchange sends them, the part pairs on different hosts only,
    each ordered pair counted (a row two parts of a host need crosses twice; the cover per part
    pair). ``routed=True``: as ``--halo-route hosts`` sends them on an artifact of ``graphdist
    partition --hosts`` (whose cover across hosts is per sending part and receiving host,
    :func:`partitioners.cover.halo_cover`): a raw row crosses to a host once, a partial sum once."""
    from partitioners.cover import halo_cover
    a = as_numpy(assignment).astype(np.int64)
    per = k // hosts
    c = halo_cover(graph, a, k, hosts=hosts if routed else 1)
    raw = (a[c.raw_node] // per) != (c.raw_part // per)
    pre = (a[c.pre_node] // per) != (c.pre_part // per)
    n_pre = int((c.pre_cover & pre).sum())
    if not routed:
        return int((c.raw_cover & raw).sum()) + n_pre, int(raw.sum())
    host_of = c.raw_part // per
    moved = np.unique(c.raw_node[c.raw_cover & raw] * hosts + host_of[c.raw_cover & raw]).size
    plain = np.unique(c.raw_node[raw] * hosts + host_of[raw]).size
    return int(moved) + n_pre, int(plain)
