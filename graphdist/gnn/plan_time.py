"""The epoch-time estimate of ``graphdist plan``: sparse products and linears at rates measured
on this machine, halo bytes over a link of ``--link-gbps`` (plus ``--link-latency-us`` per
exchange), per host with ``--hosts`` (:func:`link_seconds`: the links between hosts and within
them); and the same estimate for every exchange a run could use (:func:`exchange_choices`)."""
from __future__ import annotations

from graphdist.gnn.stats import PartStats


def measured_rates() -> tuple[float, float]:
    """``(sparse entries x columns per second, dense flops per second)`` of this machine, from a
    short CSR product and a matrix product (about a quarter second)."""
    import time
    import warnings

    import torch
    gen = torch.Generator().manual_seed(0)
    n, deg, w = 100_000, 16, 64
    crow = torch.arange(0, n * deg + 1, deg, dtype=torch.int32)
    col = torch.randint(0, n, (n * deg,), generator=gen, dtype=torch.int32)
    with warnings.catch_warnings():  # torch's "sparse CSR support is in beta": not the user's concern
        warnings.simplefilter("ignore", UserWarning)
        a = torch.sparse_csr_tensor(crow, col, torch.rand(n * deg, generator=gen), size=(n, n),
                                    check_invariants=False)
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
    """``{bits: values per second}`` one process encodes and decodes (:mod:`graphdist.exchange.quant`)
    at each quantised width, from a 32768 x 64 block (best of three)."""
    import time

    import torch

    from graphdist.exchange import quant
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


def halo_bytes_per_epoch(total_rows: int, layers: list[dict], cfg) -> int:
    """Bytes of halo rows all ranks send in one epoch (training forward and backward at
    ``--halo-bits``, evaluation forward at ``--eval-halo-bits``), as ``CommStats`` counts them."""
    from graphdist.exchange.quant import row_bytes
    return int(total_rows) * sum(row_bytes(w, b) for _, w, b in exchange_list(layers, cfg))


def exchange_list(layers: list[dict], cfg) -> list[tuple[str, int, int]]:
    """Every halo exchange of an epoch as ``(phase, row width, bits)``, phase ``"train"``
    (forward, and backward where the layer's input needs a gradient) or ``"eval"`` (forward),
    as :func:`halo_bytes_per_epoch` counts them (held input rows travel only at start-up)."""
    out = []
    for lay in layers:
        if not lay.get("train_held"):
            out += [("train", lay["train_width"], cfg.halo_bits)] * (2 if lay["needs_input_grad"] else 1)
        if not lay.get("eval_held"):
            out.append(("eval", lay["eval_width"], cfg.eval_halo_bits))
    return out


def sampled_share(ps: PartStats, mode: str, rate: float) -> tuple[float, float]:
    """``(sent, received)`` message rows of a training exchange with ``--boundary-rate rate``
    over those of the exact one: every raw row is kept with probability ``rate``; ``mvc``'s
    partial sums are always sent (``graphdist.exchange.boundary``)."""
    if rate >= 1.0:
        return 1.0, 1.0
    if mode != "mvc":
        return rate, rate
    s, r = ps.send.get(mode, 0), ps.recv.get(mode, 0)
    return ((s - ps.pre_send) * rate + ps.pre_send) / max(s, 1), ((r - ps.pre_recv) * rate + ps.pre_recv) / max(r, 1)


def row_bytes_per_epoch(layers: list[dict], cfg) -> tuple[float, float]:
    """``(training, evaluation)`` bytes one message row costs per epoch, over its exchanges."""
    from graphdist.exchange.quant import row_bytes
    ex = exchange_list(layers, cfg)
    return (float(sum(row_bytes(w, b) for ph, w, b in ex if ph == "train")),
            float(sum(row_bytes(w, b) for ph, w, b in ex if ph == "eval")))


def compute_seconds(ps: PartStats, layers: list[dict], cfg, mode: str, active: bool,
                    rates: tuple[float, float], codec: dict | None = None) -> float:
    """One rank's sparse products at ``rates[0]`` and linears at ``rates[1]`` in an epoch
    (training forward and backward, evaluation forward; elementwise work not counted), plus
    encoding and decoding the rows it sends and receives at fewer than 32 bits at ``codec``
    ``{bits: values per second}`` (:func:`codec_rates`; None: not counted). With boundary
    sampling the training products see the kept halo entries only. ``cfg.compute_s`` (plan's
    ``--compute-s``, a measured epoch), when given, replaces all of this."""
    if getattr(cfg, "compute_s", 0.0):
        return float(cfg.compute_s)
    own = ps.own_edges + (ps.n if cfg.model == "gcn" else 0)
    halo = (ps.halo_entries.get(mode, 0) + (ps.send_entries if mode == "mvc" else 0)) if active else 0
    kept = sampled_share(ps, mode, cfg.boundary_rate)[1] if active else 1.0
    sparse = dense = 0.0
    for i, lay in enumerate(layers):
        fi, fo = lay["f_in"], lay["f_out"]
        back = lay["needs_input_grad"]
        sparse += (own + halo * kept) * lay["train_width"] * (2 if back else 1)
        if not (i == 0 and lay["eval_reuse"] and (not active or lay.get("eval_held"))):
            sparse += (own + halo) * lay["eval_width"]
        dense += 2 * ps.n * fi * fo * (3 if i > 0 else 2) + 2 * ps.n * fi * fo
    code = 0.0
    if active and codec:
        rows = ps.send.get(mode, 0) + ps.recv.get(mode, 0)
        share = sum(sampled_share(ps, mode, cfg.boundary_rate)) / 2
        for ph, w, b in exchange_list(layers, cfg):
            if b < 32 and b in codec:
                code += rows * (share if ph == "train" else 1.0) * w / codec[b]
    return sparse / rates[0] + dense / rates[1] + code


