"""Host-aware (hierarchical) partition: split into ``hosts`` host groups first, then each group
into ``k / hosts`` parts.

Ranks on one host exchange halos through memory; ranks on different hosts through the slow link,
part to part: a row is sent once to every rank of another host that needs it. So the bytes
between hosts are the rows (raw rows and, with ``--halo mvc``, partial sums) of every ordered part
pair on different hosts (:func:`partitioners.hostsplit.rows_between_hosts`), not the edge cut.

1. Host groups: ``method`` at ``hosts`` parts; METIS both on its communication-volume objective
   and on edge cut (two candidates); and for the methods that search (:data:`ROUTE_SPLIT_METHODS`)
   Mt-KaHyPar on the rows the hosts route sends (:func:`partitioners.hostsplit.route_split`,
   up to :data:`partitioners.hostsplit.MAX_PINS` pins).
2. Each group into ``k / hosts`` parts by :func:`partitioners.hostsplit.cross_split`: Mt-KaHyPar
   km1 where a node of another host whose neighbours here fall into two parts costs two crossing
   rows (weight 100) and the rows between ranks of this host cost 1; without Mt-KaHyPar, or
   above :data:`partitioners.hostsplit.MAX_PINS` edges into a group, ``method`` on the group's
   induced subgraph.
3. The flat ``k``-way partition by the same method is a candidate too, its parts grouped onto
   hosts to cut the fewest edges between them (every grouping tried up to
   :data:`MAX_GROUPINGS`, else part ``p`` on host ``p // (k / hosts)``).

Of the candidates within every balance cap of the ``k``-way partition, the one whose rows
through the hosts route are least above the fewest any candidate reaches, in the worse of mvc
and plain (one artifact serves both), wins; then the one moving the fewest rows between hosts
(the flat one on ties). Parts are numbered host-major, as
torchrun numbers ranks (global rank = node rank * nproc + local rank): parts
``h*m .. h*m+m-1`` (``m = k / hosts``) are host group ``h``.

Balance: the host split gets half of ``imbalance``, each group's split the slack left by its
group's size under the ``k``-way caps; a group split over a cap (in-edges with ``--balance
both``: Mt-KaHyPar balances one blended weight) is moved back under the caps inside its group.
With ``--balance nodes`` the in-edges are not balanced: on SNAP p2p-Gnutella24 the host-aware
split left one rank 70% over the mean in-edges (flat METIS: 3.5%; BENCHMARKS.md, "Real hosts").
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from partitioners.common import as_numpy, in_csr
from partitioners.errors import PartitionError

__all__ = ["hier_partition", "host_groups", "induced", "host_cut", "group_parts"]

ROUTE_SPLIT_METHODS = ("auto", "metis", "kaminpar", "mtkahypar")
"""Methods whose host split has the route's own objective as one more candidate (the streaming
and trivial ones are asked for their speed or as baselines, and stay as they are)."""

MAX_GROUPINGS = 20_000
"""Most groupings of a flat partition's parts onto hosts tried one by one."""


