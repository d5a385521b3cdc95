"""``partition(graph, k, method=...)``: one entry point for every partitioner.

    method     objective            balance it enforces        needs
    random     none (hash)          nodes (exact)              -
    block      none (id ranges)     weight prefix sums         -
    ldg        edge locality        caps, streamed             -
    fennel     edge locality        caps, streamed             -
    metis      undirected edge cut  one weight                 pymetis
    kaminpar   undirected edge cut  one weight                 kaminpar
    mtkahypar  halo volume (km1)    one weight                 mtkahypar
    auto       moved rows (mvc)     nodes AND edges (caps)     pymetis (else restreamed ldg)

``auto`` = multi-constraint METIS k-way (nodes and in-edges balanced at once; volume, cut and
hub-weighted cut objectives, and METIS without the hubs: a small portfolio over a few seeds),
each refined by :mod:`partitioners.refine` (rebalance into both caps, then vectorised boundary
moves) on the role bound of the rows moved with pre/post aggregation; the one with the fewest
moved rows (``moved_rows``, then ``moved_max_recv``) is refined once more on that objective,
last by single moves scored on the exact cover (:mod:`partitioners.moved`).
"""
from __future__ import annotations

import numpy as np
import torch

from partitioners.common import as_numpy, make_weights
from partitioners.errors import MissingBackendError, PartitionError

__all__ = ["partition", "METHODS", "BALANCES"]

METHODS = ("auto", "random", "block", "ldg", "fennel", "metis", "kaminpar", "mtkahypar")
"""Every method name :func:`partition` accepts."""
BALANCES = ("nodes", "edges", "both")


def _validate(graph, k, method, imbalance, balance, node_weights) -> int:
    n = int(graph.num_nodes)
    if method not in METHODS:
        raise PartitionError(f"unknown partition method '{method}' (choose from {', '.join(METHODS)})")
    if balance not in BALANCES:
        raise PartitionError(f"unknown balance '{balance}' (choose from {', '.join(BALANCES)})")
    if isinstance(k, bool) or int(k) != k:
        raise PartitionError(f"number of parts must be an integer, got {k!r}")
    k = int(k)
    if k < 1 or k > max(n, 1):
        raise PartitionError(f"number of parts k={k} must be between 1 and the number of nodes N={n}")
    if not (0.0 <= float(imbalance) <= 10.0):
        raise PartitionError(f"imbalance {imbalance} must be between 0 and 10 (0.03 = 3%)")
    if node_weights is not None:
        w = as_numpy(node_weights)
        if w.shape != (n,):
            raise PartitionError(f"node_weights has shape {tuple(w.shape)} but the graph has {n} nodes")
        if n and float(w.min()) < 0:
            raise PartitionError(f"node_weights must be >= 0 (found {float(w.min())})")
    return k


def partition(graph, k: int, *, method: str = "auto", imbalance: float = 0.03, seed: int = 0,
              balance: str | None = None, node_weights=None, hosts: int = 1, **options) -> torch.Tensor:
    """Split ``graph`` into ``k`` parts; returns ``LongTensor[N]`` of part ids in ``[0, k)``.

    ``imbalance``: allowed ``max part / mean part - 1`` per balanced quantity. ``balance``:
    what is balanced: ``nodes`` (node count, or ``node_weights``), ``edges`` (in-edges of a
    part's nodes = its SpMM work) or ``both``; default ``both`` for ``auto``, ``nodes`` for
    the others. ``seed`` makes every method deterministic. ``options`` go to the method
    (``passes``/``batch_size`` for streaming, ``preset`` for kaminpar/mtkahypar,
    ``rounds`` for auto's refinement, ``initial`` for auto's starting methods, ``seeds`` for
    the seeds tried per starting method, ``alternations`` and ``polish`` for its moved-rows
    refinement). ``hosts`` > 1: host-aware, host-major (:mod:`partitioners.hier`): ``hosts``
    groups first, then each group into ``k / hosts`` parts so that the rows crossing hosts reach
    few of the other hosts' parts; parts ``h*k/hosts ..`` are host ``h``'s ranks."""
    if balance is None:
        balance = "both" if method == "auto" else "nodes"
    k = _validate(graph, k, method, imbalance, balance, node_weights)
    n = int(graph.num_nodes)
    weights = make_weights(graph, k, float(imbalance), balance, node_weights)
    if k == 1 or n == 0:
        return torch.zeros(n, dtype=torch.int64)
    if hosts != 1:
        from partitioners.hier import hier_partition
        a = hier_partition(graph, k, hosts, flat=partition, method=method, imbalance=float(imbalance), seed=int(seed),
                           balance=balance, node_weights=node_weights, options=options)
    else:
        a = _run(graph, k, method, float(imbalance), int(seed), weights, options)
    a = np.asarray(a, dtype=np.int64)
    if a.shape != (n,) or (n and (a.min() < 0 or a.max() >= k)):  # a backend misbehaved
        raise RuntimeError(f"method {method} returned an invalid assignment (shape {a.shape})")
    return torch.from_numpy(np.ascontiguousarray(a))


