"""Whether a port on this machine can be bound (no clawgym imports): preflight and the SLURM node runner ask."""

from __future__ import annotations

import errno
import socket
from typing import Optional


def port_free(host: str, port: int) -> Optional[str]:
    """None when ``host:port`` can be bound (as a server would, SO_REUSEADDR), else the reason."""
    try:
        infos = socket.getaddrinfo(host or "0.0.0.0", port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"host {host!r} does not resolve ({exc})"
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(1)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return "in use"
        if exc.errno == errno.EADDRNOTAVAIL:
            return f"{host} is not an address of this machine"
        if exc.errno == errno.EACCES:
            return "permission denied (ports below 1024 need root)"
        return str(exc)
    finally:
        sock.close()
    return None
