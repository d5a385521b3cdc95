"""Will every rank of an output job (``infer``, ``recommend``, a recommender's ``export``) fit? One
collective check, run once a rank's part is loaded and before its heavy work starts: each rank's
estimate of its peak resident bytes, summed over the ranks of its machine (they share its free
memory, :func:`graphdist.hosts.placement`) against what that machine can still give, and against
each rank's own process limit (``ulimit -d`` / ``-v``). A job that does not fit stops with one
line naming the bytes it needs and the bytes it has (a :class:`~graphdist.errors.ConfigError`);
GPU memory is not checked."""
from __future__ import annotations

__all__ = ["check_fits"]

GiB = 2 ** 30


def check_fits(what: str, fix: str, need: int, device) -> dict:
    """Collective: refuse, in one line, ``what`` (e.g. ``inference of gcn 2x64``) whose rank needs
    ``need`` bytes at its peak when its machine or its process limit has less; ``fix`` says what
    to change. Returns ``{"need_bytes_per_rank": [...], "room_bytes": this machine's room or None}``."""
    from graphdist import comm
    from graphdist.hosts import placement
    from graphdist.memory import available_bytes, process_ceiling, resident_bytes
    where, me = placement(), comm.world()[0]
    machine = [where.machine_of_host[h] for h in where.host_of_rank]
    room = None
    if device.type != "cuda":  # the machine's free memory is shared by its ranks
        room = available_bytes() + (where.ranks_on_machine_of(me) - 1) * (resident_bytes() or 0)
    every = comm.all_gather_json({"need": int(need), "machine": machine[me], "room": room,
                                  "ceiling": process_ceiling()})
    refuse(what, fix, every, machine[me])
    return {"need_bytes_per_rank": [e["need"] for e in every], "room_bytes": room}


def refuse(what: str, fix: str, every: list[dict], mine) -> None:
    """Raise the one line when a machine's ranks (``every``: need, machine, room, ceiling per rank;
    this rank's machine ``mine`` named first) or one rank's process limit have too little."""
    from graphdist.errors import ConfigError
    for m in sorted({e["machine"] for e in every}, key=lambda m: (m != mine, str(m))):
        node = [e for e in every if e["machine"] == m]
        total, rooms = sum(e["need"] for e in node), [e["room"] for e in node if e["room"] is not None]
        if rooms and total > min(rooms):
            raise ConfigError(f"{what} needs about {max(e['need'] for e in node) / GiB:.2f} GiB per rank "
                              f"({total / GiB:.2f} GiB for the {len(node)} rank(s) on this machine), and "
                              f"{min(rooms) / GiB:.2f} GiB is available; {fix}")
    capped = [e for e in every if e["ceiling"] is not None and e["need"] > e["ceiling"]]
    if capped:
        e = max(capped, key=lambda e: e["need"] - e["ceiling"])
        raise ConfigError(f"{what} needs about {e['need'] / GiB:.2f} GiB per rank, and a rank may hold only "
                          f"{e['ceiling'] / GiB:.2f} GiB (its process memory limit, ulimit -d / -v); {fix}")
