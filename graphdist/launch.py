"""Start local workers through torch's own launcher, and run a job's body with one error policy.

``launch(nproc, fn, cfg)`` starts ``nproc`` workers with ``torch.distributed.run``'s elastic agent
(the machinery behind ``torchrun``); each runs ``python -m graphdist.worker`` and calls
``fn(cfg)``. The config travels as JSON (:mod:`graphdist.config`), never as a rebuilt command
line. Workers read RANK/WORLD_SIZE/MASTER_ADDR from the environment exactly as under an external
``torchrun``, so multi-node runs use the same commands with no flag changes::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m graphdist train-gcn --partition parts/ --epochs 200

If a worker dies the agent stops the others and :func:`launch` names the failed rank.
"""
from __future__ import annotations

import logging
import os
import sys
import uuid
from dataclasses import dataclass, field

import torch

from graphdist import config as config_mod
from graphdist.errors import USER_ERRORS, DistributedError, Interrupted
from graphdist.proc import env_world, kept_signal_handlers

__all__ = ["Nodes", "under_launcher", "started_by_graphdist", "start_hint", "launch", "run_job", "rank_main",
           "guarded", "leave", "print_error"]


@dataclass
class Nodes:
    """Where a job's workers run: this node only, or several nodes meeting at one endpoint."""

    nnodes: str = field(default="1", metadata={"metavar": "N|MIN:MAX"})
    """nodes of a multi-node job: run the same command on each of them, with --rdzv-endpoint;
    MIN:MAX keeps going on as few as MIN nodes when others are lost (with --max-restarts, the
    group re-forms on the nodes left and resumes from the last checkpoint on fewer ranks)"""
    rdzv_endpoint: str | None = field(default=None, metadata={"metavar": "HOST:PORT"})
    """a multi-node job's meeting point: a free port on one of its nodes (torch's c10d rendezvous)"""
    rdzv_id: str = "graphdist"
    """job id, the same on every node (two jobs sharing an endpoint need different ids)"""
    rdzv_timeout: float = 600.0
    """seconds a node waits for the endpoint to answer and for every node to join (torch's join timeout)"""
    rdzv_last_call: int = 30
    """with --nnodes MIN:MAX: seconds the group waits for more nodes once MIN have joined (torch's
    last call), at the start and each time it re-forms after a node is lost"""
    max_restarts: int = 0
    """restart the workers this many times when one fails (torch's elastic agent restarts the
    whole group); with --resume auto and --checkpoint-dir they continue from the last checkpoint"""

    @property
    def min_nodes(self) -> int:
        """The fewest nodes the job runs on (N of ``--nnodes N``, MIN of ``MIN:MAX``)."""
        return _node_range(self.nnodes)[0]

    @property
    def max_nodes(self) -> int:
        """The nodes the job starts on (N, or MAX of ``MIN:MAX``): the world the parts are cut for."""
        return _node_range(self.nnodes)[1]

    @property
    def elastic(self) -> bool:
        """``--nnodes MIN:MAX`` with MIN < MAX: the group may re-form on fewer nodes."""
        lo, hi = _node_range(self.nnodes)
        return lo < hi

    def validate(self) -> None:
        from graphdist.errors import ConfigError
        _node_range(self.nnodes)
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts must be >= 0, got {self.max_restarts}")
        if self.rdzv_last_call < 0:
            raise ConfigError(f"--rdzv-last-call must be >= 0 seconds, got {self.rdzv_last_call}")
        if self.rdzv_timeout <= 0:
            raise ConfigError(f"--rdzv-timeout must be > 0 seconds, got {self.rdzv_timeout}")
        if self.max_nodes > 1 and not self.rdzv_endpoint and not under_launcher():  # (torchrun's own, else)
            raise ConfigError(f"--nnodes {self.nnodes} needs --rdzv-endpoint HOST:PORT (one node's address "
                              "and a free port, the same on every node)")


def _node_range(text) -> tuple[int, int]:
    """``(min, max)`` of ``--nnodes N`` or ``--nnodes MIN:MAX``; one line naming the flag if bad."""
    from graphdist.errors import ConfigError
    lo, _, hi = str(text).partition(":")
    try:
        lo_n, hi_n = int(lo), int(hi if hi else lo)
    except ValueError:
        raise ConfigError(f"--nnodes takes N or MIN:MAX (whole numbers), got {text!r}") from None
    if lo_n < 1 or hi_n < lo_n:
        raise ConfigError(f"--nnodes {text}: needs 1 <= MIN <= MAX, got MIN {lo_n} and MAX {hi_n}")
    return lo_n, hi_n