@dataclass
class _Sub:
    """The induced subgraph of one host group (destination-row CSR, local ids): what the
    partitioners read of a graph."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])


def induced(graph, groups: np.ndarray, g: int) -> tuple[np.ndarray, _Sub]:
    """``(global ids of group g's nodes ascending, their induced subgraph)``: the edges whose
    both ends are in group ``g``, relabelled to ``0 .. len(nodes)-1``."""
    indptr, indices = in_csr(graph)
    groups = np.asarray(groups)
    nodes = np.flatnonzero(groups == g)
    loc = np.full(groups.shape[0], -1, dtype=np.int64)
    loc[nodes] = np.arange(nodes.shape[0], dtype=np.int64)
    deg = np.diff(indptr)
    dst_in = np.repeat(groups == g, deg)  # edge's destination is in g (rows ascending, so is order)
    keep = dst_in & (groups[indices] == g)
    cs = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
    per_row = cs[indptr[1:]] - cs[indptr[:-1]]
    sub_indptr = np.concatenate([[0], np.cumsum(per_row[nodes], dtype=np.int64)])
    return nodes, _Sub(sub_indptr, loc[indices[keep]])


def host_groups(assignment, k: int, hosts: int) -> np.ndarray:
    """Host group of every node of a host-major assignment (part ``p`` is on host ``p // (k / hosts)``)."""
    return as_numpy(assignment).astype(np.int64) // (k // hosts)


def host_cut(graph, hosts_of_node: np.ndarray) -> int:
    """Directed edges whose two ends are on different hosts."""
    indptr, indices = in_csr(graph)
    dst_host = np.repeat(np.asarray(hosts_of_node), np.diff(indptr))
    return int((np.asarray(hosts_of_node)[indices] != dst_host).sum())


def _groupings(k: int, hosts: int):
    """Every way to put parts 0..k-1 into ``hosts`` unordered groups of k/hosts (lists of groups)."""
    per = k // hosts

    def rec(left: tuple):
        if not left:
            yield []
            return
        first, rest = left[0], left[1:]
        for others in itertools.combinations(rest, per - 1):
            group = (first, *others)
            remaining = tuple(p for p in rest if p not in others)
            for tail in rec(remaining):
                yield [group, *tail]
    return rec(tuple(range(k)))


def _count_groupings(k: int, hosts: int) -> int:
    per, n, left = k // hosts, 1, k
    for _ in range(hosts):
        n *= math.comb(left - 1, per - 1)
        left -= per
    return n


def group_parts(graph, flat: np.ndarray, k: int, hosts: int) -> np.ndarray:
    """``flat`` renumbered host-major so that its parts' grouping onto hosts cuts the fewest
    edges between hosts (every grouping when there are at most :data:`MAX_GROUPINGS`)."""
    per = k // hosts
    if hosts == 1 or per == 1 or _count_groupings(k, hosts) > MAX_GROUPINGS:
        return flat
    indptr, indices = in_csr(graph)
    dst = np.repeat(flat, np.diff(indptr))
    between = np.bincount(flat[indices] * k + dst, minlength=k * k).reshape(k, k)  # cut matrix
    best, best_cut = None, None
    for groups in _groupings(k, hosts):
        host = np.empty(k, dtype=np.int64)
        for h, g in enumerate(groups):
            host[list(g)] = h
        cut = int(between[host[:, None] != host[None, :]].sum())
        if best_cut is None or cut < best_cut:
            best, best_cut = groups, cut
    relabel = np.empty(k, dtype=np.int64)
    for h, g in enumerate(best):
        relabel[list(g)] = h * per + np.arange(per)
    return relabel[flat]


def _host_splits(graph, hosts: int, *, flat, method: str, imbalance: float, seed: int, balance: str,
                 node_weights, options: dict) -> list:
    """Candidate ``hosts``-way groupings: by ``method``; METIS twice, on its communication-volume
    objective (the rows that cross hosts are volume, not edge cut) and on edge cut (neither wins
    on every graph: SNAP p2p-Gnutella24 vs an 8-class SBM, BENCHMARKS.md); then, for
    :data:`ROUTE_SPLIT_METHODS`, the split on the route's rows themselves
    (:func:`partitioners.hostsplit.route_split`), which neither METIS objective counts."""
    from partitioners import backends, metis
    from partitioners.common import make_weights
    from partitioners.errors import MissingBackendError
    from partitioners.hostsplit import route_split
    w = make_weights(graph, hosts, imbalance, balance, node_weights) if method in ROUTE_SPLIT_METHODS else None
    if method == "metis":
        out = [metis.metis_partition(graph, hosts, w, imbalance=imbalance, seed=seed, objective=o)
               for o in ("vol", "cut")]
    else:
        out = [as_numpy(flat(graph, hosts, method=method, imbalance=imbalance, seed=seed, balance=balance,
                             node_weights=node_weights, **options)).astype(np.int64)]
    if w is not None:
        try:
            out.append(route_split(graph, hosts, backends.single_weight(w), imbalance=imbalance, seed=seed))
        except (MissingBackendError, ValueError):  # no Mt-KaHyPar, or a graph too large for its lists
            pass
    return out


def _inner(graph, top: np.ndarray, h: int, per: int, w, *, flat, method: str, imbalance: float, seed: int,
           balance: str, node_weights, options: dict) -> np.ndarray:
    """Parts ``0 .. per-1`` of host group ``h``'s nodes: the cross-net split of
    :mod:`partitioners.hostsplit` (Mt-KaHyPar, one blended weight), moved back under every cap of
    the k-way weights ``w`` inside the group where it is over one; without Mt-KaHyPar ``method``
    on the induced subgraph."""
    from partitioners.backends import single_weight
    from partitioners.common import Weights
    from partitioners.errors import MissingBackendError
    from partitioners.hostsplit import cross_split
    from partitioners.refine import VolumeRefiner
    nodes, sub = induced(graph, top, h)
    nw = None if node_weights is None else node_weights[nodes]
    wg = Weights([x[nodes] for x in w.w], w.names, w.caps)  # in-edges of the whole graph, k-way caps
    try:
        a = cross_split(graph, top, h, per, single_weight(wg), imbalance=imbalance, seed=seed)
    except (MissingBackendError, ValueError):  # no Mt-KaHyPar, or a group too large for it
        return as_numpy(flat(sub, per, method=method, imbalance=imbalance, seed=seed, balance=balance,
                             node_weights=nw, **options)).astype(np.int64)
    refiner = VolumeRefiner(sub, per, wg)
    if (refiner.loads(a) > refiner.caps[:, None]).any():
        refiner.rebalance(a)
    return a


def hier_partition(graph, k: int, hosts: int, *, flat, method: str, imbalance: float, seed: int,
                   balance: str, node_weights=None, options: dict | None = None) -> np.ndarray:
    """``int64[N]`` part of every node, host-major: ``hosts`` groups by ``method`` (volume
    objective) on the whole graph, then each group into ``k // hosts`` parts by the cross-net
    split; or the flat ``k``-way partition grouped onto hosts, whichever moves fewer rows between
    hosts (:func:`partitioners.hostsplit.rows_between_hosts`) within the balance limits.

    ``flat``: the partitioner of one level, ``flat(graph, k, method=..., ...)`` as
    :func:`partitioners.partition` without ``hosts`` (the caller's, so this module stays below
    it)."""
    from partitioners.common import loads, make_weights
    from partitioners.hostsplit import rows_between_hosts
    if isinstance(hosts, bool) or int(hosts) != hosts or hosts < 1:
        raise PartitionError(f"hosts must be a positive integer, got {hosts!r}")
    hosts = int(hosts)
    if k % hosts:
        raise PartitionError(f"--parts {k} is not a multiple of --hosts {hosts} "
                             f"(each host runs the same number of ranks)")
    options = dict(options or {})
    n = int(graph.num_nodes)
    per = k // hosts
    half = float(imbalance) / 2
    nw = None if node_weights is None else as_numpy(node_weights)
    kw = dict(flat=flat, method=method, seed=seed, balance=balance, node_weights=nw, options=options)
    w = make_weights(graph, k, float(imbalance), balance, nw)
    caps = np.asarray(w.caps)
    cands = []
    for top in _host_splits(graph, hosts, imbalance=half, **kw):
        out = top if per == 1 else np.empty(n, dtype=np.int64)
        for h in range(hosts if per > 1 else 0):
            size = int((top == h).sum())
            if size < per:
                raise PartitionError(f"host group {h} holds {size} nodes, fewer than its {per} parts "
                                     f"(--parts {k} --hosts {hosts} on {n} nodes)")
            # the group's own slack: its parts may fill the k-way caps, whatever the host split left
            load = loads(w, (top == h).astype(np.int64), 2)[:, 1]
            inner_imb = max(float((caps * per / np.maximum(load, 1e-12)).min()) - 1.0, 0.0)
            out[top == h] = h * per + _inner(graph, top, h, per, w, imbalance=min(inner_imb, 10.0) * 0.999, **kw)
        if not (loads(w, out, k) > caps[:, None]).any():  # within every balance limit
            cands.append(out)
    grouped = group_parts(graph, as_numpy(flat(graph, k, method=method, imbalance=imbalance, seed=seed,
                                               balance=balance, node_weights=nw, **options)).astype(np.int64),
                          k, hosts)
    cands.append(grouped)  # last: the flat one wins ties
    # what crosses with --halo-route hosts first, then what the direct exchange would send; one
    # artifact serves mvc and plain runs, so first the candidate whose worse mode is least above
    # that mode's fewest (SNAP facebook_combined, K = 8: the fewest mvc rows, 97, came with 480
    # plain rows against another candidate's 196 plain and 108 mvc)
    keys = [rows_between_hosts(graph, a, k, hosts, routed=True) + rows_between_hosts(graph, a, k, hosts)
            for a in cands]
    return cands[min(range(len(cands)), key=lambda i: (_worse_mode(keys, i), keys[i], i != len(cands) - 1))]


def _worse_mode(keys: list[tuple], i: int) -> float:
    """Candidate ``i``'s rows through the route over the fewest of any candidate, in the mode
    (mvc: ``keys[.][0]``, plain: ``keys[.][1]``) where that ratio is larger."""
    return max(keys[i][j] / max(min(key[j] for key in keys), 1) for j in (0, 1))
