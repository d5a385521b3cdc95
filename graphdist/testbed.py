"""A small cluster on one machine: hosts as Linux network namespaces behind one switch.

Rehearse a multi-node job before a real cluster, or test one: each host has its own network
stack, address, hostname and hosts file, and optionally a capped link (``tc``'s token bucket,
both directions; :func:`link_burst`), so ranks on different hosts talk real TCP over a real, slow link::

    switch namespace  gdtb<id>sw   bridge br0
       |-- veth --  host 0  gdtb<id>h0   10.77.0.1  hostname h0   [rate cap]
       |-- veth --  host 1  gdtb<id>h1   10.77.0.2  hostname h1   [rate cap]
       ...

From the shell (root)::

    python -m graphdist.testbed --hosts 2 --gbps 1 -- \\
        graphdist train-gcn planetoid:datasets/cora --parts 2 --nnodes 2 --nproc 1 --rdzv-endpoint h0:29500

runs the command on every host at once (each line of output prefixed with its host, and a line
naming each host whose command failed, as it ends: ``[h1] graphdist.testbed: h1's command was
killed by SIGKILL``), exits with the first non-zero code (128 + N for a command killed by signal
N), and removes everything it made. From Python (tests)::

    with Testbed(2, gbps=1.0) as tb:
        procs = [tb.popen(i, ["graphdist", ...]) for i in range(2)]
        tb.cut(1); tb.heal(1)

Every namespace, interface and hosts file is named with a per-run id and removed on exit, also
when the body raises; a test bed left by a killed process is removed by the next one (its
owner's pid is in the name). Hosts share the machine's cores: each worker should take its share
of threads (graphdist's workers do: :func:`graphdist.procgroup.init_distributed`). Needs root and
``ip``/``tc`` (iproute2); :class:`TestbedError` says in one line why a test bed cannot be made.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading

from graphdist.errors import ConfigError

__all__ = ["Testbed", "TestbedError", "can_make", "finish", "link_burst", "main"]

SUBNET = "10.77.0"
PREFIX = "gdtb"


def link_burst(gbps: float) -> int:
    """Bytes of tbf's bucket for a cap of ``gbps``: about 1 ms of line rate, at least 16 KiB (a
    few full-size frames; tbf cuts a larger GSO segment into frames itself). A physical link sends
    nothing faster than its rate; a bigger bucket refills while the hosts compute and passes the
    head of every exchange at once. With the earlier 256 KiB bucket (21 ms of line rate at 0.1
    Gbit/s) a 0.5 MB all-to-all took 0.77x its time at the cap (BENCHMARKS.md, "What a gloo
    exchange gets from a capped link")."""
    return max(16 * 1024, int(gbps * 1e9 / 8 / 1000))


class TestbedError(ConfigError):
    """A test bed cannot be made here (no root, no iproute2, namespaces refused)."""

    __test__ = False  # (not a pytest test class)


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise TestbedError(f"test bed: `{' '.join(cmd)}` failed: {p.stderr.strip() or p.returncode}")
    return p


def can_make() -> str | None:
    """None when this process can make a test bed, else the one-line reason it cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root (this process is not root)"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2 / util-linux) is not installed"
    probe = f"{PREFIX}{os.getpid()}probe"
    p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if p.returncode != 0:
        return f"`ip netns add` refused: {p.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _sweep_orphans() -> None:
    """Remove test beds whose owning process is gone (killed before it could clean up)."""
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        digits = name[len(PREFIX):].split("x")[0]
        if digits.isdigit() and not os.path.exists(f"/proc/{int(digits)}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


class Testbed:
    """``n`` hosts behind one switch; a context manager that removes everything on exit.

    ``gbps``: each host's link rate in Gbit/s, both directions (None: the veth's own speed).
    Host i is ``h{i}`` at ``10.77.0.{i+1}``; every host's hosts file names every host.
    """

    def __init__(self, n: int, gbps: float | None = None, *, names: list[str] | None = None):
        if n < 1:
            raise ConfigError(f"a test bed needs at least 1 host, got {n}")
        if gbps is not None and gbps <= 0:
            raise ConfigError(f"--gbps must be > 0, got {gbps}")
        self.n, self.gbps = n, gbps
        self.names = names or [f"h{i}" for i in range(n)]
        self.id = f"{os.getpid()}x{os.urandom(2).hex()}"
        self.switch = f"{PREFIX}{self.id}sw"
        self.ns = [f"{PREFIX}{self.id}h{i}" for i in range(n)]
        self._made: list[str] = []
        self._procs: list[subprocess.Popen] = []

    def addr(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def hosts_file(self, i: int) -> str:
        """The hosts file host ``i`` sees: localhost, then every host of the bed."""
        lines = ["127.0.0.1 localhost"] + [f"{self.addr(j)} {self.names[j]}" for j in range(self.n)]
        return "\n".join(lines) + "\n"

    # -- making and removing -------------------------------------------------------------------
    def __enter__(self) -> "Testbed":
        why = can_make()
        if why:
            raise TestbedError(f"cannot make a test bed: {why}")
        _sweep_orphans()
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _make(self) -> None:
        _ip("ip", "netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("ip", "link", "add", "br0", "type", "bridge", ns=self.switch)
        _ip("ip", "link", "set", "br0", "up", ns=self.switch)
        for i, ns in enumerate(self.ns):
            _ip("ip", "netns", "add", ns)
            self._made.append(ns)
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            with open(f"/etc/netns/{ns}/hosts", "w") as f:
                f.write(self.hosts_file(i))
            # the pair is made inside the switch namespace (names there are private to this bed)
            _ip("ip", "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns, ns=self.switch)
            _ip("ip", "link", "set", f"p{i}", "master", "br0", "up", ns=self.switch)
            _ip("ip", "addr", "add", f"{self.addr(i)}/24", "dev", "eth0", ns=ns)
            _ip("ip", "link", "set", "eth0", "up", ns=ns)
            _ip("ip", "link", "set", "lo", "up", ns=ns)
            if self.gbps:
                self.set_rate(i, self.gbps)

    def set_hosts(self, i: int, text: str) -> None:
        """Replace host ``i``'s hosts file (to rehearse a cluster whose names resolve wrongly)."""
        with open(f"/etc/netns/{self.ns[i]}/hosts", "w") as f:
            f.write(text)

    def set_rate(self, i: int, gbps: float) -> None:
        """Cap host ``i``'s link at ``gbps`` Gbit/s in both directions (tbf on each end)."""
        rate = f"{int(gbps * 1e6)}kbit"
        burst = link_burst(gbps)
        for ns, dev in ((self.ns[i], "eth0"), (self.switch, f"p{i}")):
            _ip("tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", str(burst),
                "latency", "50ms", ns=ns)

    def cut(self, i: int) -> None:
        """Take host ``i``'s link down (its packets go nowhere; peers see a silent host)."""
        _ip("ip", "link", "set", f"p{i}", "down", ns=self.switch)

    def heal(self, i: int) -> None:
        """Bring host ``i``'s link back (and forget the failed address lookups of the cut)."""
        _ip("ip", "link", "set", f"p{i}", "up", ns=self.switch)
        for ns in self.ns:
            _ip("ip", "neigh", "flush", "dev", "eth0", ns=ns, check=False)

    def link_bytes(self, i: int) -> tuple[int, int]:
        """(received, sent) bytes of host ``i``'s interface so far (its kernel counters)."""
        out = _ip("cat", "/sys/class/net/eth0/statistics/rx_bytes", "/sys/class/net/eth0/statistics/tx_bytes",
                  ns=self.ns[i]).stdout.split()
        return int(out[0]), int(out[1])

    def close(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in reversed(self._made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        self._made.clear()

    # -- running -------------------------------------------------------------------------------
    def command(self, i: int, argv: list[str]) -> list[str]:
        """``argv`` as host ``i`` runs it: in its namespace, with its own hostname (a private UTS
        namespace) and hosts file."""
        script = 'hostname "$0" && exec "$@"'
        return ["ip", "netns", "exec", self.ns[i], "unshare", "--uts", "sh", "-c", script, self.names[i], *argv]

    def popen(self, i: int, argv: list[str], **kw) -> subprocess.Popen:
        """Start ``argv`` on host ``i`` (``subprocess.Popen`` keywords pass through); the test bed
        kills it on exit if it still runs."""
        p = subprocess.Popen(self.command(i, argv), **kw)
        self._procs.append(p)
        return p

    def run_all(self, argvs: list[list[str]], timeout: float | None = None, **kw) -> list[tuple[int, str]]:
        """Run ``argvs[i]`` on host ``i``, all at once, to the end: each host's (exit code, output
        with stderr). ``Popen`` keywords (``env``) pass through; past ``timeout`` seconds a host's
        command is killed and its code is the kill's."""
        procs = [self.popen(i, a, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
                 for i, a in enumerate(argvs)]
        return finish(procs, timeout)

    def run(self, i: int, argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` on host ``i`` to the end; its output captured as text."""
        return subprocess.run(self.command(i, argv), capture_output=True, text=True, timeout=timeout)


def finish(procs: list[subprocess.Popen], timeout: float | None = None) -> list[tuple[int, str]]:
    """Each process's (exit code, output) once it ends (started with ``stdout=PIPE``); one still
    running after ``timeout`` seconds is killed."""
    out = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
        out.append((p.returncode, text))
    return out


_OUT = threading.Lock()


def _say(out, text: str) -> None:
    with _OUT:  # (one host's line at a time)
        out.write(text)
        out.flush()


def _pump(proc: subprocess.Popen, tag: str, out) -> None:
    """Host ``tag``'s output, each line prefixed with the host; then, when its command failed,
    one line saying how it ended (a process killed on one host otherwise leaves only its peers'
    lines, which name ranks, not hosts)."""
    for line in iter(proc.stdout.readline, b""):
        _say(out, f"[{tag}] {line.decode(errors='replace')}")
    code = proc.wait()
    if code != 0:
        _say(out, f"[{tag}] graphdist.testbed: {ended(tag, code)}\n")


def ended(host: str, code: int) -> str:
    """How host ``host``'s command ended, in words: ``h1's command was killed by SIGKILL`` or
    ``... exited with code 2``."""
    import signal
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{host}'s command was killed by {name}"
    return f"{host}'s command exited with code {code}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m graphdist.testbed",
        description="Run a command on each of N hosts of a network-namespace cluster on this machine "
                    "(root), then remove the cluster. '{host}' and '{i}' in the command become each "
                    "host's name and index.")
    ap.add_argument("--hosts", type=int, default=2, help="number of hosts (h0, h1, ...; default 2)")
    ap.add_argument("--gbps", type=float, default=None, help="cap each host's link at this rate, Gbit/s")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... (run on every host)")
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("give the command to run on every host after --")
    try:
        with Testbed(a.hosts, a.gbps) as tb:
            procs, pumps = [], []
            for i in range(a.hosts):
                argv_i = [c.replace("{host}", tb.names[i]).replace("{i}", str(i)) for c in cmd]
                p = tb.popen(i, argv_i, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                t = threading.Thread(target=_pump, args=(p, tb.names[i], sys.stdout), daemon=True)
                t.start()
                procs.append(p)
                pumps.append(t)
            codes = [p.wait() for p in procs]
            for t in pumps:
                t.join(timeout=5)
    except KeyboardInterrupt:
        return 130
    except (TestbedError, ConfigError) as e:
        print(f"graphdist: error: {e}", file=sys.stderr)
        return 2
    code = next((c for c in codes if c != 0), 0)
    return 128 - code if code < 0 else code  # killed by a signal: 128 + its number, as a shell says


if __name__ == "__main__":
    sys.exit(main())
