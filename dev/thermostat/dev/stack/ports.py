"""Before anything starts: every fixed port the stack will listen on is free, or one line says which is not.

A port held by another process used to surface as the part's own failure, far down the output: the RunPod
simulator's traceback ending `OSError: [Errno 98] Address already in use`, Envoy's `cannot bind
'127.0.0.1:9901'`; neither said which setting moves the port, and Postgres and the services had been started for
nothing. `busy_ports` names each port in use, the part that wanted it and the variable that moves it (and, where
the OS lets this user see it, the process holding it). A port taken between this check and the part's own bind
still fails in the part, as before.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import socket
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class WantedPort:
    """A fixed port a part of the stack listens on, and the setting that chose it."""

    port: int
    part: str  # "the RunPod simulator", "pod-controller's metrics"
    setting: str  # the environment variable that moves it


def in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether binding `host:port` fails because something holds it (as the part's own bind would)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no owner
        try:
            probe.bind((host, port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


def holder(port: int) -> str | None:
    """`pid 1234 (python3)` of the process listening on `port`, when psutil can see it; else None."""
    # psutil comes with the dev tooling's dependencies, not pinned by this repository (so looked up, untyped);
    # another user's sockets may be hidden from this one: either way the line just names no holder
    with contextlib.suppress(Exception):
        psutil = importlib.import_module("psutil")
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
    return None


def busy_ports(wanted: Iterable[WantedPort], *, host: str = "127.0.0.1") -> list[str]:
    """One line per wanted port that is in use: the port, who wanted it, who holds it, how to move it."""
    lines = []
    for want in wanted:
        if want.port and in_use(want.port, host):
            held = holder(want.port)
            by = f" by {held}" if held else " by another process"
            lines.append(
                f"port {want.port} ({want.part}) is in use{by}: set {want.setting} to another port (0: any free one)"
            )
    return lines
