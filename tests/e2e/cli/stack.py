"""The whole stack the CLI talks to, as `make run` wires it, in this process: a RunPod simulator over real HTTP,
the pod controller, the idle monitor, the pool dispatcher (reference workers as child processes) and metering
over real gRPC on loopback, one Postgres database, and the real Envoy edge in front — the one address the
CLI is given.

Several pods (one per test that wakes, on a volume of its own) and tenants keep tests of one module apart.
`cli(...)` runs `thermostat …` through click's CliRunner in a worker thread, so the services keep serving on
the test's event loop meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from tests.fixtures.edge import house_edge, port_of
from tests.fixtures.polling import eventually
from tests.fixtures.services import (
    INTERNAL_TOKEN,
    OPERATOR_TOKEN,
    SIM_API_KEY,
    VOLUME,
    metering_env,
    pod_controller_env,
    start_gateway,
    start_metering,
    start_pod_controller,
)
from tests.integration.idle_monitor.conftest import in_process_monitor
from tests.integration.pool_dispatcher.conftest import (
    ADMIN_TOKEN,
    API_TOKEN,
    local_type,
    pool_env,
    sleepy_type,
    start_pool,
)
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.ports import free_port
from thermostat.chassis.registry import GATEWAY, IDLE_MONITOR, METERING, POD_CONTROLLER, POOL_DISPATCHER
from thermostat.cli.main import app
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.dev.simulators.runpod.world import SimSettings
from thermostat.store.db import Store

SCRIPT = Path(sys.executable).parent / "thermostat"
PODS = ("qwen", "llama", "mistral", "gemma", "phi")
"""qwen on the simulator's default volume, each other pod on one of its own."""
CATALOGUE = [
    local_type("local"),
    sleepy_type("sleepy", job_timeout_seconds=30),
    sleepy_type("quick", job_timeout_seconds=1),
    local_type("failing", env={"STRATA_WORKER_HANDLER": "fail", "STRATA_WORKER_FAIL_MESSAGE": "cell raised"}),
]
TOKEN_VARIABLES = (
    "THERMOSTAT_ADDR",
    "RIG_OPERATOR_TOKEN",
    "RIG_WAKE_TOKEN",
    "STRATA_POOL_TOKEN",
    "STRATA_POOL_ADMIN_TOKEN",
    "STRATA_TENANT",
)


@dataclass(frozen=True)
class Ran:
    """One `thermostat …` run: its exit code and what it wrote."""

    exit_code: int
    stdout: str
    stderr: str
    stdout_bytes: bytes

    def json(self) -> Any:
        assert self.exit_code == 0, (self.exit_code, self.stdout, self.stderr)
        return json.loads(self.stdout)

    def error(self) -> dict[str, str]:
        """The JSON error a `--json` run printed on stderr."""
        body: dict[str, str] = json.loads(self.stderr.strip().splitlines()[-1])["error"]
        return body


@dataclass
class CliStack:
    edge: str  # host:port of the edge, what --addr names
    sim: RunPodSimulator
    store: Store
    services: Mapping[str, str] = field(default_factory=dict)  # each service's own host:port, by registry name

    def options(
        self, *, operator: bool = True, pool: bool = True, admin: bool = False, tenant: str | None = None
    ) -> list[str]:
        """The global options: the edge and the tokens asked for."""
        given = ["--addr", self.edge]
        if operator:
            given += ["--operator-token", OPERATOR_TOKEN]
        if pool:
            given += ["--pool-token", API_TOKEN]
        if admin:
            given += ["--pool-admin-token", ADMIN_TOKEN]
        if tenant is not None:
            given += ["--tenant", tenant]
        return given

    async def cli(
        self, *args: str, options: Sequence[str] | None = None, stdin: bytes | None = None, **tokens: Any
    ) -> Ran:
        """`thermostat <options> <args>` (options: self.options(**tokens) unless given)."""
        argv = [*(self.options(**tokens) if options is None else options), *args]
        return await run_cli(argv, stdin=stdin)

    @contextlib.asynccontextmanager
    async def script(self, *args: str, **tokens: Any) -> AsyncIterator[asyncio.subprocess.Process]:
        """The installed `.venv/bin/thermostat` (what `make venv` writes) as a child process, its stderr piped so
        a test reads progress lines as they come; killed if it outlives the block."""
        process = await asyncio.create_subprocess_exec(
            SCRIPT,
            *self.options(**tokens),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**{k: v for k, v in os.environ.items() if k not in TOKEN_VARIABLES}, "COLUMNS": "200"},
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def line_matching(stream: asyncio.StreamReader | None, pattern: str, seen: list[str]) -> str:
    """The next line of `stream` matching `pattern` (each line read is appended to `seen`)."""
    assert stream is not None
    while True:
        raw = await asyncio.wait_for(stream.readline(), timeout=60)
        assert raw, f"no line matching {pattern!r}; read: {seen}"
        line = raw.decode().rstrip("\n")
        seen.append(line)
        if re.search(pattern, line):
            return line


