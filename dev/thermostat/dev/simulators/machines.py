"""Simulated machines: the reference worker (or any command) as a real child process on a loopback port.

The Docker, Fly and RunPod simulators run one per container / machine / pod, so a job sent through a
backend reaches a real worker over a real socket. The child gets PATH, the machine's environment as the
provider was asked for it, and `STRATA_WORKER_PORT` set to a free loopback port (the simulator's stand-in for
the port the provider publishes), or, given `address` (a loopback address of its own, the Docker simulator's stand-in
for a container's address on its network) and `port`, `STRATA_WORKER_HOST` / `STRATA_WORKER_PORT` set to those.
`forward` relays one HTTP request to a machine, the way a provider's proxy
does, and answers 502 when nothing listens.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence

from thermostat.chassis.ports import free_port
from thermostat.dev.simulators.serving import Answer

REFERENCE_WORKER: tuple[str, ...] = (sys.executable, "-m", "thermostat.worker")
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host",
     "content-length"}
)  # fmt: skip


def free_address(port: int, *, tries: int = 32) -> str | None:
    """A random loopback address (127.x.y.z, never 127.0.0.1) on which `port` is free to bind, else None (something
    holds the port on every address: a wildcard listener)."""
    for _ in range(tries):
        address = f"127.{secrets.randbelow(254) + 1}.{secrets.randbelow(256)}.{secrets.randbelow(254) + 1}"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address, port))
            except OSError:
                continue
        return address
    return None


class SimMachine:
    """SimMachine is one running child process listening on `port`."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        keep_output: bool = False,
        address: str | None = None,
        port: int | None = None,
    ) -> None:
        self.port = port if port is not None else free_port()
        placed = {"STRATA_WORKER_HOST": address} if address is not None else {}
        child_env = {"PATH": os.environ.get("PATH", ""), **env, **placed, "STRATA_WORKER_PORT": str(self.port)}
        # what it prints, for a simulator that serves a machine's logs (Docker's GET /containers/{id}/logs)
        self._output = tempfile.TemporaryFile() if keep_output else None  # noqa: SIM115 - closed with the machine
        self._process = subprocess.Popen(
            list(argv),
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=self._output or subprocess.DEVNULL,
            stderr=self._output or subprocess.DEVNULL,
            start_new_session=True,
        )

    def output(self, limit: int = 64 * 1024) -> bytes:
        """The last `limit` bytes the machine printed (stdout and stderr together); empty when not kept."""
        if self._output is None:
            return b""
        with open(self._output.fileno(), "rb", closefd=False) as reading:
            size = reading.seek(0, os.SEEK_END)
            reading.seek(max(0, size - limit))
            return reading.read()

    @property
    def exit_code(self) -> int | None:
        """The process's exit code as a container runtime reports it (128 + the signal that killed it), or None
        while it runs."""
        code = self._process.poll()
        if code is None:
            return None
        return 128 - code if code < 0 else code

    def wait(self, timeout: float) -> None:
        """Until the process has ended (at most `timeout` seconds)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout)

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def kill(self) -> None:
        """SIGKILL the machine's process group at once (a machine that died)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        if self._output is not None:  # a machine killed is forgotten: what it printed with it
            self._output.close()
            self._output = None

    def terminate(self, grace_seconds: float) -> None:
        """SIGTERM, wait up to the grace, then SIGKILL (a container stop)."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(grace_seconds)
        self.kill()


def forward(
    port: int, method: str, path: str, headers: Mapping[str, str], body: bytes, *, timeout: float, timeout_status: int
) -> Answer:
    """Relay one request to 127.0.0.1:port; 502 when the machine does not answer, `timeout_status` past `timeout`."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        sent = {name: value for name, value in headers.items() if name.lower() not in _HOP_BY_HOP}
        connection.request(method, path, body=body or None, headers=sent)
        response = connection.getresponse()
        content = response.read()
        kept = {name: value for name, value in response.getheaders() if name.lower() not in _HOP_BY_HOP}
        return response.status, kept, content
    except TimeoutError:
        return timeout_status, {"Content-Type": "text/plain; charset=utf-8"}, f"error code: {timeout_status}\n".encode()
    except OSError:
        return 502, {"Content-Type": "text/html; charset=utf-8"}, b"<html>502 Bad Gateway</html>\n"
    finally:
        connection.close()