def under_launcher() -> bool:
    """True inside a worker started by torchrun / ``--nproc`` (the env names this rank)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def started_by_graphdist() -> bool:
    """True in a worker that :func:`launch` started (``python -m graphdist.worker``), as opposed
    to one of an external ``torchrun``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "graphdist.worker"


def start_hint(k: int) -> str:
    """How to start ``k`` workers, in the flags of what starts them: graphdist's ``--nproc`` (per
    node, with ``--nnodes``), or under an external launcher, which ignores ``--nproc``, torchrun's
    ``--nproc-per-node`` (and ``--nnodes``, from the launcher's node count)."""
    pre, per = ("torchrun ", "--nproc-per-node") if under_launcher() and not started_by_graphdist() else ("", "--nproc")
    nodes = max(1, int(os.environ.get("GROUP_WORLD_SIZE", 1))) if under_launcher() else 1
    if nodes == 1:
        return f"{pre}{per} {k}"
    if k % nodes == 0:
        return f"{pre}--nnodes {nodes} {per} {k // nodes}"
    return f"{pre}--nnodes N {per} M with N x M = {k}"


def _path(obj) -> str:
    return f"{obj.__module__}:{obj.__qualname__}"


def launch(nproc: int, fn, cfg, *, nodes: Nodes | None = None, monitor_interval: float = 0.2) -> int:
    """Run ``fn(cfg)`` on ``nproc`` workers on this node (with ``nodes``: on each of
    ``nodes.nnodes`` nodes that run the same command); return an exit code.

    Exit 2 when a worker reported a user error (it printed its own one-line message), 128 +
    signal when the job was interrupted; otherwise a failed worker or a lost node raises
    :class:`DistributedError` with one line naming it.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from graphdist.memory import check_workers_start
    check_workers_start(nproc)
    nodes = nodes or Nodes()
    net, rdzv_configs = None, {}
    if nodes.max_nodes == 1:
        # port 0: the agent's store binds a port the OS picks (as torchrun --standalone), so two
        # jobs started at once cannot race for the same port; workers connect to the agent's store
        endpoint, run_id = "127.0.0.1:0", f"graphdist-{uuid.uuid4().hex[:8]}"
    else:
        endpoint, run_id = nodes.rdzv_endpoint, nodes.rdzv_id
        # where the store runs, what the other nodes dial and gloo's interface: from the route to
        # the endpoint, not from this node's hostname (graphdist/netif.py)
        from graphdist.netif import node_network
        net = node_network(endpoint, wait_s=nodes.rdzv_timeout)
        rdzv_configs["join_timeout"] = int(nodes.rdzv_timeout)
        rdzv_configs["last_call_timeout"] = int(nodes.rdzv_last_call)
        if net.is_host is not None:
            rdzv_configs["is_host"] = net.is_host
    lc = LaunchConfig(min_nodes=nodes.min_nodes, max_nodes=nodes.max_nodes, nproc_per_node=nproc, run_id=run_id,
                      rdzv_backend="c10d", rdzv_endpoint=endpoint, max_restarts=nodes.max_restarts,
                      monitor_interval=monitor_interval, start_method="spawn", rdzv_configs=rdzv_configs,
                      local_addr=net.local_ip if net and net.is_host is not None else None)
    # the agent's own log repeats what the workers and this function already say; its modules
    # set their own levels (LOGLEVEL, default WARNING), so each logger is quietened by name
    for name in [*logging.root.manager.loggerDict, "torch.distributed.elastic"]:
        if name.startswith("torch.distributed.elastic") or name.startswith("torch.distributed.launcher"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    env_set = {}  # for the workers (and the agent), unless the user set them
    if net is not None and net.ifname:
        env_set.update({"GLOO_SOCKET_IFNAME": net.ifname, "NCCL_SOCKET_IFNAME": net.ifname})
    if nodes.max_nodes > 1:
        # each round of the worker group meets at a fresh store (its rank 0's, as torch's env://),
        # not the agent's shared one, which holds the keys of every earlier round: nothing a failed
        # round left can be read (a user's own torchrun shares the agent's store; the workers then
        # agree on their round's keys through it, graphdist/restarts.py)
        env_set["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    env_set = {k: v for k, v in env_set.items() if k not in os.environ}
    os.environ.update(env_set)
    try:
        with kept_signal_handlers():  # the agent's handlers leave with it: the caller's are back
            elastic_launch(lc, sys.executable)("-m", "graphdist.worker", _path(fn), _path(type(cfg)),
                                               config_mod.to_json(cfg))
    except SignalException as e:  # Ctrl-C / SIGTERM: the agent forwarded it to the workers, which
        from graphdist.torch_internals import stop_keep_alive_timers  # stopped at a step boundary and
        stop_keep_alive_timers()  # printed where (rank 0); torch left the rendezvous open (item 2 there)
        return 128 + int(e.sigval)
    except RendezvousError as e:  # the node hosting the rendezvous store is gone, or never came
        from graphdist.failures import first_sentences
        first = first_sentences(str(e)) or type(e).__name__
        raise DistributedError(f"lost the job's rendezvous at {endpoint} (node of the store host gone, or "
                               f"not all {nodes.nnodes} nodes joined): {type(e).__name__}: {first}") from None
    except ChildFailedError as e:
        return _workers_failed(e, nproc)
    finally:
        for k in env_set:
            os.environ.pop(k, None)
    return 0


RESULT_ENV = "GRAPHDIST_RESULT_FILE"
"""Set by :func:`run_job` for the workers it launches: rank 0 writes the report there, so the
launching process can return it (its own workers' result, not a user setting)."""


def run_job(fn, cfg, nproc: int, nodes: Nodes | None = None) -> dict | None:
    """``fn(cfg)`` here (one process, or already a worker of a launcher) or on ``nproc`` local
    workers (per node, with ``nodes``); returns the job's report (``fn``'s return value; from
    launched workers, the report rank 0 wrote). A launched job whose workers stopped with a user
    error or a signal (which they printed) raises :class:`~graphdist.errors.JobFailed`; on the
    other nodes of a multi-node job the report is None (rank 0 lives on the first node)."""
    import tempfile

    from graphdist.errors import JobFailed
    nodes = nodes or Nodes()
    if not ((nproc > 1 or nodes.max_nodes > 1 or nodes.max_restarts > 0) and not under_launcher()):
        return fn(cfg)  # (a job that may be restarted runs under the agent, even on one process)
    with tempfile.TemporaryDirectory(prefix="graphdist-job-") as d:
        path = os.path.join(d, "report.json")
        before = os.environ.get(RESULT_ENV)
        os.environ[RESULT_ENV] = path
        try:
            code = launch(nproc, fn, cfg, nodes=nodes)
        finally:
            if before is None:
                os.environ.pop(RESULT_ENV, None)
            else:
                os.environ[RESULT_ENV] = before
        if code != 0:
            raise JobFailed(code)
        if not os.path.exists(path):
            return None
        import json
        with open(path) as f:
            return json.load(f)


def rank_main(train, cfg, summary) -> dict:
    """A worker's whole life, the same for every trainer: ``train(cfg)`` on this rank (it joins
    the process group from the environment and returns the report on every rank); a failure is
    published while the group still exists, so peers can name it; the group is destroyed. Rank 0
    then prints ``summary(report)`` (unless ``cfg.summary`` is off) and only then writes
    ``cfg.report``: a report that cannot be written does not lose the result. Returns the report."""
    from pathlib import Path

    from graphdist import failures
    from graphdist.fileio import atomic_write_json, write_report
    from graphdist.hosts import placement
    from graphdist.procgroup import shutdown
    from graphdist.restarts import group_restarts
    try:
        rep = train(cfg)
        where = placement().report()  # (agreed as the group formed: read before it goes)
    except BaseException as e:
        failures.publish_failure(e)
        raise
    finally:
        if not failures.broken():  # (a broken group is left alone: the worker exits around it)
            shutdown()
    rep.update(where)
    rep["run/restarts"] = group_restarts()
    rep["run/threads"] = torch.get_num_threads()
    if env_world()[0] == 0:
        show = getattr(cfg, "summary", True)
        if show:
            print(summary(rep), flush=True)
        if cfg.report:
            write_report(cfg.report, rep)
            if show:
                print(f"report: {Path(cfg.report)}", flush=True)
        if os.environ.get(RESULT_ENV):
            atomic_write_json(os.environ[RESULT_ENV], rep)
    return rep


def _workers_failed(e, nproc: int) -> int:
    """The exit code of a job whose workers failed (torch's ``ChildFailedError``): a user error or
    an interruption the workers reported keeps its code. A user error every rank hits alike is
    printed by rank 0 only; when no rank printed it (another rank got there first and the agent
    stopped rank 0 before it said why: a slow start on a loaded machine), the line the lowest rank
    left in its error file (:func:`_leave_error_file`) is printed here, so the user reads it once."""
    codes = {int(r): f.exitcode for r, f in e.failures.items()}
    for c in (2, 128 + 2, 128 + 15):
        if c in codes.values():
            data = [(int(r), f.message, f.error_file_data) for r, f in e.failures.items()]
            if c == 2 and not any(isinstance(d, dict) and d.get("printed") for _, _, d in data):
                said = sorted((r, m) for r, m, _ in data if codes[r] == 2 and isinstance(m, str) and m)
                if said:
                    sys.stderr.write(f"graphdist: error: {said[0][1]}\n")
            return c
    # the first worker to fail is the cause; the agent SIGTERMs (-15) the rest afterwards
    first = sorted(e.failures.items(), key=lambda kv: (kv[1].exitcode == -15, kv[1].timestamp, int(kv[0])))
    r = int(first[0][0])
    raise DistributedError(f"worker rank {r} failed with exit code {codes[r]}; "
                           f"the launcher stopped the other {nproc - 1} worker(s)") from None


def _leave_error_file(message: str, printed: bool) -> None:
    """This rank's error line, and whether it printed it, in the error file torch's agent gives
    each worker (``TORCHELASTIC_ERROR_FILE``, the ``message``/``timestamp`` format of torch's
    ``ErrorHandler``): the launcher prints the line when no rank did (:func:`_workers_failed`), and
    torchrun's own failure report shows it. Best effort: nothing without such a file."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    import time

    from graphdist.fileio import atomic_write_json
    try:
        atomic_write_json(path, {"message": message, "timestamp": int(time.time()), "printed": printed})
    except OSError:
        pass


def print_error(e: BaseException, prefix: str = "error") -> bool:
    """One line on stderr (True: this rank printed it). A user error that every rank hits alike is printed by rank 0 only;
    a distributed failure is printed by every rank that sees it (each names what it saw)."""
    rank, world, _ = env_world()
    if rank == 0 or world == 1 or isinstance(e, DistributedError):
        sys.stderr.write(f"graphdist: {prefix}: {e}\n")
        sys.stderr.flush()
        return True
    return False


def leave(rc: int) -> int:
    """The exit code for a process that ran a job: ``rc`` as it is, or, after a failed collective
    (:func:`graphdist.failures.broken`), an immediate exit with it (output flushed) that never tears
    down a process group whose threads may wait on a dead peer or a cut link; otherwise the exit
    skips the interpreter's walk of every object (:func:`graphdist.proc.skip_final_collection`).
    Every entry point of a process that runs a job ends through it: the ``graphdist`` command
    (:func:`graphdist.cli.run`), ``python -m graphdist`` (also under torchrun) and
    :mod:`graphdist.worker`."""
    from graphdist import failures
    from graphdist.proc import skip_final_collection
    if failures.broken():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    skip_final_collection()
    return rc


def guarded(fn, *args) -> int:
    """``fn(*args)`` with the CLI's error policy:

    * a user error (``USER_ERRORS``) becomes one line (:func:`print_error`), exit code 2; it is
      also left in the rendezvous store, so a peer that sees the collective fail can name it;
    * :class:`~graphdist.errors.Interrupted` (SIGINT/SIGTERM at a step boundary): one line, exit
      code 128 + signal; a Ctrl-C outside training: one line, exit 130;
    * running out of memory: one line naming the rank, exit 1;
    * anything else is a bug: its traceback, then one line naming the rank, exit 1."""
    from graphdist import failures
    from graphdist.errors import JobFailed
    rank, world, _ = env_world()
    try:
        rv = fn(*args)
        return rv if isinstance(rv, int) else 0
    except JobFailed as e:  # launched workers already said why
        return e.exit_code
    except Interrupted as e:
        print_error(e, "interrupted")
        return e.exit_code
    except USER_ERRORS as e:
        failures.publish_error(str(e))
        _leave_error_file(str(e), print_error(e))
        return 2
    except KeyboardInterrupt:
        if rank == 0:
            sys.stderr.write("graphdist: interrupted (Ctrl-C)\n")
        return 130
    except (torch.OutOfMemoryError, MemoryError) as e:
        first = failures.first_sentences(str(e), 300) or type(e).__name__
        failures.publish_error(f"out of memory: {first}")
        sys.stderr.write(f"graphdist: error: rank {rank} of {world} ran out of memory: {first}\n")
        return 1
    except Exception as e:  # noqa: BLE001 - a bug: keep the traceback, then say where
        if failures.is_collective_failure(e):  # a peer or the network failed outside a training loop
            try:
                failures.raise_peer_failure(e, "the job")
            except DistributedError as de:
                _leave_error_file(str(de), print_error(de))
                return 2
        import traceback
        traceback.print_exc()
        failures.publish_error(f"{type(e).__name__}: {failures.first_sentences(str(e))}")
        sys.stderr.write(f"graphdist: error: rank {rank} of {world} failed with {type(e).__name__} "
                         "(traceback above)\n")
        return 1