def epoch_seconds(ps: PartStats, layers: list[dict], cfg, mode: str, active: bool, rates: tuple[float, float],
                  wire: tuple[float, float] | None = None, codec: dict | None = None) -> float:
    """:func:`compute_seconds` plus the link: ``wire`` = ``(training, evaluation)`` seconds of
    the rank's halo bytes on the links (:func:`link_seconds`; None: :func:`rank_link_seconds`,
    its sent and received bytes at a rate measured for this job's all-to-all, as ``--halo
    auto`` has it), and the link's latency once per exchange and round. Exact exchanges are waited for where they are posted (no overlap assumed); with
    ``--halo-staleness`` the training exchanges are used an epoch later, so they run behind the
    whole epoch's compute and only what exceeds it shows (the evaluation's stay exact)."""
    rounds = max(1, int(getattr(cfg, "halo_rounds", 1) or 1))  # the link's latency is paid once a round
    wait = exchanges_per_epoch(layers) * rounds * cfg.link_latency_us * 1e-6 if active else 0.0
    c = compute_seconds(ps, layers, cfg, mode, active, rates, codec)
    if not active:
        return c
    if wire is None:
        wire = rank_link_seconds(ps, layers, cfg, mode)
    train, ev = wire
    if getattr(cfg, "halo_staleness", 0):
        train = max(0.0, train - c)
    return c + train + ev + wait


def rank_link_seconds(ps: PartStats, layers: list[dict], cfg, mode: str) -> tuple[float, float]:
    """``(training, evaluation)`` seconds of one rank's halo bytes sent and received, one after
    the other, at ``cfg.link_gbps``: the rate ``--halo auto`` measures (two timed all-to-alls
    of the job itself, :func:`graphdist.gnn.auto.measure_link`, whose figure counts sent +
    received bytes, so whatever its hosts overlap is in the rate), and the simulated link of
    ``--link-gbps`` (``graphdist.exchange.link``)."""
    tr, ev = row_bytes_per_epoch(layers, cfg)
    s, r = ps.send.get(mode, 0), ps.recv.get(mode, 0)
    ss, sr = sampled_share(ps, mode, cfg.boundary_rate)
    per = 8 / (cfg.link_gbps * 1e9)
    return (s * ss + r * sr) * tr * per, (s + r) * ev * per


def peer_rows(ps: PartStats, mode: str, k: int, r: int) -> tuple[list, list]:
    """Rank ``r``'s message rows per layer sent to and received from each rank: the part's own
    lists, or (stats mode, none recorded) its rows spread evenly over the other ranks."""
    if mode in ps.send_to:
        return ps.send_to[mode], ps.recv_from[mode]
    return ([0 if p == r else ps.send.get(mode, 0) / (k - 1) for p in range(k)],
            [0 if p == r else ps.recv.get(mode, 0) / (k - 1) for p in range(k)])


