"""The chaos scenarios' stack: every service as two real processes (the dev stack's Stack, `replicas=2`) over a
Postgres server of the scenario's own, in front of a RunPod simulator in this process (so a scenario can hold a
request with `hold()`), with short leases so a dead replica's work moves within seconds. No edge: the scenarios
speak gRPC to each replica, and a killed child stays down (no restart) until the scenario starts it again."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.fixtures.postgres import embedded_data_dir
from tests.fixtures.services import INTERNAL_TOKEN, OPERATOR_TOKEN, SIM_API_KEY, TEMPLATE, VOLUME, WAKE_TOKEN
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.registry import SERVICES, ServiceDef
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.dev.stack.supervisor import Child, Stack, StackConfig

POOL_TOKEN = "chaos-pool-token"
POOL_ADMIN_TOKEN = "chaos-pool-admin-token"
WORKER = f"{sys.executable} -m thermostat.worker"

# One lease of each kind: how long the survivors may take to pick up a dead replica's work (the goal).
WAKE_LEASE_SECONDS = 3.0
MONITOR_LEASE_SECONDS = 2.0
POOL_LEASE_SECONDS = 2.0
LEDGER_LEASE_SECONDS = 2.0
CHECK_SECONDS = 0.5

SHORT_LEASES = {
    "RIG_OPERATOR_TOKEN": OPERATOR_TOKEN,
    "RIG_WAKE_TOKEN": WAKE_TOKEN,
    INTERNAL_TOKEN_ENV: INTERNAL_TOKEN,
    "RUNPOD_VOLUME_ID": VOLUME,
    "RUNPOD_TEMPLATE_ID": TEMPLATE,
    "RUNPOD_DATACENTER_ID": "EU-RO-1",
    "RUNPOD_MAX_PRICE_PER_HOUR": "2.00",
    "RUNPOD_WAKE_POLL_SECONDS": "0.05",
    "RUNPOD_WAKE_MAX_POLLS": "40",
    "RUNPOD_WAKE_MAX_RETRY_AFTER_SECONDS": "0.05",
    "RUNPOD_TIMEOUT_SECONDS": "1",
    "WAKE_LEASE_SECONDS": str(WAKE_LEASE_SECONDS),
    "RECORD_TIMEOUT_SECONDS": "2",
    "STORE_READ_TIMEOUT_SECONDS": "0.5",
    "WATCH_POLL_SECONDS": "0.1",
    "CHECK_SECONDS": str(CHECK_SECONDS),
    "IDLE_MINUTES": "60",  # the monitor scenario shortens nothing: it watches the streak, then stops by hand
    "MONITOR_LEASE_SECONDS": str(MONITOR_LEASE_SECONDS),
    "MONITOR_RECHECK_SECONDS": "0.5",
    "SCRAPE_TIMEOUT_SECONDS": "1",
    "CONTROLLER_TIMEOUT_SECONDS": "2",
    "LEDGER_POLL_SECONDS": "0.1",
    "LEDGER_LEASE_SECONDS": str(LEDGER_LEASE_SECONDS),
    "FEED_TIMEOUT_SECONDS": "2",
    "STRATA_POOL_TOKEN": POOL_TOKEN,
    "STRATA_POOL_ADMIN_TOKEN": POOL_ADMIN_TOKEN,
    "POOL_LEASE_SECONDS": str(POOL_LEASE_SECONDS),
    # a killed dispatcher's machines die with it here (the dev stack's own default keeps them: a restart adopts)
    "POOL_LOCAL_MACHINES_OUTLIVE_PROCESS": "false",
    "POOL_SCALER_SECONDS": "0.2",
    "POOL_HEALTH_POLL_SECONDS": "0.05",
    "POOL_USAGE_SETTLE_SECONDS": "1",
    "HEALTH_PROBE_SECONDS": "0.25",
    "SHUTDOWN_GRACE_SECONDS": "2",
    "LOG_LEVEL": "WARNING",
}


def echo_type(journal: Path, *, max_workers: int) -> dict[str, object]:
    """The pool's one machine type: the reference worker, journalling every payload it executes."""
    return {
        "name": "echo",
        "image": WORKER,
        "backend": "local",
        "boot_timeout_seconds": 30,
        "max_workers": max_workers,
        "cool_down_seconds": 600,
        "env": {"STRATA_WORKER_HANDLER": "sleep", "STRATA_WORKER_JOURNAL": str(journal)},
    }


@dataclass
class ChaosStack:
    stack: Stack
    sim: RunPodSimulator
    journal: Path

    @property
    def database_url(self) -> str:
        return self.stack.database_url

    def replicas(self, service: ServiceDef) -> list[Child]:
        return self.stack.replicas(service)

    def kill(self, child: Child) -> None:
        """kill -9: the process's leases, rows and connections stay as they were."""
        child.process.send_signal(signal.SIGKILL)

    async def revive(self, child: Child, service: ServiceDef) -> None:
        """Start a killed replica again and wait until it serves, so the next scenario has two."""
        if child.process.returncode is None:
            return
        await self.stack.respawn(child)
        await self.stack.wait_serving(child, service)


@contextlib.asynccontextmanager
async def chaos_stack(
    tmp: Path, *, replicas: int = 2, pool_workers: int = 4, services: tuple[ServiceDef, ...] = SERVICES, **env: str
) -> AsyncIterator[ChaosStack]:
    """`replicas` processes of each of `services` over a Postgres server started for this stack alone."""
    journal = tmp / "worker-journal"
    extra: Mapping[str, str] = {
        **SHORT_LEASES,
        "POOL_MACHINE_TYPES": json.dumps([echo_type(journal, max_workers=pool_workers)]),
        "POOL_MAX_WORKERS_TOTAL": str(pool_workers),
        **env,
    }
    with embedded_data_dir() as data_dir, RunPodSimulator(api_key=SIM_API_KEY) as sim:
        stack = Stack(
            StackConfig(
                data_dir=data_dir,
                runpod_base_url=sim.base_url,
                runpod_api_key=SIM_API_KEY,
                edge_port=0,
                admin_port=0,
                service_ports={},
                services=services,
                extra_env={**extra, "RUNPOD_PROXY_URL_TEMPLATE": sim.proxy_url_template},
                relay_logs=False,
                durable_db=False,
                replicas=replicas,
                restart_children=False,
                edge=False,
            )
        )
        await stack.start()
        try:
            yield ChaosStack(stack=stack, sim=sim, journal=journal)
        finally:
            await stack.stop()


async def health_of(child: Child, timeout: float = 1.0) -> str:
    """A replica's grpc.health.v1 answer for the whole server: SERVING, NOT_SERVING or why there was none."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{child.port}") as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        except grpc.aio.AioRpcError as error:
            return f"unreachable ({error.code().name})"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
