"""Ports: reading one from the environment, and finding a free one on loopback (dev stack, tests, local machines)."""

from __future__ import annotations

import random
import socket
from collections.abc import Mapping
from pathlib import Path

LOCAL_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_LOW = 32768  # Linux's default range is 32768-60999
PICK_FROM = 20000
"""free_port picks from here up to the OS's ephemeral range: above the fixed ports of `make run` (8080, 9100,
9901-9902, 10061…, 11061…) and of the servers usually found on a developer's machine."""
MIN_ROOM = 1000  # fewer ports than this below the range (a tuned ip_local_port_range): the OS's pick, as before
_PICKER = random.SystemRandom()  # not the module's generator: a test seeding it must not make two workers agree


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


def ephemeral_low(path: Path = LOCAL_PORT_RANGE) -> int:
    """The first port of the range the OS hands out on its own (bind to 0, an outgoing connection's local port)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_LOW


def pick_range(low: int) -> range | None:
    """Where free_port picks, given the ephemeral range's first port: below it, from PICK_FROM; None when there is
    too little room there."""
    return range(PICK_FROM, low) if low - PICK_FROM >= MIN_ROOM else None


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody holds right now, for the caller (or a process it starts) to bind soon after.

    Picked at random below the OS's ephemeral range, where nothing takes a port unasked. The OS's own pick (bind to
    0) is a port the OS hands out again, to any outgoing connection's local end, in the seconds a child process
    takes to bind it: CI once saw metering's /metrics port, picked so, taken by the time metering bound it
    (`address already in use`, a whole e2e module's stack down)."""
    picks = pick_range(ephemeral_low())
    if picks is not None:
        for _ in range(100):
            port = _PICKER.choice(picks)
            if bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def bindable(host: str, port: int) -> bool:
    """Whether anything could bind `host:port` now: no socket holds it, not even a closed connection in TIME_WAIT
    (a server binding with SO_REUSEADDR would pass over that one; a plain bind would not)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True
