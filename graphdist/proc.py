"""A process's lifetime: where it sits in the job by its launcher's word (:func:`env_world`),
workers that end with the agent that started them, a launch that leaves the caller's signal
handlers as it found them, SIGINT / SIGTERM turned into a stop at a step boundary
(:class:`GracefulStop`), and an exit that does not walk every object torch made
(:func:`skip_final_collection`).

Light on purpose (no torch): a worker calls :func:`end_with_parent` before its first heavy
import, so that an agent lost at any moment of the worker's start takes the worker with it.
"""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import time

__all__ = ["env_world", "started_by_an_agent", "end_with_parent", "parent_death_signal", "can_end_with_parent",
           "kept_signal_handlers", "HANDLED_SIGNALS", "GracefulStop", "skip_final_collection"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

HANDLED_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
                        if hasattr(signal, n))
"""The signals torch's elastic agent takes over while it runs workers (its
``TORCHELASTIC_SIGNALS_TO_HANDLE`` default)."""

_armed = False


def env_world() -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from the launcher's environment (``RANK``,
    ``WORLD_SIZE``, ``LOCAL_RANK``; one process when unset)."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", 0))))


def started_by_an_agent() -> bool:
    """True in a worker of torch's elastic agent (``torchrun``, or graphdist's ``--nproc`` /
    ``--nnodes``): the agent names its run in the environment it gives its workers."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def end_with_parent() -> bool:
    """Have the kernel kill this process (SIGKILL) when the process that started it exits, and
    return whether that is now so.

    torch's agent starts each worker in a session of its own, so a signal to the agent's process
    group never reaches the workers, and an agent killed outright (its node lost, ``kill -9``, the
    out-of-memory killer) used to leave its worker training on with the other nodes. Linux's
    ``PR_SET_PDEATHSIG`` ends the worker with its agent instead; the other nodes' workers then see
    a lost peer and stop with one line, as when the whole node goes. Elsewhere (no ``prctl``)
    nothing changes. If the parent is already gone when this is called, the process exits now."""
    global _armed
    if _armed:
        return True
    parent = os.getppid()
    if not parent_death_signal():
        return False
    _armed = True
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(128 + int(signal.SIGKILL))
    return True


@functools.cache
def _prctl():
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def can_end_with_parent() -> bool:
    """Whether this system has ``prctl`` (Linux); looks it up, so that a forked child finds it."""
    return _prctl() is not None


def parent_death_signal() -> bool:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)`` for this process, nothing more; whether it took.
    The kernel sends it when the *thread* that started this process exits, and keeps it across
    ``exec``: usable as a ``subprocess.Popen`` ``preexec_fn`` from a main thread (after
    :func:`can_end_with_parent` in the parent, so the child finds ``prctl`` already looked up)."""
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0


@contextlib.contextmanager
def kept_signal_handlers(signals=HANDLED_SIGNALS):
    """Run the block and then put back every handler of ``signals`` it replaced, also when it
    raised. torch's elastic agent installs handlers of its own for SIGINT, SIGTERM, SIGHUP and
    SIGQUIT and never removes them: a notebook, a script or a test runner that launched a job
    kept a Ctrl-C that raised torch's ``SignalException`` in unrelated later code. Off the main
    thread (where handlers cannot be set) the block just runs."""
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in signals}
    try:
        yield
    finally:
        for s, h in saved.items():
            if h is not None:  # None: installed outside Python, cannot be restored from here
                signal.signal(s, h)


class GracefulStop:
    """SIGINT / SIGTERM that arrive inside ``with GracefulStop() as stop:`` only set
    ``stop.signum``; the training loop polls it at a step boundary (agreeing across ranks), saves
    what it must and raises :class:`~graphdist.errors.Interrupted`. A second signal more than a
    second after the first (a user pressing Ctrl-C again) interrupts at once; one that follows
    within the second is the launcher forwarding the same Ctrl-C and is absorbed. Outside the
    block the previous handlers apply. Only the main thread can install handlers; elsewhere this
    is a no-op."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signum: int | None = None
        self._t = 0.0
        self._old: dict = {}

    def _handle(self, signum, frame):
        if self.signum is None:
            self.signum, self._t = signum, time.monotonic()
            return
        if time.monotonic() - self._t > 1.0:
            self.__exit__()
            raise KeyboardInterrupt

    def __enter__(self) -> "GracefulStop":
        try:
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
        except ValueError:  # not the main thread
            self._old.clear()
        return self

    def __exit__(self, *exc) -> bool:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old.clear()
        return False

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""


def skip_final_collection() -> None:
    """Put every object alive now out of the cyclic garbage collector's reach (``gc.freeze``), in
    a process whose job is over and which is about to exit: the interpreter's teardown then frees
    what reference counts free but no longer walks the millions of objects that importing torch
    and torchrec made. That walk was the last second of every command and every worker: measured
    on the 2-core box, ``import torch`` then exit spent 0.5 s of CPU in teardown, ``import
    torchrec`` 1.2 s; frozen, 0.15 and 0.25 s.

    Nothing is lost: atexit handlers still run and stdout/stderr are still flushed; graphdist
    closes and fsyncs what it writes before this point; and Python never promised to finalize
    objects still alive when the interpreter exits (the ``object.__del__`` documentation), which
    is all a frozen object can miss. Called by :func:`graphdist.launch.leave`, the last step of
    the ``graphdist`` command, ``python -m graphdist`` and a launched worker; never by
    :func:`graphdist.cli.main`, whose caller may go on (frozen objects are never collected)."""
    import gc
    gc.freeze()
