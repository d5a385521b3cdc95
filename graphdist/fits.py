"""Will every rank of an output job (``infer``, ``recommend``, a recommender's ``export``) fit? One
collective check, run once a rank's part is loaded and before its heavy work starts: each rank's
estimate of its peak resident bytes, summed over the ranks of its machine (they share its free
memory, :func:`graphdist.hosts.placement`) against what that machine can still give, and against
each rank's own process limit (``ulimit -d`` / ``-v``). A job that does not fit stops with one
line naming the bytes it needs and the bytes it has (a :class:`~graphdist.errors.ConfigError`);
GPU memory is not checked. A job with several ways to run (``infer``'s exchange rounds) takes the
first way that fits (:func:`fewest_fitting`)."""
from __future__ import annotations

__all__ = ["check_fits", "fewest_fitting", "choose", "refuse", "shortfall"]

GiB = 2 ** 30


def check_fits(what: str, fix: str, need: int, device) -> dict:
    """Collective: refuse, in one line, ``what`` (e.g. ``inference of gcn 2x64``) whose rank needs
    ``need`` bytes at its peak when its machine or its process limit has less; ``fix`` says what
    to change. Returns ``{"need_bytes_per_rank": [...], "room_bytes": this machine's room or None}``."""
    return fewest_fitting(lambda _c: what, fix, [need], device)[1]


def fewest_fitting(what, fix: str, needs: list[int], device) -> tuple[int, dict]:
    """Collective: the first of several ways to run (``needs[i]``: this rank's peak bytes the
    ``i``-th way; e.g. exchange rounds 1, 2, 4, ...) with which every machine's ranks fit its
    memory and every rank its process limit; ``(i, figures)`` as :func:`check_fits` returns them.
    When none fits, the last way's one line (``what(i)`` names it) is raised. Every rank chooses
    the same ``i`` from the same gathered figures."""
    from graphdist import comm
    from graphdist.hosts import placement
    from graphdist.memory import available_bytes, process_ceiling, resident_bytes
    where, me = placement(), comm.world()[0]
    machine = [where.machine_of_host[h] for h in where.host_of_rank]
    room = None
    if device.type != "cuda":  # the machine's free memory is shared by its ranks
        room = available_bytes() + (where.ranks_on_machine_of(me) - 1) * (resident_bytes() or 0)
    every = comm.all_gather_json({"needs": [int(n) for n in needs], "machine": machine[me], "room": room,
                                  "ceiling": process_ceiling()})
    i = choose(every, machine[me])
    last = len(needs) - 1
    ways = [{**e, "need": e["needs"][last if i is None else i]} for e in every]
    if i is None:
        refuse(what(last), fix, ways, machine[me])
    return i, {"need_bytes_per_rank": [e["need"] for e in ways], "room_bytes": room}


def choose(every: list[dict], mine) -> int | None:
    """The first way (index into each rank's ``needs``) with which :func:`refuse` finds nothing
    short (``every``: needs, machine, room, ceiling per rank), or None. Plain data: one process
    can check it for all ranks."""
    for i in range(len(every[0]["needs"])):
        if shortfall("", "", [{**e, "need": e["needs"][i]} for e in every], mine) is None:
            return i
    return None


def refuse(what: str, fix: str, every: list[dict], mine) -> None:
    """Raise :func:`shortfall`'s line (a :class:`~graphdist.errors.ConfigError`) when there is one."""
    from graphdist.errors import ConfigError
    line = shortfall(what, fix, every, mine)
    if line is not None:
        raise ConfigError(line)


def shortfall(what: str, fix: str, every: list[dict], mine) -> str | None:
    """The one line when a machine's ranks (``every``: need, machine, room, ceiling per rank;
    this rank's machine ``mine`` named first) or one rank's process limit have too little; None
    when every rank fits."""
    for m in sorted({e["machine"] for e in every}, key=lambda m: (m != mine, str(m))):
        node = [e for e in every if e["machine"] == m]
        total, rooms = sum(e["need"] for e in node), [e["room"] for e in node if e["room"] is not None]
        if rooms and total > min(rooms):
            return (f"{what} needs about {max(e['need'] for e in node) / GiB:.2f} GiB per rank "
                    f"({total / GiB:.2f} GiB for the {len(node)} rank(s) on this machine), and "
                    f"{min(rooms) / GiB:.2f} GiB is available; {fix}")
    capped = [e for e in every if e["ceiling"] is not None and e["need"] > e["ceiling"]]
    if capped:
        e = max(capped, key=lambda e: e["need"] - e["ceiling"])
        return (f"{what} needs about {e['need'] / GiB:.2f} GiB per rank, and a rank may hold only "
                f"{e['ceiling'] / GiB:.2f} GiB (its process memory limit, ulimit -d / -v); {fix}")
    return None
