"""Ports: reading one from the environment, and finding a free one on loopback (dev stack, tests)."""

from __future__ import annotations

import socket
from collections.abc import Mapping


def port_from_env(environ: Mapping[str, str], name: str, default: int) -> int:
    """The port in `name` when set, else `default`; ValueError naming the variable when it is not a port."""
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{name}={raw!r} is outside 0..65535")
    return port


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the OS's pick); the caller binds it soon after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
