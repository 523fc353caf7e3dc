"""Free TCP ports on 127.0.0.1 for the tests that start real listeners
(in-process nodes or processes). Shared by every such test module."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free a moment ago (bound together,
    so no two are the same, then released for the caller to listen on)."""
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports
