"""The ports a head will bind, reserved from before ``ray start`` until the head listens on them.

This process's reservations are listed (:func:`starting_ports`) so preflight's ports check
reports them as the head's own."""

from __future__ import annotations

import errno
import socket
import threading
from typing import Dict, Optional, Tuple

from clawgym.backends.head.records import HeadError
from clawgym.common import ownership as owners


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS considers free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")

#: ``ray start`` options naming a port one of the head's services binds, with the config key
#: that sets it (None: clawgym picks a free one and reserves it).
PORT_OPTIONS: Tuple[Tuple[str, Optional[str]], ...] = (
    ("--port", "ray.port"),
    ("--dashboard-port", "ray.dashboard_port"),
    ("--ray-client-server-port", None),
    ("--dashboard-agent-listen-port", None),
    ("--dashboard-agent-grpc-port", None),
    ("--runtime-env-agent-port", None),
    ("--node-manager-port", None),
    ("--object-manager-port", None),
    ("--metrics-export-port", None),
)
#: Metrics servers of the dashboard and the autoscaler monitor: fixed default ports (44227,
#: 44217 in ray/dashboard/consts.py, ray/autoscaler/_private/constants.py) set by environment
#: only; two heads on one machine would collide on them.
PORT_ENV = ("DASHBOARD_METRIC_PORT", "AUTOSCALER_METRIC_PORT")

# Ports this process reserved for heads it is starting: port -> (host, what), until each head
# is up or stopped. Preflight's ports check reports these as the head's own.
_STARTING: Dict[int, Tuple[str, str]] = {}
_STARTING_LOCK = threading.Lock()


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def starting_ports() -> Dict[int, Tuple[str, str]]:
    """Ports reserved by heads this process is starting: port -> (host, option or variable)."""
    with _STARTING_LOCK:
        return dict(_STARTING)


class PortReservation:
    """Ports held for a head from before ``ray start`` until the head listens on them.

    A reserved port is a socket bound with SO_REUSEADDR and never listening. On Linux that
    keeps every other bind without SO_REUSEADDR off the port, and the kernel's choice of free
    ports (bind to port 0, Ray's own port picking) skips it; the head's servers, which all set
    SO_REUSEADDR (gRPC, aiohttp, Python's http.server), can still bind and listen on it. A
    server of someone else that also sets SO_REUSEADDR could still take it before the head
    does: the reservation narrows that window to nothing for ephemeral-port users, not for them.
    """

    def __init__(self) -> None:
        self.sockets: Dict[int, socket.socket] = {}
        self.what: Dict[int, Tuple[str, str]] = {}
        # Two never-listening SO_REUSEADDR sockets can share a port: each reserved port is also
        # locked (clawgym.common.ownership.PortLock) until the head listens on it, so two launches
        # started in the same second cannot both reserve it.
        self.locks: Dict[int, "owners.PortLock"] = {}

    def hold(self, host: str, port: int, what: str, *, keep: bool = True) -> int:
        """Reserve ``host:port`` (port 0: a free one); returns the port. Raises HeadError when taken.

        ``keep=False`` only checks that the port is free now (and lists it in :func:`starting_ports`):
        a server binding all interfaces (gRPC binds ``[::]``) cannot share a port with a socket
        bound to one address, so beyond loopback the port is checked, not held."""
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        except socket.gaierror as exc:
            raise HeadError(f"{what}: host {host!r} does not resolve ({exc})") from None
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            why = "in use" if exc.errno == errno.EADDRINUSE else str(exc)
            raise HeadError(f"{what}={port} on {host}: {why}\n  fix: free the port (ss -ltnp 'sport = :{port}' "
                            f"shows who holds it) or choose another") from None
        got = int(sock.getsockname()[1])
        if got not in self.locks:
            try:
                self.locks[got] = owners.PortLock(got, what)
            except owners.Held as exc:
                sock.close()
                raise HeadError(f"{exc}\n  fix: wait for that launch (its head is then shared by launches with "
                                f"the same ray.* settings) or choose another {what}") from None
        if keep:
            self.sockets[got] = sock
        else:
            sock.close()
        self.what[got] = (host, what)
        with _STARTING_LOCK:
            _STARTING[got] = (host, what)
        return got

    def release_sockets(self) -> None:
        """Close the sockets (the head listens on the ports now, or never will)."""
        for sock in self.sockets.values():
            sock.close()
        self.sockets.clear()

    def forget(self) -> None:
        """Release everything, including the ports' listing in :func:`starting_ports`."""
        self.release_sockets()
        with _STARTING_LOCK:
            for port in self.what:
                _STARTING.pop(port, None)
        self.what.clear()
        for lock in self.locks.values():
            lock.release()
        self.locks.clear()
