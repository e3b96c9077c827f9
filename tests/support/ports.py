"""A local TCP port that nothing listens on."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port of 127.0.0.1 free a moment ago (the system's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
