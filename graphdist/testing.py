"""Run a function on N ranks of a real gloo/nccl process group (tests and quick experiments).

    results = run_ranks(fn, world_size=2, args=(a, b), timeout=60)

``fn(rank, world_size, *args)`` must be importable (a module-level function). Each rank is a
fresh process with ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` set, the caller's environment and
working directory, and the default process group initialised; the return values come back in
rank order. Ranks are forked from a server process (multiprocessing's ``forkserver``) that has
imported torch and the heavy libraries the ranks use (:data:`PRELOAD`, those installed) once, so
a rank starts in milliseconds instead of paying those imports (1-4 s of CPU each) again: a test
suite starts hundreds of ranks. The server itself starts no threads of torch's and no process
group, so a fork of it is as clean as a new interpreter. The ranks meet through a
``FileStore`` in a private temporary directory, not a TCP port, so jobs started at the same time
on a loaded machine cannot take each other's rendezvous port. If any rank
raises, the others are killed and :class:`RankFailure` carries that rank's traceback. If the
job is not done within ``timeout`` seconds, every live rank is killed and :class:`RankTimeout`
names the ranks that had not finished. No process outlives the call, nor the calling process.

:func:`fork` runs one function in a forked process of the same server (to be signalled, as a
crash would stop it) that talks back through :func:`pipe`.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue as queue_mod
import shutil
import tempfile
import time
import traceback


class RankFailure(RuntimeError):
    """A rank raised; the message holds its rank and traceback."""


class RankTimeout(RuntimeError):
    """The job did not finish in time; the message names the ranks still running."""


PRELOAD = ("torch", "torch.distributed", "numpy", "scipy.sparse", "graphdist.procgroup", "graphdist.comm",
           "graphdist.loop", "torch_geometric", "torchrec", "embeddings.trainer")
"""Modules the rank server imports before it forks ranks (one that is not installed is skipped)."""


def _child(fn, rank, world_size, store_path, backend, args, env, q):
    import gc

    from graphdist.proc import end_with_parent
    gc.freeze()  # the server's imports: no collection of the rank walks them (the last one ends each rank)
    end_with_parent()  # a caller killed outright (a test runner's SIGTERM) takes its ranks along
    os.environ.clear()  # the caller's environment now, not the server's from when it started
    os.environ.update(env)
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                       "LOCAL_WORLD_SIZE": str(world_size)})
    try:
        import datetime

        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)
        try:
            dist.init_process_group(backend, init_method=f"file://{store_path}", rank=rank,
                                    world_size=world_size, timeout=datetime.timedelta(seconds=120))
        except Exception:  # noqa: BLE001 - the group did not form: the caller may start the job again
            q.put((rank, None, traceback.format_exc()))
            return
        try:
            out = fn(rank, world_size, *args)
        finally:
            try:
                from graphdist.procgroup import shutdown
                shutdown()  # its threads joined here, not at interpreter teardown
            except Exception:  # noqa: BLE001
                pass
        # plain pickle: tensors travel as bytes, not as shared-memory handles that die with the child
        q.put((rank, True, pickle.dumps(out)))
    except BaseException:  # noqa: BLE001 - report everything to the parent
        q.put((rank, False, traceback.format_exc()))


def _server():
    """The forkserver context whose server imports :data:`PRELOAD`."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))  # read when the server starts (the first call)
    return ctx


def _forked(fn, args, env):
    """In the forked process: end with the caller, take its environment of now, run ``fn``."""
    from graphdist.proc import end_with_parent
    end_with_parent()
    os.environ.clear()
    os.environ.update(env)
    fn(*args)


def fork(fn, args: tuple = ()):
    """``fn(*args)`` in one process forked from the rank server (torch already imported; no
    process group), started and returned as a :class:`multiprocessing.Process` to signal and
    join; it has the caller's environment and ends with the caller. Talk to it through
    :func:`pipe`."""
    p = _server().Process(target=_forked, args=(fn, args, dict(os.environ)), daemon=True)
    p.start()
    return p


def pipe():
    """A ``(mine, theirs)`` pair of connections; hand ``theirs`` to :func:`fork`'s ``fn``."""
    return _server().Pipe()


class _NoGroup(Exception):
    """A rank could not join the process group (before ``fn`` ran)."""


def run_ranks(fn, world_size: int, args: tuple = (), *, timeout: float = 120.0,
              backend: str = "gloo", env: dict | None = None) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` processes; return results by rank.
    A job whose process group did not form (gloo's mesh connect on a loopback shared with other
    jobs' sockets, seen once in a suite run: "Connection closed by peer") is started again once,
    from a fresh store; ``fn`` had not run on that rank."""
    try:
        return _run_once(fn, world_size, args, timeout, backend, env)
    except _NoGroup:
        pass
    try:
        return _run_once(fn, world_size, args, timeout, backend, env)
    except _NoGroup as e:
        raise RankFailure(f"the process group did not form twice:\n{e}") from None


def _run_once(fn, world_size: int, args: tuple, timeout: float, backend: str, env: dict | None) -> list:
    ctx = _server()
    q = ctx.Queue()
    tmp = tempfile.mkdtemp(prefix="graphdist-ranks-")
    store_path = os.path.join(tmp, "store")
    env = {**os.environ, **(env or {})}
    procs = [ctx.Process(target=_child, args=(fn, r, world_size, store_path, backend, args, env, q),
                         daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(world_size)) - set(results))
                raise RankTimeout(f"ranks {missing} did not finish within {timeout:.0f}s; killed")
            try:
                rank, ok, out = q.get(timeout=min(left, 0.5))
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(procs)
                        if r not in results and p.exitcode is not None]
                if dead:
                    time.sleep(0.5)  # its queue message may still be in flight
                    if q.empty():
                        raise RankFailure(f"rank {dead[0]} exited with code {procs[dead[0]].exitcode} "
                                          "without a result")
                continue
            if ok is None:
                raise _NoGroup(f"rank {rank} could not join:\n{out}")
            if not ok:
                raise RankFailure(f"rank {rank} failed:\n{out}")
            results[rank] = pickle.loads(out)
    finally:
        for p in procs:
            p.join(timeout=5 if len(results) == world_size else 0.1)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        q.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return [results[r] for r in range(world_size)]

