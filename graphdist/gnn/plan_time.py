"""The epoch-time estimate of ``graphdist plan``: sparse products and linears at rates measured
on this machine, halo bytes over a link of ``--link-gbps`` (plus ``--link-latency-us`` per
exchange), per host with ``--hosts`` (:func:`link_seconds`: the links between hosts and within
them); and the same estimate for every exchange a run could use (:func:`exchange_choices`)."""
from __future__ import annotations

from graphdist.gnn.plan import PartStats


def measured_rates() -> tuple[float, float]:
    """``(sparse entries x columns per second, dense flops per second)`` of this machine, from a
    short CSR product and a matrix product (about a quarter second)."""
    import time

    import torch
    gen = torch.Generator().manual_seed(0)
    n, deg, w = 100_000, 16, 64
    crow = torch.arange(0, n * deg + 1, deg, dtype=torch.int32)
    col = torch.randint(0, n, (n * deg,), generator=gen, dtype=torch.int32)
    a = torch.sparse_csr_tensor(crow, col, torch.rand(n * deg, generator=gen), size=(n, n), check_invariants=False)
    x, out = torch.rand(n, w, generator=gen), torch.empty(n, w)
    best_s = best_d = float("inf")
    m = torch.rand(20_000, 128, generator=gen)
    wt = torch.rand(128, 128, generator=gen)
    for _ in range(3):
        t = time.perf_counter()
        torch.addmm(out, a, x, beta=0, out=out)
        best_s = min(best_s, time.perf_counter() - t)
        t = time.perf_counter()
        m @ wt
        best_d = min(best_d, time.perf_counter() - t)
    return n * deg * w / best_s, 2 * 20_000 * 128 * 128 / best_d


def codec_rates() -> dict[int, float]:
    """``{bits: values per second}`` one process encodes and decodes (:mod:`graphdist.halo.quant`)
    at each quantised width, from a 32768 x 64 block (best of three)."""
    import time

    import torch

    from graphdist.halo import quant
    x = torch.randn(32768, 64, generator=torch.Generator().manual_seed(0))
    out = {}
    for bits in quant.BITS[1:]:
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            quant.decode(quant.encode(x, bits), bits, x.shape[1])
            best = min(best, time.perf_counter() - t)
        out[bits] = x.numel() / best
    return out


def compute_seconds(ps: PartStats, layers: list[dict], cfg, mode: str, active: bool,
                    rates: tuple[float, float]) -> float:
    """One rank's sparse products at ``rates[0]`` and linears at ``rates[1]`` in an epoch
    (training forward and backward, evaluation forward; elementwise work not counted)."""
    nnz = ps.own_edges + (ps.n if cfg.model == "gcn" else 0)
    if active:
        nnz += ps.halo_entries.get(mode, 0) + (ps.send_entries if mode == "mvc" else 0)
    sparse = dense = 0.0
    for i, lay in enumerate(layers):
        fi, fo = lay["f_in"], lay["f_out"]
        back = lay["needs_input_grad"]
        sparse += nnz * lay["train_width"] * (2 if back else 1)
        if not (i == 0 and lay["eval_reuse"] and (not active or lay.get("eval_held"))):
            sparse += nnz * lay["eval_width"]
        dense += 2 * ps.n * fi * fo * (3 if i > 0 else 2) + 2 * ps.n * fi * fo
    return sparse / rates[0] + dense / rates[1]


def epoch_seconds(ps: PartStats, layers: list[dict], cfg, mode: str, active: bool, sent_bytes: float,
                  rates: tuple[float, float], wire_s: float | None = None) -> float:
    """:func:`compute_seconds` plus the halo bytes over the link and its latency once per
    exchange and round (no overlap assumed). ``wire_s``: the link's seconds from
    :func:`link_seconds` (hosts and their shared links); without it the rank has a link of its
    own, which carries its sent and received bytes one after the other, as a gloo all-to-all
    over a real capped link does (``graphdist.halo.link``, BENCHMARKS.md "Real hosts"): the
    received bytes are the sent ones scaled by the rank's received / sent rows."""
    rounds = max(1, int(getattr(cfg, "halo_rounds", 1) or 1))  # the link's latency is paid once a round
    wait = exchanges_per_epoch(layers) * rounds * cfg.link_latency_us * 1e-6 if active else 0.0
    if wire_s is None:
        send_rows, recv_rows = ps.send.get(mode, 0), ps.recv.get(mode, 0)
        wire_bytes = sent_bytes * (1.0 + recv_rows / send_rows) if send_rows else 0.0
        wire_s = wire_bytes * 8 / (cfg.link_gbps * 1e9)
    return compute_seconds(ps, layers, cfg, mode, active, rates) + (wire_s if active else 0.0) + wait


