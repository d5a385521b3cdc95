"""``comm.wait_for_all``: a barrier through the job's store (not a collective, so not ended by the
collective timeout), for waits as long as one rank's own work: a Criteo cache being built."""
from __future__ import annotations

import time

from graphdist.testing import run_ranks


def _job(rank, ws, flag):
    from graphdist import comm
    if rank == 1:
        time.sleep(2)  # this rank's own work
        with open(flag, "w") as f:
            f.write("done")
    comm.wait_for_all("test/work")
    seen = open(flag).read() if rank == 0 else None  # rank 0 left the wait only after rank 1 came
    if rank == 0:
        with open(flag, "w") as f:
            f.write("again")
    comm.wait_for_all("test/again")  # a second wait of the same round: its own keys
    again = open(flag).read()
    if rank == 1:  # the same tag again is a wait again (load_part called twice in one job)
        time.sleep(2)
        with open(flag, "w") as f:
            f.write("third")
    comm.wait_for_all("test/work")
    return seen, again, open(flag).read()


def test_no_rank_leaves_the_wait_before_the_last_arrives(tmp_path):
    (seen0, after0, third0), (seen1, after1, third1) = run_ranks(_job, 2, args=(str(tmp_path / "flag"),), timeout=120)
    assert seen0 == "done" and seen1 is None
    assert after0 == after1 == "again" and third0 == third1 == "third"
