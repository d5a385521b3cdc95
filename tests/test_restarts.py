"""A restarted worker group re-forms under any launcher: its ranks agree on the round's keys through
the job's store (graphdist/restarts.py), not from each node's own restart count, which differs
between nodes under torch's agent (a node restarted for another node's failure does not count it).

Ranks here are processes forked from the test's rank server; the test process plays torch's agent
and holds the store every round meets at (``TORCHELASTIC_USE_AGENT_STORE=True``), with the keys
of the rounds before still in it. The same on real hosts with two torchrun agents:
``tests/test_hosts.py``."""
from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from graphdist.testing import fork, pipe


def _rank(rank, world, port, count, conn):
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": str(count)})
    from graphdist import comm, restarts
    from graphdist.procgroup import init_distributed, shutdown
    try:
        init_distributed("cpu", timeout_s=20)
        t = torch.tensor([rank + 1.0])
        comm.all_reduce_sum(t)
        conn.send(("ok", restarts.current().round, float(t), restarts.group_restarts()))
    except Exception as e:  # noqa: BLE001 - what the test reads
        conn.send(("failed", f"{type(e).__name__}: {str(e)[:300]}"))
    finally:
        shutdown()


def _round(port: int, counts: list[int]) -> list:
    """One round of a 2-rank worker group whose nodes' agents counted ``counts`` restarts."""
    ends = [pipe() for _ in counts]
    procs = [fork(_rank, (r, len(counts), port, c, ends[r][1])) for r, c in enumerate(counts)]
    out = []
    for (mine, _), p in zip(ends, procs):
        out.append(mine.recv() if mine.poll(90) else ("failed", "no answer within 90 s"))
        p.join(10)
        if p.is_alive():
            p.kill()
    return out


def test_a_group_restarted_with_unequal_node_counts_re_forms():
    """Round 0 forms and ends (its keys stay in the agent's store). Then node 1's worker died: node
    1's agent counts 1 restart, node 0's, which only restarted its healthy worker, counts 0. The
    new round must still form, under keys of its own."""
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)  # the agent's
    first = _round(store.port, [0, 0])
    assert [r[:3] for r in first] == [("ok", 0, 3.0)] * 2, first
    second = _round(store.port, [0, 1])
    assert second == [("ok", 1, 3.0, 1)] * 2, second  # round 1 on both; restarts: the most any node counted


def test_agree_round_skips_a_finished_rounds_number():
    """A rank that reads the number a finished round left (its rank 0 gone) gets no answer and
    reads again; a rank 0 that starts late still gives every rank its new number."""
    import torch.distributed as dist

    from graphdist import restarts
    server = dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False)
    server.set("graphdist/rounds", "5")  # rounds 0..4 were claimed before; round 4's number is still up
    server.set("graphdist/round", "4")
    server.set("graphdist/r4/ok/stale", "1")
    got = {}

    def rank(r, delay):
        time.sleep(delay)
        store = dist.TCPStore("127.0.0.1", server.port, 1, False)
        got[r] = restarts.agree_round(store, r, 3, timeout_s=30)
    threads = [threading.Thread(target=rank, args=(r, 2.5 if r == 0 else 0.0)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == {0: 5, 1: 5, 2: 5}
    assert int(server.get("graphdist/round")) == 5


def test_agree_round_names_the_ranks_that_never_came():
    import torch.distributed as dist

    from graphdist import restarts
    from graphdist.errors import DistributedError
    store = dist.HashStore()
    with pytest.raises(DistributedError, match=r"rank 0: rank\(s\) 2 did not join round 0"):
        t = threading.Thread(target=lambda: restarts.agree_round(store, 1, 3, timeout_s=5))
        t.start()
        restarts.agree_round(store, 0, 3, timeout_s=2)
    t.join(10)
