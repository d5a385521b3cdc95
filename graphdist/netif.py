"""Which of this node's addresses and interfaces reach the job's other nodes (no torch here).

A multi-node job meets at one node's endpoint (``--rdzv-endpoint HOST:PORT``). Left alone,
torch decides three things from this node's *hostname*: whether this node hosts the rendezvous
store (its hostname's addresses against HOST), the address the other nodes use to reach it
(``socket.getfqdn()``) and the address gloo listens on (what the hostname resolves to). On a
cluster whose hostnames resolve to 127.0.0.1 (a shared image, a container), or do not resolve at
all, every one of those is wrong, and the job waits out its timeouts and ends in a stack trace.
:func:`node_network` decides them from the route to the endpoint instead::

    endpoint HOST:PORT --resolve--> 10.0.0.1 --route--> local address 10.0.0.2 on eth0
    hosts the store:  10.0.0.1 is one of this node's own addresses
    gloo / NCCL:      GLOO_SOCKET_IFNAME=eth0 (unless already set)
    torch's agent:    local_addr=10.0.0.2 (what the other nodes dial)
"""
from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import socket
import struct
import time
from dataclasses import dataclass

from graphdist.errors import ConfigError, DistributedError

__all__ = ["NodeNet", "node_network", "resolve", "local_route", "is_own_address", "interface_of",
           "choose_ifname", "pick_worker_interface", "free_port"]

_SIOCGIFADDR = 0x8915


@dataclass(frozen=True)
class NodeNet:
    """How this node takes part in a multi-node job."""

    endpoint: str
    """the rendezvous endpoint as given, HOST:PORT"""
    endpoint_ip: str
    """HOST resolved on this node"""
    port: int
    """the endpoint's port"""
    local_ip: str
    """this node's address on the route to the endpoint: what the other nodes dial"""
    ifname: str | None
    """the interface holding ``local_ip`` (None: not found, e.g. not Linux)"""
    is_host: bool | None
    """True when the endpoint is one of this node's own addresses and its port is free: this node
    runs the store; None for a loopback endpoint (every node on this machine: torch decides)"""


def resolve(host: str) -> str:
    """``host``'s IPv4 address on this node; ConfigError naming it when it does not resolve."""
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except (socket.gaierror, UnicodeError) as e:
        raise ConfigError(f"--rdzv-endpoint: the host name {host!r} does not resolve on this node "
                          f"({socket.gethostname()}): {e.strerror or e}; use the first node's IP address "
                          "or add the name to /etc/hosts") from None


def local_route(ip: str, port: int) -> str | None:
    """This node's source address for packets to ``ip`` (the kernel's route; nothing is sent),
    or None when there is no route."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((ip, port))
        except OSError:
            return None
        return s.getsockname()[0]


def is_own_address(ip: str) -> bool:
    """True when ``ip`` is one of this node's addresses (a socket can bind to it)."""
    if ipaddress.ip_address(ip).is_loopback:
        return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((ip, 0))
            return True
        except OSError:
            return False


def interface_of(ip: str) -> str | None:
    """The name of the interface that holds IPv4 address ``ip`` (Linux), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                req = struct.pack("256s", name.encode()[:15])
                addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), _SIOCGIFADDR, req)[20:24])
            except OSError:
                continue
            if addr == ip:
                return name
    return None


def choose_ifname(peer_host: str, port: int = 9) -> str | None:
    """The interface this node reaches ``peer_host`` through, or None (unresolvable, no route,
    unknown interface)."""
    try:
        ip = socket.getaddrinfo(peer_host, None, socket.AF_INET)[0][4][0]
    except (socket.gaierror, UnicodeError):
        return None
    src = local_route(ip, port)
    return interface_of(src) if src else None


def _port_free(ip: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
            return True
        except OSError:
            return False


def _wait_reachable(ip: str, port: int, timeout_s: float) -> str | None:
    """Try a TCP connection to ``ip:port`` until it succeeds (None) or ``timeout_s`` passes
    (the last error, in words)."""
    deadline = time.monotonic() + timeout_s
    last = "timed out"
    while True:
        try:
            with socket.create_connection((ip, port), timeout=min(5.0, max(0.5, deadline - time.monotonic()))):
                return None
        except OSError as e:
            last = os.strerror(e.errno) if e.errno else (str(e) or type(e).__name__)
            if e.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH) and time.monotonic() + 3 > deadline:
                return last
        if time.monotonic() >= deadline:
            return last
        time.sleep(1.0)


def node_network(endpoint: str, wait_s: float = 60.0) -> NodeNet:
    """Decide how this node joins the job meeting at ``endpoint`` (HOST:PORT).

    A node that does not host the store waits up to ``wait_s`` for the endpoint to accept a
    connection (the first node may start later), then stops with one line naming the endpoint
    and the error: an unreachable endpoint ends here, not in torch's timeouts.
    """
    host, sep, port_s = endpoint.rpartition(":")
    if not sep or not host or not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise ConfigError(f"--rdzv-endpoint {endpoint!r}: expected HOST:PORT with a port in 1..65535")
    host = host.strip("[]")
    port = int(port_s)
    ip = resolve(host)
    src = local_route(ip, port)
    me = socket.gethostname()
    if src is None:
        raise DistributedError(f"--rdzv-endpoint {endpoint}: no route from this node ({me}) to {ip}")
    if ipaddress.ip_address(ip).is_loopback:  # every node on this machine (a rehearsal)
        return NodeNet(endpoint, ip, port, src, None, None)
    own = is_own_address(ip) and _port_free(ip, port)  # (in use: another node here hosts it)
    if not own:
        why = _wait_reachable(ip, port, wait_s)
        if why is not None:
            raise DistributedError(f"cannot reach the rendezvous endpoint {endpoint} ({ip}) from this node "
                                   f"({me}, {src}) for {wait_s:.0f} s: {why}; is the command running on the "
                                   "first node, and is the address right?")
    return NodeNet(endpoint, ip, port, src, interface_of(src), own)


def pick_worker_interface(rank: int) -> None:
    """A worker's gloo (and NCCL's bootstrap) interface: they listen on the address this node's
    hostname resolves to, which on many clusters is 127.0.0.1, where the other nodes cannot reach
    it. Unless the user named both, set ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` to the
    interface that routes to the job's store (``MASTER_ADDR``); nothing when the store is on this
    machine's loopback (a rehearsal of nodes on one machine)."""
    master = os.environ.get("MASTER_ADDR")
    if not master or ("GLOO_SOCKET_IFNAME" in os.environ and "NCCL_SOCKET_IFNAME" in os.environ):
        return
    try:
        ip = socket.getaddrinfo(master, None, socket.AF_INET)[0][4][0]
    except (socket.gaierror, UnicodeError):
        raise DistributedError(f"rank {rank}: the job's store host MASTER_ADDR={master!r} does not resolve on "
                               f"this node ({socket.gethostname()})") from None
    if ipaddress.ip_address(ip).is_loopback:
        return
    name = choose_ifname(ip)
    if name:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", name)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", name)


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    import contextlib
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
