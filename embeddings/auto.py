"""``--sparse-groups auto``: 1D or 2D, and which G and rank layout, from the tables, the batch and
the links measured when the job starts.

Candidates (W ranks, L per host): 1D (every table over all W ranks, ``--sharding`` as given: the
planner's by default) and 2D for every G > 1 that divides W, in both rank layouts (``hosts``
and ``torchrec``; at G = W they are the same groups, one candidate). A candidate whose largest
rank needs more than ``--memory-budget-gb`` of embeddings and optimizer state does not fit.
Every candidate that fits gets an estimated step time (:mod:`embeddings.cost`): its plan's bytes
per collective, placed on the hosts, at the rates measured here, plus one rank's compute and a
latency per collective. The fastest wins (on a tie: fewer replicas, then ``hosts``), except that
2D must beat 1D's estimate by more than :data:`ONE_D_MARGIN` to be taken over it.

Measured at start-up, on every rank at once (:func:`measure`):

* compute: :data:`PROBE_STEPS` training steps of each rank's share of the batch with every
  table on the rank (cut to :data:`PROBE_ROWS` rows) and nothing exchanged, all ranks at once;
  the median of all ranks' steps (the wait for the slowest rank at a collective is in the
  latency measured next);
* latency: a small all-to-all and a small all-reduce over all W ranks (median of 15 each);
* rates: an all-to-all in which every rank sends only to the ranks of its own host (within
  hosts, per rank), one in which it sends only to the other hosts' ranks (between hosts, per
  host link: about :data:`LINK_PROBE_BYTES` on each link, median of 3), and shifts of
  :data:`RING_MESSAGE_BYTES` in which each rank sends to the rank L ahead and receives from the
  rank L behind (a ring's edges across hosts, as the replica sync's all-reduce sends its chunks),
  repeated to about :data:`LINK_PROBE_BYTES` on each link;
* sync work: a replica sync's own work per row on this rank (:func:`sync_row_seconds`).

The slowest rank's latencies and rates count. Rank 0 plans every candidate and decides; the others get the
choice from it. A resumed run takes the layout its checkpoint's settings record (what that run
chose or was given) and measures nothing. The choice, every candidate's estimate and the
measurements are printed with the plan, kept in the checkpoint's history and reported as
``sparse_auto``.
"""
from __future__ import annotations

import dataclasses
import json
import time

import numpy as np
import torch

from embeddings.cost import Links, estimate, phases, plan_traffic
from graphdist import comm
from graphdist.errors import ConfigError
from graphdist.fmt import fmt_bytes

__all__ = ["candidates", "evaluate", "choose", "measure", "resolve", "format_choice", "memory_lines", "no_fit"]

PROBE_ROWS = 4096
"""Rows of each table in the compute probe (a table's size changes a lookup's cost little)."""
PROBE_STEPS = 10
"""Steps the compute probe times after two warm-up steps."""
LINK_PROBE_BYTES = 8 << 20
"""Bytes (sent + received) the between-hosts probe puts on each host's link."""
RING_MESSAGE_BYTES = 256 << 10
"""Bytes a rank sends in one shift of the ring probe. On the test bed's 0.1 Gbit/s links
(2 hosts x 2 ranks) one shift of 2 MiB a rank moved 13-19 MB/s (sent + received) where the
replica sync's all-reduce moved 22-24 and shifts of 256 KiB 23.7 (BENCHMARKS.md, "DLRM where 2D
matters"): a pair's large message takes its two directions nearly one after the other."""


ONE_D_MARGIN = 0.10
"""1D is kept unless the fastest 2D candidate's estimated step is more than this fraction under
1D's. Within it the estimates cannot tell the layouts apart (on the test bed's default-size
cells a step's estimate came within 0.67-1.33x of the measured one, and the four layouts' steps
lay within 13-16% of one another), and there 1D is the better bet: one copy of the tables, no
replica sync, the AUC of one model (0.8299 against 2D's 0.8224-0.8292 after the same samples).
Re-deciding the fifth and sixth rounds' recorded estimates (docs/benchmarks-details.md, "The
step model"), the fastest estimate took G = 4 in four of eight default cells (0.88-0.97x the
fastest layout measured, 1D each time); with the margin all eight take 1D, the fastest measured
in each. At the Kaggle sizes the 2D layouts trained beside 1D were estimated at 0.44-0.75x 1D's
step, so those choices stay. Within 10% of the fastest estimate, keeping 1D costs at most that
much where the estimates are right."""