def link_seconds(parts: list[PartStats], layers: list[dict], cfg, mode: str) -> tuple[list[tuple[float, float]], dict]:
    """Per rank the ``(training, evaluation)`` seconds its halo bytes spend on the links in an
    epoch, and the bytes and seconds per link class. Ranks are host-major on ``cfg.hosts``
    hosts (0: one rank per host), every host behind one switch on a link of ``cfg.link_gbps``
    in each direction. An all-to-all on them is bound, per host, by the larger of (measured on
    the test bed with a bucket of 1 ms of line rate, BENCHMARKS.md "`plan` and `--halo auto` on
    real links"):

    - the bytes its ranks send to other hosts, and those they receive (the link's two
      directions, each at the rate);
    - the bytes one of its ranks sends to and receives from other hosts together: a gloo rank
      moves its two directions one after the other (2 hosts x 1 rank and 4 hosts x 1 rank took
      sent + received at the rate; 2 hosts x 2 ranks, two ranks a direction each, about the
      larger direction).

    Bytes between ranks of one host go at ``cfg.intra_gbps`` (0: not charged). A rank is taken to
    wait for the slower of its host's link and its own traffic within the host (the two classes
    of peers served together).

    Keys (bytes are what ranks send, summed over ranks, training exchanges at their expected
    ``--boundary-rate`` share; seconds the busiest host or rank):
    ``comm/inter_host_bytes_per_epoch``, ``comm/intra_host_bytes_per_epoch``,
    ``time/inter_host_s_per_epoch``, ``time/intra_host_s_per_epoch``."""
    k = len(parts)
    hosts = int(getattr(cfg, "hosts", 0) or 0) or k
    per = k // hosts
    tr_row, ev_row = row_bytes_per_epoch(layers, cfg)
    # per host and phase (training, evaluation): bytes sent and received across hosts, and its
    # busiest rank's bytes across hosts both ways; per rank: bytes sent + received within the host
    out_b, in_b = [[0.0, 0.0] for _ in range(hosts)], [[0.0, 0.0] for _ in range(hosts)]
    rank_b = [[0.0, 0.0] for _ in range(hosts)]
    intra = [[0.0, 0.0] for _ in range(k)]
    sent = {"inter": 0.0, "intra": 0.0}
    for r, ps in enumerate(parts):
        to, frm = peer_rows(ps, mode, k, r)
        ss, sr = sampled_share(ps, mode, cfg.boundary_rate)
        h = r // per
        mine = [0.0, 0.0]  # this rank's bytes across hosts, both ways
        for p in range(k):
            if p == r:
                continue
            pair = ((to[p] * ss + frm[p] * sr) * tr_row, (to[p] + frm[p]) * ev_row)
            if h == p // per:
                intra[r] = [a + b for a, b in zip(intra[r], pair)]
                sent["intra"] += to[p] * (ss * tr_row + ev_row)
                continue
            out_b[h] = [out_b[h][0] + to[p] * ss * tr_row, out_b[h][1] + to[p] * ev_row]
            in_b[h] = [in_b[h][0] + frm[p] * sr * tr_row, in_b[h][1] + frm[p] * ev_row]
            mine = [a + b for a, b in zip(mine, pair)]
            sent["inter"] += to[p] * (ss * tr_row + ev_row)
        rank_b[h] = [max(a, b) for a, b in zip(rank_b[h], mine)]
    per_bit = 8 / (cfg.link_gbps * 1e9)
    host = [[max(out_b[h][i], in_b[h][i], rank_b[h][i]) * per_bit for i in (0, 1)] for h in range(hosts)]
    intra_gbps = float(getattr(cfg, "intra_gbps", 0.0) or 0.0)
    own = [[b * 8 / (intra_gbps * 1e9) if intra_gbps > 0 else 0.0 for b in x] for x in intra]
    wire = []
    for r in range(k):
        h, o = host[r // per], own[r]
        # one phase's exchanges finish when both links are done: the slower of the two
        wire.append((max(h[0], o[0]), max(h[1], o[1])))
    return wire, {"comm/inter_host_bytes_per_epoch": int(round(sent["inter"])),
                  "comm/intra_host_bytes_per_epoch": int(round(sent["intra"])),
                  "time/inter_host_s_per_epoch": max(sum(h) for h in host),
                  "time/intra_host_s_per_epoch": max(sum(o) for o in own)}


def exchanges_per_epoch(layers: list[dict]) -> int:
    """Exchanges of one epoch: per layer the training forward, the backward where the layer's
    input needs a gradient, and the evaluation forward (as ``halo_bytes_per_epoch`` counts)."""
    return sum(2 + bool(lay["needs_input_grad"]) for lay in layers)


def exchange_choices(parts: list[PartStats], layers: list[dict], cfg, active: bool,
                     rates: tuple[float, float], codec: dict | None = None) -> list[dict]:
    """Every exchange the run could use, fastest first: halo mode (``plain``, ``mvc``) x training
    wire width (``--halo-bits`` 32, 16, 8, 4, 2; evaluation stays at ``--eval-halo-bits``), each
    with its halo bytes per epoch (all ranks, exact) and the estimated epoch time (slowest rank).
    Only 32 bits is exact; the error of fewer bits depends on the rows and is not predicted here
    (``train-gcn`` measures it: ``comm/halo_rel_error``); the time to encode and decode them is
    counted at ``codec`` (:func:`codec_rates`; None: not counted)."""
    import dataclasses

    from graphdist.exchange.quant import BITS
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
            wire, _ = link_seconds(parts, layers, c, mode)
            t = max(epoch_seconds(p, layers, c, mode, True, rates, w, codec) for p, w in zip(parts, wire))
            out.append({"comm/halo": mode, "comm/halo_bits": bits, "exact": bits == 32,
                        "comm/halo_bytes_per_epoch": int(total), "time/epoch_s": t})
    return sorted(out, key=lambda r: (r["time/epoch_s"], -r["comm/halo_bits"]))
