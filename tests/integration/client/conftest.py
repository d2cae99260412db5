"""Every Thermostat service in this process over real gRPC on loopback — pod controller, idle monitor, metering,
pool dispatcher — on the test's own Postgres database, with the RunPod simulator over real HTTP and reference
workers as child processes; the client talks to each service at its own address (no edge here: the examples'
tests go through the real Envoy)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import pytest

from tests.fixtures.services import (
    INTERNAL_TOKEN,
    OPERATOR_TOKEN,
    WAKE_TOKEN,
    RunningService,
    metering_env,
    pod_controller_env,
    start_metering,
    start_pod_controller,
)
from tests.integration.idle_monitor.conftest import InProcessMonitor, in_process_monitor
from tests.integration.idle_monitor.conftest import monitor_env as monitor_process_env
from tests.integration.pool_dispatcher.conftest import (
    ADMIN_TOKEN,
    API_TOKEN,
    RunningPool,
    local_type,
    pool_env,
    sleepy_type,
    start_pool,
)
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.ports import free_port
from thermostat.client import AsyncThermostat, ClientConfig
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.store.db import Store

CATALOGUE = [
    local_type("local"),
    sleepy_type("sleepy", job_timeout_seconds=30),
    local_type("failing", env={"STRATA_WORKER_HANDLER": "fail", "STRATA_WORKER_FAIL_MESSAGE": "cell raised"}),
]


@dataclass
class Stack:
    sim: RunPodSimulator
    controller: RunningService
    monitor: InProcessMonitor
    metering: RunningService
    pool: RunningPool
    config: ClientConfig  # every token, tenant `acme`

    def config_with(self, **changes: object) -> ClientConfig:
        return replace(self.config, **changes)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def stack_on(sim: RunPodSimulator, store: Store, database_url: str) -> AsyncIterator[Stack]:
    metering_port = free_port()
    metering_addr = f"127.0.0.1:{metering_port}"
    async with (
        start_pod_controller(pod_controller_env(sim, METERING_ADDR=metering_addr), store) as controller,
        start_pool(store, pool_env(CATALOGUE, **{INTERNAL_TOKEN_ENV: INTERNAL_TOKEN})) as pool,
        start_metering(
            metering_env(
                controller.address,
                POOL_DISPATCHER_ADDR=pool.address,
                STRATA_POOL_TOKEN=API_TOKEN,
                STRATA_POOL_ADMIN_TOKEN=ADMIN_TOKEN,
            ),
            store,
            port=metering_port,
        ) as metering,
        in_process_monitor(
            {
                **pod_controller_env(sim),
                **monitor_process_env(database_url, controller.address, CHECK_SECONDS="0.1"),
            },
            store,
        ) as monitor,
    ):
        config = ClientConfig(
            target=controller.address,
            pods_target=controller.address,
            monitor_target=monitor.address,
            metering_target=metering.address,
            pool_target=pool.address,
            operator_token=OPERATOR_TOKEN,
            wake_token=WAKE_TOKEN,
            pool_token=API_TOKEN,
            pool_admin_token=ADMIN_TOKEN,
            tenant="acme",
            timeout=10,
            wait_timeout=60,
        )
        yield Stack(sim, controller, monitor, metering, pool, config)


@pytest.fixture
async def stack(runpod_sim: RunPodSimulator, db_store: Store, database_url: str) -> AsyncIterator[Stack]:
    async with stack_on(runpod_sim, db_store, database_url) as running:
        yield running


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[AsyncThermostat]:
    async with AsyncThermostat(stack.config) as opened:
        yield opened