async def run_cli(argv: Sequence[str], *, stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> Ran:
    """`thermostat argv` in a worker thread, with none of the client's variables from this environment."""
    environment: dict[str, str | None] = {name: None for name in TOKEN_VARIABLES}
    environment["COLUMNS"] = "200"
    environment.update(env or {})

    def invoke() -> Ran:
        result = CliRunner().invoke(app, list(argv), input=stdin, env=environment, catch_exceptions=False)
        return Ran(result.exit_code, result.stdout, result.stderr, result.stdout_bytes)

    return await asyncio.to_thread(invoke)


def _pods_env(sim: RunPodSimulator) -> dict[str, str]:
    env = {"RUNPOD_PODS": ",".join(PODS)}
    for index, name in enumerate(PODS):
        volume = VOLUME if name == "qwen" else f"clivol{index:04d}"
        if name != "qwen":
            sim.add_volume(volume, "EU-RO-1")
        env[f"RUNPOD_{name.upper()}_VOLUME_ID"] = volume
    return env


@contextlib.asynccontextmanager
async def cli_stack(store: Store, data_dir: Path) -> AsyncIterator[CliStack]:
    """Every service behind the edge; pods boot in about a second (provisioning, starting, model load)."""
    settings = SimSettings(provisioning_seconds=0.3, starting_seconds=0.3, model_ready_seconds=0.4)
    with RunPodSimulator(api_key=SIM_API_KEY, settings=settings) as sim:
        metering_port = free_port()
        metering_addr = f"127.0.0.1:{metering_port}"
        pods = _pods_env(sim)
        controller_env = pod_controller_env(sim, METERING_ADDR=metering_addr, **pods)
        async with start_pod_controller(controller_env, store) as controller:
            monitor_env = {k: v for k, v in controller_env.items() if k != "RUNPOD_API_KEY"}
            monitor_env.update(
                POD_CONTROLLER_ADDR=controller.address,
                CHECK_SECONDS="0.2",
                MONITOR_RECHECK_SECONDS="0.05",
                CONTROLLER_TIMEOUT_SECONDS="2",
                MONITOR_LEASE_SECONDS="5",
            )
            async with (
                in_process_monitor(monitor_env, store) as monitor,
                start_pool(
                    store,
                    pool_env(
                        CATALOGUE,
                        METERING_ADDR=metering_addr,
                        POOL_USAGE_SETTLE_SECONDS="0.2",
                        **{INTERNAL_TOKEN_ENV: INTERNAL_TOKEN},
                    ),
                ) as pool,
                start_metering(
                    metering_env(
                        controller.address,
                        POOL_DISPATCHER_ADDR=pool.address,
                        STRATA_POOL_TOKEN=API_TOKEN,
                        STRATA_POOL_ADMIN_TOKEN=ADMIN_TOKEN,
                        **pods,
                    ),
                    store,
                    port=metering_port,
                ) as metering,
                start_gateway(
                    {
                        **pods,
                        "POD_CONTROLLER_ADDR": controller.address,
                        "IDLE_MONITOR_ADDR": monitor.address,
                        "RIG_OPERATOR_TOKEN": OPERATOR_TOKEN,
                    },
                    store,
                ) as gateway,
            ):
                ports = {
                    POD_CONTROLLER.name: port_of(controller.address),
                    IDLE_MONITOR.name: port_of(monitor.address),
                    POOL_DISPATCHER.name: port_of(pool.address),
                    METERING.name: port_of(metering.address),
                    GATEWAY.name: port_of(gateway.address),
                    f"{GATEWAY.name}-http": gateway.http_port,
                }
                async with house_edge(ports, data_dir / "envoy.yaml") as envoy:
                    stack = CliStack(
                        edge=f"127.0.0.1:{envoy.listeners['edge']}",
                        sim=sim,
                        store=store,
                        services={
                            name: f"127.0.0.1:{port}" for name, port in ports.items() if not name.endswith("-http")
                        },
                    )
                    await eventually(lambda: _serving(stack), timeout=20, every=0.1)
                    yield stack


async def _serving(stack: CliStack) -> bool | None:
    """The edge routes every service: a status, a catalogue read and a budget read all answer."""
    for probe in (("pods", "status", "qwen"), ("machine-types", "get"), ("budgets", "get", "pod", "qwen")):
        if (await stack.cli("--json", *probe)).exit_code != 0:
            return None
    return True