def _run(graph, k, method, imbalance, seed, weights, options) -> np.ndarray:
    from partitioners import backends, metis, streaming
    n = int(graph.num_nodes)
    if method == "random":
        return streaming.random_partition(n, k, seed)
    if method == "block":
        return streaming.block_partition(n, k, weights)
    if method in ("ldg", "fennel"):
        return streaming.stream_partition(graph, k, weights, seed=seed, method=method,
                                          passes=int(options.get("passes", 1 if method == "ldg" else 3)),
                                          batch_size=options.get("batch_size"))
    if method == "metis":
        return metis.metis_partition(graph, k, weights, imbalance=imbalance, seed=seed)
    if method == "kaminpar":
        return backends.kaminpar_partition(graph, k, weights, imbalance=imbalance, seed=seed,
                                           preset=options.get("preset", "default"))
    if method == "mtkahypar":
        return backends.mtkahypar_partition(graph, k, weights, imbalance=imbalance, seed=seed,
                                            preset=options.get("preset", "deterministic"))
    return _auto(graph, k, imbalance, seed, weights, options)


def _auto(graph, k, imbalance, seed, weights, options) -> np.ndarray:
    """Portfolio: each initial partition, for each of ``seeds`` seeds, is rebalanced into every
    cap and refined on the role bound of the rows moved with pre/post aggregation
    (:mod:`partitioners.moved`, roles from the initial's own cover); among those within all
    caps the fewest moved rows win (then the smallest ``moved_max_recv``; else the least
    overloaded), and the winner is refined on the moved rows themselves (role-bound
    alternations, then ``polish`` single moves tried on the exact cover). Initials
    ``name@slack``: multi-constraint METIS (``metis-vol`` / ``metis-cut`` objective,
    ``metis-hub``: cut with edges at hubs made cheap) balancing every constraint of ``weights``
    at once to ``slack * imbalance`` (the rest is room for the refinement), ``hubsplit@frac``
    (METIS without the ``frac`` share of highest-degree nodes, hubs placed after,
    :mod:`partitioners.hubsplit`), ``mtkahypar``, or ``ldg`` / ``fennel`` (the fallback without
    pymetis). Defaults by size (directed edges): up to 1M, 3 seeds, 3 alternations and 300
    polish tries; up to 8M, 1 seed, 2 alternations, no polish; above 8M one METIS run (cut
    objective), at most 10 refinement rounds and one alternation."""
    from partitioners import backends, hubsplit, metis, streaming
    from partitioners.moved import moved_key, moved_pins, polish_moved, refine_moved, roles
    from partitioners.refine import VolumeRefiner
    e = graph.num_edges
    big = e > 8_000_000
    # METIS' volume objective is several times slower than the cut objective on large
    # power-law graphs (rmat scale 20: > 6 minutes vs 86 s); big graphs get one cut run
    # (with metis-vol@0.1 and metis-cut@0.3 as well, the SNAP graphs at k = 4, 8, 16 came out the
    # same but for gnutella k=16: 0.4% fewer rows at 2.6x the time, BENCHMARKS.md)
    default = ("metis-cut@0.3",) if big else ("metis-vol@0.3", "metis-hub@0.3", "hubsplit@0.01")
    initials = options.get("initial", default)
    if isinstance(initials, str):
        initials = tuple(initials.split(","))
    seeds = int(options.get("seeds", 3 if e <= 1_000_000 else 1))
    rounds = int(options.get("rounds", 10 if big else 50))
    best, best_key, refiner = None, None, None
    for spec in initials:
        name, _, slack = spec.partition("@")
        for s in range(seed, seed + max(seeds, 1)):
            try:
                if name in ("metis-vol", "metis-cut", "metis-hub", "metis"):
                    sl = float(slack) if slack else 0.3
                    a0 = metis.metis_partition(graph, k, weights, seed=s, imbalance=imbalance * sl,
                                               objective="vol" if name == "metis-vol" else "cut",
                                               hub_cut=name == "metis-hub")
                elif name == "hubsplit":
                    a0 = hubsplit.hubsplit_partition(graph, k, weights, frac=float(slack) if slack else 0.01,
                                                     imbalance=imbalance / 3, seed=s)
                elif name == "mtkahypar":
                    a0 = backends.mtkahypar_partition(graph, k, weights, imbalance=imbalance * (float(slack) if slack else 0.3),
                                                      seed=s)
                elif name in ("ldg", "fennel"):
                    a0 = streaming.stream_partition(graph, k, weights, seed=s, method=name, passes=3)
                else:
                    raise PartitionError(f"unknown initial method '{name}' for auto "
                                         "(metis-vol, metis-cut, metis-hub, hubsplit, mtkahypar, ldg, fennel)")
            except MissingBackendError:
                break
            refiner = VolumeRefiner(graph, k, weights, pins=moved_pins(graph, roles(graph, a0, k)))
            a = refiner.run(a0, rounds=rounds, seed=s)
            over = float((refiner.loads(a) / refiner.caps[:, None]).max())
            key = (max(over, 1.0), moved_key(graph, a, k))
            if best_key is None or key < best_key:
                best, best_key = a, key
    if best is None:  # no backend at all: streaming start
        a0 = streaming.stream_partition(graph, k, weights, seed=seed, method="ldg", passes=3)
        refiner = VolumeRefiner(graph, k, weights)
        best = refiner.run(a0, rounds=rounds, seed=seed)
    if (refiner.loads(best) <= refiner.caps[:, None] + 1e-9).all():
        alternations = 1 if big else 2 if e > 1_000_000 else 3
        best = refine_moved(graph, best, k, weights, rounds=rounds, seed=seed,
                            alternations=int(options.get("alternations", alternations)))
        tries = int(options.get("polish", 300 if e <= 1_000_000 else 0))
        if tries > 0:
            best = polish_moved(graph, best, k, weights, tries=tries)
    return best
