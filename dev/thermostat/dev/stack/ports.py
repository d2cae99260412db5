"""Before anything starts: every fixed port the stack will listen on is free, or one line says which is not.

A port held by another process used to surface as the part's own failure, far down the output: the RunPod
simulator's traceback ending `OSError: [Errno 98] Address already in use`, Envoy's `cannot bind
'127.0.0.1:9901'`; neither said which setting moves the port, and Postgres and the services had been started for
nothing. `busy_ports` names each port in use, the part that wanted it and the variable that moves it (and, where
the OS lets this user see it, the process holding it). A port taken between this check and the part's own bind
still fails in the part, as before.

The stack's own fixed ports lie outside Linux's ephemeral range (`EPHEMERAL_PORTS`), where the OS hands out
port 0 and outgoing connections' local ports: `make run` once failed at random when the embedded Postgres's free
port came out 50061, the pod controller's default. Each service's port in the stack is its registry port moved
below the range (`stack_port`: 50061 → 10061, its /metrics 11061), so a new registry entry gets its stack port the
same way; the registry's ports stay the deployment's (a container has its own network namespace). Every port the
stack picks free avoids the fixed ones it wants (`free_port_except`), and lies below the range too
(`thermostat.chassis.ports.free_port`): a child binds it seconds after it was picked, and a port the OS picked could be
handed to an outgoing connection meanwhile.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import socket
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from thermostat.chassis.ports import free_port
from thermostat.chassis.registry import METRICS_PORT_OFFSET, ServiceDef

EPHEMERAL_PORTS = range(32768, 61000)
"""Linux's default `net.ipv4.ip_local_port_range` (32768 60999): ports the OS hands out on its own."""

STACK_PORT_SHIFT = 40000
"""A service's port under `make run` is its registry port less this: 50061 → 10061, below EPHEMERAL_PORTS."""


def stack_port(service: ServiceDef) -> int:
    """Where `make run` serves `service`'s gRPC unless its port variable says otherwise."""
    return service.default_port - STACK_PORT_SHIFT


def stack_metrics_port(service: ServiceDef) -> int:
    """Where `make run` serves `service`'s /metrics unless its metrics port variable says otherwise."""
    return stack_port(service) + METRICS_PORT_OFFSET


def free_port_except(wanted: Collection[int], host: str = "127.0.0.1", attempts: int = 50) -> int:
    """A free port (free_port's pick) that is none of `wanted`: a port the stack will bind later is free until then,
    so it may be picked meanwhile."""
    for _ in range(attempts):
        port = free_port(host)
        if port not in wanted:
            return port
    raise RuntimeError(f"the OS offered only ports this stack wants ({sorted(wanted)})")


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