def peer_rows(ps: PartStats, mode: str, k: int, r: int) -> tuple[list, list]:
    """Rank ``r``'s message rows per layer sent to and received from each rank: the part's own
    lists, or (stats mode, none recorded) its rows spread evenly over the other ranks."""
    if mode in ps.send_to:
        return ps.send_to[mode], ps.recv_from[mode]
    return ([0 if p == r else ps.send.get(mode, 0) / (k - 1) for p in range(k)],
            [0 if p == r else ps.recv.get(mode, 0) / (k - 1) for p in range(k)])


def link_seconds(parts: list[PartStats], row_bytes: float, cfg, mode: str) -> tuple[list[float], dict]:
    """Per rank the seconds its halo bytes spend on the links in an epoch, and the bytes and
    seconds per link class. Ranks are host-major on ``cfg.hosts`` hosts (0: one rank per host);
    ``row_bytes`` is what one message row costs per epoch (:func:`halo_bytes_per_epoch` of one
    row). A host's link carries the bytes its ranks send to and receive from other hosts, one
    after the other (as a gloo all-to-all over a capped link does), at ``cfg.link_gbps``; bytes
    between ranks of one host go at ``cfg.intra_gbps`` (0: not charged). An all-to-all posts
    every peer at once, so a rank waits for the slower of its host's link and its own intra-host
    traffic.

    Keys (bytes are what ranks send, summed over ranks; seconds the slowest host or rank):
    ``comm/inter_host_bytes_per_epoch``, ``comm/intra_host_bytes_per_epoch``,
    ``time/inter_host_s_per_epoch``, ``time/intra_host_s_per_epoch``."""
    k = len(parts)
    hosts = int(getattr(cfg, "hosts", 0) or 0) or k
    per = k // hosts
    inter = [0.0] * k  # sent + received across hosts, per rank
    intra = [0.0] * k
    sent_inter = sent_intra = 0.0
    for r, ps in enumerate(parts):
        to, frm = peer_rows(ps, mode, k, r)
        for p in range(k):
            if p == r:
                continue
            if r // per == p // per:
                intra[r] += (to[p] + frm[p]) * row_bytes
                sent_intra += to[p] * row_bytes
            else:
                inter[r] += (to[p] + frm[p]) * row_bytes
                sent_inter += to[p] * row_bytes
    host_s = [sum(inter[h * per:(h + 1) * per]) * 8 / (cfg.link_gbps * 1e9) for h in range(hosts)]
    intra_gbps = float(getattr(cfg, "intra_gbps", 0.0) or 0.0)
    intra_s = [b * 8 / (intra_gbps * 1e9) if intra_gbps > 0 else 0.0 for b in intra]
    wire = [max(host_s[r // per], intra_s[r]) for r in range(k)]
    return wire, {"comm/inter_host_bytes_per_epoch": int(round(sent_inter)),
                  "comm/intra_host_bytes_per_epoch": int(round(sent_intra)),
                  "time/inter_host_s_per_epoch": max(host_s), "time/intra_host_s_per_epoch": max(intra_s)}


def exchanges_per_epoch(layers: list[dict]) -> int:
    """Exchanges of one epoch: per layer the training forward, the backward where the layer's
    input needs a gradient, and the evaluation forward (as ``halo_bytes_per_epoch`` counts)."""
    return sum(2 + bool(lay["needs_input_grad"]) for lay in layers)


def exchange_choices(parts: list[PartStats], layers: list[dict], cfg, active: bool,
                     rates: tuple[float, float]) -> list[dict]:
    """Every exchange the run could use, fastest first: halo mode (``plain``, ``mvc``) x training
    wire width (``--halo-bits`` 32, 16, 8, 4, 2; evaluation stays at ``--eval-halo-bits``), each
    with its halo bytes per epoch (all ranks, exact) and the estimated epoch time (slowest rank).
    Only 32 bits is exact; the error of fewer bits depends on the rows and is not predicted here
    (``train-gcn`` measures it: ``comm/halo_rel_error``), nor is the time to encode them."""
    import dataclasses

    from graphdist.gnn.plan import halo_bytes_per_epoch
    from graphdist.halo.quant import BITS
    if not active:
        return []
    out = []
    for mode in ("plain", "mvc"):
        if not all(mode in p.send for p in parts):
            continue
        total_rows = sum(p.send[mode] for p in parts)
        for bits in sorted(BITS, reverse=True):
            c = dataclasses.replace(cfg, halo=mode, halo_bits=bits)
            total = halo_bytes_per_epoch(total_rows, layers, c)
            wire, _ = link_seconds(parts, halo_bytes_per_epoch(1, layers, c), c, mode)
            t = max(epoch_seconds(p, layers, c, mode, True, total * p.send[mode] / max(1, total_rows), rates, w)
                    for p, w in zip(parts, wire))
            out.append({"comm/halo": mode, "comm/halo_bits": bits, "exact": bits == 32,
                        "comm/halo_bytes_per_epoch": int(total), "time/epoch_s": t})
    return sorted(out, key=lambda r: (r["time/epoch_s"], -r["comm/halo_bits"]))
