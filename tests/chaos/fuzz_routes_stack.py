"""Every service behind the real Envoy edge, in this process: what the fuzzing and the secrets scenarios run on.

The pod controller (on a RunPod simulator), the idle monitor, metering and the pool dispatcher (local backend,
reference workers as child processes) over loopback gRPC and one Postgres database, and one Envoy configured
from the registry as `make run` configures it, plus a file access log in Envoy's default format. Every token
is a parameter, so the secrets scenario can set recognisable random ones; every service log record is kept,
rendered as the services render it (JSON, secrets redacted by the same filter).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.chaos.wakes_under_faults_stack import VOLUMES, chaos_controller, chaos_env
from tests.fixtures.polling import eventually
from tests.fixtures.services import (
    INTERNAL_TOKEN,
    OPERATOR_TOKEN,
    SIM_API_KEY,
    WAKE_TOKEN,
    metering_env,
    start_gateway,
    start_metering,
)
from tests.integration.idle_monitor.conftest import in_process_monitor
from tests.integration.pool_dispatcher.conftest import ADMIN_TOKEN, API_TOKEN, local_type, pool_env, start_pool
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.logs import JsonFormatter, RedactingFilter
from thermostat.chassis.registry import GATEWAY, IDLE_MONITOR, METERING, POD_CONTROLLER, POOL_DISPATCHER, SERVICES
from thermostat.dev.envoy import start_envoy
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.store.db import Store
from tools.envoy_config import EdgeSpec, HealthCheckTiming, build_envoy_config, upstreams

ROOT = Path(__file__).resolve().parents[2]
DESCRIPTORS = ROOT / "build" / "thermostat.pb"


@dataclass(frozen=True, slots=True)
class Tokens:
    """Every secret the stack is configured with (the tests' fixed values unless a scenario sets its own)."""

    runpod_api_key: str = SIM_API_KEY
    operator: str = OPERATOR_TOKEN
    wake: str = WAKE_TOKEN
    pool: str = API_TOKEN
    pool_admin: str = ADMIN_TOKEN
    internal: str = INTERNAL_TOKEN

    def named(self) -> dict[str, str]:
        return {
            "RUNPOD_API_KEY": self.runpod_api_key,
            "RIG_OPERATOR_TOKEN": self.operator,
            "RIG_WAKE_TOKEN": self.wake,
            "STRATA_POOL_TOKEN": self.pool,
            "STRATA_POOL_ADMIN_TOKEN": self.pool_admin,
            INTERNAL_TOKEN_ENV: self.internal,
        }


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(JsonFormatter("chaos-stack"))
        self.addFilter(RedactingFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextlib.contextmanager
def kept_logs() -> Iterator[list[str]]:
    """Every log record of the block at DEBUG and up, as the services' handler renders it, with httpx and
    httpcore held at WARNING as the services' logging holds them (their request lines are the test's too)."""
    handler = _Kept()
    root = logging.getLogger()
    quieted = [logging.getLogger(name) for name in ("httpx", "httpcore")]
    was = root.level, [logger.level for logger in quieted]
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    for logger in quieted:
        logger.setLevel(logging.WARNING)
    try:
        yield handler.lines
    finally:
        root.removeHandler(handler)
        root.setLevel(was[0])
        for logger, level in zip(quieted, was[1], strict=True):
            logger.setLevel(level)


@dataclass
class FullStack:
    edge: httpx.AsyncClient
    addresses: dict[str, str]  # service name → its gRPC address
    access_log: Path
    tokens: Tokens

    async def all_serving(self) -> dict[str, str]:
        """Each service's gRPC health, overall ("" service), asked directly."""
        answers = {}
        for name, address in self.addresses.items():
            async with grpc.aio.insecure_channel(address) as channel:
                try:
                    reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
                    answers[name] = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
                except grpc.aio.AioRpcError as error:
                    answers[name] = error.code().name
        return answers


def _with_access_log(config: dict[str, object], path: Path) -> dict[str, object]:
    """Envoy's default access log format to a file: method, path and query, status, user agent, request id."""
    listeners = config["static_resources"]["listeners"]  # type: ignore[index]
    hcm = listeners[0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm["access_log"] = [
        {
            "name": "envoy.access_loggers.file",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
                "path": str(path),
            },
        }
    ]
    return config


@contextlib.asynccontextmanager
async def full_stack(
    sim: RunPodSimulator, store: Store, workdir: Path, tokens: Tokens = Tokens()
) -> AsyncIterator[FullStack]:
    named = tokens.named()
    controller_env = chaos_env(sim, **named)
    async with chaos_controller(sim, store, controller_env) as controller:
        pool_settings = pool_env(
            [local_type()],
            STRATA_POOL_TOKEN=tokens.pool,
            STRATA_POOL_ADMIN_TOKEN=tokens.pool_admin,
            **{INTERNAL_TOKEN_ENV: tokens.internal},
        )
        monitor_settings = {
            "POD_CONTROLLER_ADDR": controller.address,
            "RUNPOD_PODS": ",".join(VOLUMES),
            "HEALTH_PROBE_SECONDS": "0.5",
            "CHECK_SECONDS": "0.5",
            "MONITOR_RECHECK_SECONDS": "0.5",
            "RUNPOD_PROXY_URL_TEMPLATE": sim.proxy_url_template,
            INTERNAL_TOKEN_ENV: tokens.internal,
        }
        async with (
            start_pool(store, pool_settings) as pool,
            start_metering(
                metering_env(
                    controller.address,
                    RIG_OPERATOR_TOKEN=tokens.operator,
                    POOL_DISPATCHER_ADDR=pool.address,
                    STRATA_POOL_TOKEN=tokens.pool,
                    STRATA_POOL_ADMIN_TOKEN=tokens.pool_admin,
                    **{INTERNAL_TOKEN_ENV: tokens.internal},
                ),
                store,
            ) as metering,
            in_process_monitor(monitor_settings, store) as monitor,
            start_gateway(
                {
                    "POD_CONTROLLER_ADDR": controller.address,
                    "IDLE_MONITOR_ADDR": monitor.address,
                    "RUNPOD_PODS": ",".join(VOLUMES),
                    "RIG_OPERATOR_TOKEN": tokens.operator,
                    INTERNAL_TOKEN_ENV: tokens.internal,
                },
                store,
            ) as gateway,
        ):
            addresses = {
                POD_CONTROLLER.name: controller.address,
                IDLE_MONITOR.name: monitor.address,
                METERING.name: metering.address,
                POOL_DISPATCHER.name: pool.address,
                GATEWAY.name: gateway.address,
            }
            ports = {name: int(address.rpartition(":")[2]) for name, address in addresses.items()}
            ports[f"{GATEWAY.name}-http"] = gateway.http_port
            spec = EdgeSpec(
                upstreams=upstreams(tuple(s for s in SERVICES if s.name in ports), ports=ports, host="127.0.0.1"),
                descriptor_set=DESCRIPTORS,
                listen_port=0,
                admin_port=0,
                health=HealthCheckTiming(interval_s=0.2, timeout_s=1.0, no_traffic_interval_s=0.2),
            )
            access_log = workdir / "access.log"
            config_path = workdir / "envoy.yaml"
            config_path.write_text(json.dumps(_with_access_log(build_envoy_config(spec), access_log)))
            envoy = await start_envoy(config_path, log_path=workdir / "envoy.log", concurrency=1)
            try:
                base = f"http://127.0.0.1:{envoy.listeners['edge']}"
                async with httpx.AsyncClient(base_url=base, timeout=60) as edge:
                    await eventually(lambda: _healthy(edge), timeout=20, every=0.1)
                    yield FullStack(
                        edge=edge,
                        addresses=addresses,
                        access_log=access_log,
                        tokens=tokens,
                    )
            finally:
                await envoy.stop()


async def _healthy(edge: httpx.AsyncClient) -> bool | None:
    return True if (await edge.get("/health")).status_code == 200 else None