def candidates(world: int, optimizer: str) -> list[tuple[int, str]]:
    """``(G, rank layout)`` of every layout ``auto`` considers (only 1D with Adam, whose state
    the replica sync cannot average)."""
    out = [(1, "hosts")]
    if optimizer == "adam":
        return out
    for g in range(2, world + 1):
        if world % g == 0:
            out += [(g, k) for k in (("hosts",) if g == world else ("hosts", "torchrec"))]
    return out


def evaluate(cfg, train, world: int, local: int, device_type: str, budget: int, room: int | None = None) -> list[dict]:
    """Every candidate's plan: memory per rank, whether it fits (at most ``budget`` per rank,
    and ``local`` ranks' at most ``room``, a host's room for tables,
    :func:`embeddings.build.host_room`), and its phases (:func:`embeddings.cost.phases`; key
    ``_phases``, not JSON). No process group needed."""
    from embeddings.build import plan_for, state_optimizer
    from embeddings.data import id_stats
    from embeddings.sharding import EBC_PATH
    from embeddings.twod import layout_for
    stats, out = id_stats(train), []
    for g, kind in candidates(world, cfg.embedding_optimizer):
        c = dataclasses.replace(cfg, sparse_groups=g, sparse_layout=kind)
        module, plan, desc = plan_for(c, train, world, local, device_type)
        layout = layout_for(world, g, local, kind)
        mem = max(r["embedding_bytes"] for r in desc["ranks"])
        tr = plan_traffic(plan, train.num_embeddings, cfg.model.embedding_dim, layout.size,
                          cfg.batch_size // g, stats, state_optimizer(cfg.embedding_optimizer), g, cfg.sync_every)
        dense = 4 * sum(p.numel() for n, p in module.named_parameters() if not n.startswith(EBC_PATH))
        out.append({"sparse_groups": g, "sparse_layout": kind, "sharding_group_size": layout.size,
                    "memory_bytes": int(mem), "fits": mem <= budget and (room is None or local * mem <= room),
                    "budget_bytes": int(budget), "host_ranks": local, "host_room_bytes": room, "types": list(tr.types),
                    "_phases": phases(tr, layout, local, dense, cfg.sync_every)})
    return out


def choose(cands: list[dict], links: Links, world: int) -> dict:
    """The fastest candidate that fits, every candidate's estimate and why (plain data; the
    candidates lose their ``_phases``). :class:`ConfigError` when none fits."""
    rows = []
    for c in cands:
        row = {k: v for k, v in c.items() if k != "_phases"}
        row["estimate"] = estimate(c["_phases"], links, world)
        rows.append(row)
    fit = [r for r in rows if r["fits"]]
    if not fit:
        raise ConfigError(no_fit(rows))
    fastest = min(fit, key=lambda r: (r["estimate"]["step_s"], r["sparse_groups"], r["sparse_layout"] != "hosts"))
    one_d = next((r for r in fit if r["sparse_groups"] == 1), None)
    kept = one_d is not None and fastest["estimate"]["step_s"] > (1 - ONE_D_MARGIN) * one_d["estimate"]["step_s"]
    best = one_d if kept else fastest
    for r in rows:
        r["why"] = _why(r, best, fastest)
    return {"sparse_groups": best["sparse_groups"], "sparse_layout": best["sparse_layout"],
            "sharding_group_size": best["sharding_group_size"], "why": best["why"], "candidates": rows,
            "links": dataclasses.asdict(links)}


def no_fit(cands: list[dict]) -> str:
    """The one line when no candidate fits: the smallest one's memory against the budget."""
    least = min(cands, key=lambda r: r["memory_bytes"])
    return f"--sparse-groups auto: no layout fits: the smallest, {name(least)}, {_short(least)}"


def _short(c: dict) -> str:
    """Why a candidate does not fit, with the numbers."""
    mem, room, L = c["memory_bytes"], c.get("host_room_bytes"), c.get("host_ranks", 1)
    if mem > c["budget_bytes"]:
        return (f"needs {fmt_bytes(mem)} of embeddings and optimizer state per rank, budget is "
                f"{fmt_bytes(c['budget_bytes'])} per rank (--memory-budget-gb)")
    return (f"needs {fmt_bytes(mem)} of embeddings and optimizer state per rank, {fmt_bytes(L * mem)} for the "
            f"{L} rank(s) of a host, which has {fmt_bytes(room)} available")


def name(r: dict) -> str:
    g = r["sparse_groups"]
    return "1D" if g == 1 else f"2D G={g}" + ("" if r.get("sharding_group_size") == 1 else f" {r['sparse_layout']}")


def _why(r: dict, best: dict, fastest: dict) -> str:
    e = r["estimate"]
    if not r["fits"]:
        return f"does not fit: it {_short(r)}"
    link = f"its {e['between_hosts_bytes_per_step'] / 1e6:.2f} MB between hosts ({e['between_hosts_s'] * 1e3:.0f} ms)"
    ranks = e["compute_s"] + e["latency_s"] + e["within_hosts_s"] + e.get("sync_work_s", 0.0)
    then = (f", then its replica sync on the link ({e['sync_between_hosts_s'] * 1e3:.0f} ms)"
            if e.get("sync_between_hosts_s") else "")
    parts = {"compute": e["compute_s"], "latency": e["latency_s"], "within hosts": e["within_hosts_s"],
             "sync work": e.get("sync_work_s", 0.0)}
    top = max(parts, key=parts.get)
    bound = (link if e["between_hosts_s"] > ranks else
             f"the ranks' work ({ranks * 1e3:.0f} ms, most of it {top}: {parts[top] * 1e3:.0f} ms)") + then
    ratio = lambda a: f"{a['estimate']['step_s'] / best['estimate']['step_s']:.2f}x"  # noqa: E731
    if r is not best:
        lead = f"{ratio(r)} the chosen step"
    elif r is fastest:
        lead = "fastest that fits"
    else:  # 1D, kept over a 2D estimate less than the margin under it
        lead = f"1D kept: the fastest 2D, {name(fastest)}, {ratio(fastest)} its step, is not {ONE_D_MARGIN:.0%} under it"
    return f"{lead}; bound by {bound}"


def memory_lines(cands: list[dict]) -> list[str]:
    """One line per candidate: its memory per rank against the budget (and the host's room)."""
    room = lambda c: "" if c.get("host_room_bytes") is None else (  # noqa: E731
        f"; {c['host_ranks']} per host: {fmt_bytes(c['host_ranks'] * c['memory_bytes'])} of "
        f"{fmt_bytes(c['host_room_bytes'])} available")
    return [f"  {name(c):<16} {fmt_bytes(c['memory_bytes']):>10} per rank of embeddings and optimizer state "
            f"(budget {fmt_bytes(c['budget_bytes'])}{room(c)}){'' if c['fits'] else '  does NOT fit'}" for c in cands]


def format_choice(auto: dict) -> str:
    """The choice as text: the measurements, one row per candidate, the chosen one marked."""
    if "candidates" not in auto or not auto["candidates"]:
        return f"--sparse-groups auto: {name(auto)} ({auto['why']})"
    L = auto["links"]
    rate = lambda b, per: "none" if not b else f"{b / 1e6:,.1f} MB/s {per}"  # noqa: E731
    ring = f" ({L['ring_bytes_per_s'] / 1e6:,.1f} MB/s as a ring)" if L.get("ring_bytes_per_s") else ""
    lines = [f"--sparse-groups auto, measured at start-up: between hosts {rate(L['inter_bytes_per_s'], 'per host link')}{ring}, "
             f"within hosts {rate(L['intra_bytes_per_s'], 'per rank')} (sent + received), latency "
             f"{L['a2a_latency_s'] * 1e3:.1f} ms per all-to-all and {L['allreduce_latency_s'] * 1e3:.1f} ms per "
             f"all-reduce over all ranks, compute {L['compute_s'] * 1e3:.1f} ms per step, replica sync "
             f"{L.get('sync_row_s', 0.0) * 1e9:.0f} ns per row:",
             f"  {'layout':<16} {'mem/rank':>10} {'between hosts':>14} {'within hosts':>13} {'ranks':>8} "
             f"{'link':>8} {'step (est.)':>12}"]
    for c in auto["candidates"]:
        e = c["estimate"]
        chosen = (c["sparse_groups"], c["sparse_layout"]) == (auto["sparse_groups"], auto["sparse_layout"])
        mark = ("  <- chosen: " if chosen else "  ") + c.get("why", "")
        work = e["compute_s"] + e["latency_s"] + e["within_hosts_s"] + e.get("sync_work_s", 0.0)
        link = e["between_hosts_s"] + e.get("sync_between_hosts_s", 0.0)
        lines.append(f"  {name(c):<16} {fmt_bytes(c['memory_bytes']):>10} {e['between_hosts_bytes_per_step'] / 1e6:11.2f} MB "
                     f"{e['within_host_bytes_per_step'] / 1e6:10.2f} MB {work * 1e3:5.0f} ms "
                     f"{link * 1e3:5.0f} ms {e['step_s'] * 1e3:9.0f} ms{mark}")
    lines.append(f"chose {name(auto)}: {auto['why']}")
    return "\n".join(lines)


def probe_steps(cfg, train, device: torch.device) -> list[float]:
    """Seconds of :data:`PROBE_STEPS` steps (after two warm-up steps) of this rank's share of
    the batch with every table on the rank (cut to :data:`PROBE_ROWS` rows; ids hashed into
    them) and nothing exchanged."""
    from embeddings.build import make_optimizer, plan_for
    from embeddings.data import ClickData, make_batch
    from embeddings.twod import build_local
    rank, world = comm.world()
    b = cfg.batch_size // world
    small = ClickData(train.dense, train.cat, train.labels, [min(int(n), PROBE_ROWS) for n in train.num_embeddings],
                      train.lengths)
    c = dataclasses.replace(cfg, sparse_groups=1, sharding="table_wise", batch_size=b)
    module, plan, _ = plan_for(c, small, 1, 1, device.type)
    dmp = build_local(module, plan, device, world)
    opt = make_optimizer(c, dmp)
    times, span = [], max(len(small) - b, 1)
    for i in range(2 + PROBE_STEPS):
        batch = make_batch(small, (i * world + rank) * b % span, b, 0, 1)[0].to(device)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss, _ = dmp(batch)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    del dmp, opt
    return times[2:]


def sync_row_seconds(dim: int, n: int = 1 << 15) -> float:
    """Seconds per row of a replica sync's own work on this rank (:class:`embeddings.twod.ReplicaSync`):
    the distinct ids of ``2n`` looked-up ids, their union, and per row reading the row and its
    row-wise state out of a table and writing them back (best of 3)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 4 * n, (2 * n,), generator=g)
    w, v = torch.zeros(4 * n, dim), torch.zeros(4 * n)
    best, rows = float("inf"), 1
    for _ in range(3):
        t0 = time.perf_counter()
        keys = torch.unique(torch.unique(ids))
        a, b = w.index_select(0, keys), v.index_select(0, keys)
        w.index_copy_(0, keys, a)
        v.index_copy_(0, keys, b)
        best, rows = min(best, time.perf_counter() - t0), max(keys.numel(), 1)
    return best / rows


def _timed(fn, reps: int) -> float:
    comm.barrier()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _exchange(per_peer: list[int]):
    """An all-to-all sending ``per_peer[q]`` bytes (fp32 rows) to rank q, receiving alike."""
    n = [x // 4 for x in per_peer]
    send, out = torch.zeros(max(sum(n), 1)), torch.empty(max(sum(n), 1))
    return lambda: comm.all_to_all_rows(out[:sum(n)], send[:sum(n)], n, n)


def measure(cfg, train, device: torch.device, local: int) -> Links:
    """:class:`~embeddings.cost.Links` of this job (collective; the slowest rank's figures)."""
    rank, world = comm.world()
    L = max(1, min(local, world))
    steps = comm.all_gather_rows(torch.tensor([probe_steps(cfg, train, device)], dtype=torch.float64))
    compute = float(steps.median())  # a typical rank's step (the wait for the slowest is in the latency)
    lat_a2a = _timed(_exchange([64] * world), 15)
    x = torch.zeros(16)
    lat_ar = _timed(lambda: comm.all_reduce_sum(x), 15)
    host = rank // L
    intra = inter = 0.0
    if L > 1:
        per = 2 << 20
        t = _timed(_exchange([per if q // L == host and q != rank else 0 for q in range(world)]), 3)
        intra = (L - 1) * per * 2 / max(t - lat_a2a, 1e-6)
    ring = 0.0
    if world > L:
        per = LINK_PROBE_BYTES // (2 * L * (world - L))
        t = _timed(_exchange([per if q // L != host else 0 for q in range(world)]), 3)
        inter = L * (world - L) * per * 2 / max(t - lat_a2a, 1e-6)
        n, reps = RING_MESSAGE_BYTES // 4, max(1, LINK_PROBE_BYTES // (2 * L * RING_MESSAGE_BYTES))
        send, out = torch.zeros(n), torch.empty(n)

        def shifts():
            for _ in range(reps):
                comm.shift_rows(send, (rank + L) % world, out, (rank - L) % world)
        t = _timed(shifts, 3)  # each shift's own latency counted, as the sync's chunks pay theirs
        ring = 2 * L * n * 4 * reps / max(t, 1e-6)
    sync_row = sync_row_seconds(cfg.model.embedding_dim)
    mine = torch.tensor([compute, lat_a2a, lat_ar, -intra, -inter, sync_row, -ring], dtype=torch.float64)
    worst = comm.all_reduce_max(mine).tolist()
    return Links(compute_s=worst[0], a2a_latency_s=worst[1], allreduce_latency_s=worst[2],
                 intra_bytes_per_s=-worst[3], inter_bytes_per_s=-worst[4], sync_row_s=worst[5],
                 ring_bytes_per_s=-worst[6])


def _from_rank0(obj):
    """``obj`` of rank 0 on every rank, as JSON in a tensor (nothing unpickled)."""
    rank = comm.world()[0]
    data = torch.tensor(list(json.dumps(obj).encode()) if rank == 0 else [], dtype=torch.uint8)
    n = comm.broadcast(torch.tensor([data.numel()], dtype=torch.int64))
    buf = data if rank == 0 else torch.empty(int(n.item()), dtype=torch.uint8)
    return json.loads(bytes(comm.broadcast(buf).tolist()).decode())


def resumed(cfg) -> dict | None:
    """On ``--resume``, the layout the checkpoint's settings record (None otherwise)."""
    from graphdist.checkpoint import Checkpointer, recorded_setting, resuming
    if not (resuming(cfg) and cfg.checkpoint_dir):
        return None
    g = recorded_setting(cfg, "sparse_groups", 1)
    if g is None:
        return None
    snap = Checkpointer(cfg.checkpoint_dir).latest()
    return {"sparse_groups": int(g), "sparse_layout": recorded_setting(cfg, "sparse_layout", "hosts") or "hosts",
            "why": f"resumed: the layout recorded in {snap}, not measured again"}


def resolve(cfg, train, device: torch.device, local: int):
    """``(cfg with --sparse-groups and --sparse-layout resolved, the choice)``: every rank calls
    it (measurements are collective); the choice is rank 0's."""
    rank, world = comm.world()
    if world == 1:
        choice = {"sparse_groups": 1, "sparse_layout": "hosts", "why": "one rank: 1D"}
    else:
        choice = resumed(cfg)
    if choice is None:
        from embeddings.build import host_room, memory_budget
        links = measure(cfg, train, device, local)
        out = None
        if rank == 0:
            try:
                room = host_room(local, True) if device.type == "cpu" else None
                cands = evaluate(cfg, train, world, local, device.type, memory_budget(cfg, device, local), room)
                out = choose(cands, links, world)
            except ConfigError as e:
                out = {"error": str(e)}
        choice = _from_rank0(out)
        if "error" in choice:
            raise ConfigError(choice["error"])
    return dataclasses.replace(cfg, sparse_groups=int(choice["sparse_groups"]),
                               sparse_layout=choice["sparse_layout"]), choice
