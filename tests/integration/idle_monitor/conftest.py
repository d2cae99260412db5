"""A monitor rig: a real pod controller (gRPC on loopback, the test's Postgres) in front of a RunPod simulator
on a manual clock, and a PodTicker driven one tick at a time with an explicit `now`.

The simulator's clock and the ticker's `now` move together, one CHECK_SECONDS per tick, so a model load of
six minutes is six ticks without sleeping. Whatever happens between two `await rig.tick()` calls (a chat
turn, a dead vLLM, a re-wake) happens between two monitor ticks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.fixtures.clock import FakeClock
from tests.fixtures.services import (
    INTERNAL_TOKEN,
    SIM_API_KEY,
    VOLUME,
    RunningService,
    pod_controller_env,
    start_pod_controller,
)
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.timestamps import from_timestamp
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.idle_monitor.__main__ import Monitor
from thermostat.idle_monitor.__main__ import build as build_monitor
from thermostat.idle_monitor.repository import MonitorRepository, SavedState
from thermostat.idle_monitor.scrape_clients import ScrapeClients
from thermostat.idle_monitor.settings import IdleMonitorSettings
from thermostat.idle_monitor.ticker import PodTicker
from thermostat.idle_monitor.watch import PodWatch
from thermostat.monitor.v1 import monitor_pb2, monitor_pb2_grpc
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.idle.monitor_options import MonitorOptions, parse_monitor_options
from thermostat.policy.idle.monitor_tick import TickDecision
from thermostat.store.db import Store

POD = "qwen"
POD_ID = "qwenpod0000001"
STALE_ID = "stalepod000001"
FRESH_ID = "freshpod000002"
# Only bounds a scrape that should answer: the simulator answers at once (or after a test's injected delay), and on
# two loaded cores an answer can take longer than the second or two it takes idle. Tests of the timeout itself
# pass their own.
SCRAPE_TIMEOUT = 10.0
MONITOR_LOG = "thermostat.idle_monitor"


def monitor_options(**env: str) -> MonitorOptions:
    options, warnings = parse_monitor_options(env)
    assert not warnings, warnings
    return options


@dataclass
class MonitorRig:
    """One named pod's monitor, its controller and the simulated account behind both."""

    sim: RunPodSimulator
    clock: FakeClock
    controller: RunningService
    internal: pods_pb2_grpc.PodControllerInternalStub
    pods: pods_pb2_grpc.PodControllerStub
    states: MonitorRepository
    scrapes: ScrapeClients
    options: MonitorOptions
    scrape_timeout: float = SCRAPE_TIMEOUT
    ticker: PodTicker = field(init=False)
    replica: str = "replica-a"

    def __post_init__(self) -> None:
        self.ticker = self.new_ticker(self.replica)

    def new_ticker(
        self, replica: str, *, states: MonitorRepository | None = None, scrapes: ScrapeClients | None = None
    ) -> PodTicker:
        return PodTicker(
            pod_name=POD,
            controller=self.internal,
            scrapes=self.scrapes if scrapes is None else scrapes,  # `or` would skip an empty one: it has a len()
            states=self.states if states is None else states,
            options=self.options,
            replica=replica,
            scrape_timeout=self.scrape_timeout,
            controller_timeout=10,
        )

    @property
    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    async def tick(self) -> TickDecision:
        """One monitor tick at `now`; then one check interval passes."""
        decision = await self.ticker.tick_once(self.now)
        assert decision is not None, "the pod is configured: every tick decides"
        self.advance(self.options.check_seconds)
        return decision

    async def ticks(self, count: int) -> list[TickDecision]:
        return [await self.tick() for _ in range(count)]

    async def tick_until_stop(self, limit: int) -> tuple[int, datetime, TickDecision]:
        """Tick until a tick orders a stop: how many ticks that took (counting it), its time and decision."""
        for count in range(1, limit + 1):
            at = self.now
            decision = await self.tick()
            if decision.stop is not None:
                return count, at, decision
        raise AssertionError(f"no stop within {limit} ticks; last state {decision.state}")

    def add_pod(self, pod_id: str, status: str = "RUNNING", *, model_ready_seconds: float | None = None) -> str:
        """A pod on the monitored volume; `model_ready_seconds` is its vLLM load time (negative: never)."""
        self.sim.add_pod(pod_id=pod_id, status=status, volume_id=VOLUME)
        if model_ready_seconds is not None:
            self.sim.set_pod_lifecycle(pod_id, model_ready_seconds=model_ready_seconds)
        return pod_id

    def status(self, pod_id: str) -> str:
        return str(self.sim.pod(pod_id)["status"])

    async def saved(self) -> SavedState:
        return await self.states.load(POD)

    async def view(self) -> pods_pb2.GetPodResponse:
        view: pods_pb2.GetPodResponse = await self.pods.GetPod(pods_pb2.GetPodRequest(name=POD), timeout=10)
        return view

    async def ready_since(self) -> datetime | None:
        view = await self.view()
        return from_timestamp(view.ready_since) if view.HasField("ready_since") else None

    async def stops(self) -> list[pods_pb2.PodAction]:
        """Every Stop the controller issued for the pod, oldest first."""
        history = await self.pods.GetPodHistory(pods_pb2.GetPodHistoryRequest(name=POD, page_size=500), timeout=10)
        return [e.action for e in reversed(history.entries) if e.HasField("action") and e.action.action == "Stop"]


MakeRig = Callable[..., Awaitable[MonitorRig]]


@pytest.fixture
def clock() -> FakeClock:
    """The simulator's clock, standing still until the rig advances it (lifecycle and model-load delays need no
    sleeping), in epoch seconds from the current minute, so readiness and wakes (stamped by the database clock) line
    up."""
    return FakeClock(monotonic=float(int(time.time()) // 60 * 60))


@pytest.fixture
def sim(clock: FakeClock) -> Iterator[RunPodSimulator]:
    """A RunPod simulator on the rig's manual clock."""
    with RunPodSimulator(api_key=SIM_API_KEY, clock=clock) as simulator:
        yield simulator


@pytest.fixture
async def controller(sim: RunPodSimulator, db_store: Store) -> AsyncIterator[RunningService]:
    async with start_pod_controller(pod_controller_env(sim), db_store) as running:
        yield running


@pytest.fixture
async def make_rig(
    sim: RunPodSimulator, clock: FakeClock, controller: RunningService, db_store: Store
) -> AsyncIterator[MakeRig]:
    """make_rig(**MONITOR_ENV) builds the rig with those monitor timings (defaults otherwise)."""
    async with contextlib.AsyncExitStack() as stack:
        channel = await stack.enter_async_context(controller.channel())
        scrapes = await stack.enter_async_context(ScrapeClients())

        async def make(*, scrape_timeout: float = SCRAPE_TIMEOUT, **env: str) -> MonitorRig:
            return MonitorRig(
                sim=sim,
                clock=clock,
                controller=controller,
                internal=pods_pb2_grpc.PodControllerInternalStub(channel),
                pods=pods_pb2_grpc.PodControllerStub(channel),
                states=MonitorRepository(db_store.pool),
                scrapes=scrapes,
                options=monitor_options(**env),
                scrape_timeout=scrape_timeout,
            )

        yield make


@pytest.fixture
async def rig(make_rig: MakeRig) -> MonitorRig:
    """The rig with the production timings: idle 15 min, check 60 s, cap 6 h, boot grace 20 min."""
    return await make_rig()


@pytest.fixture
def monitor_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger=MONITOR_LOG)
    return caplog


def minutes(value: float) -> timedelta:
    return timedelta(minutes=value)


def messages(caplog: pytest.LogCaptureFixture, needle: str, level: int | None = None) -> list[str]:
    """The monitor's log lines containing `needle` (at `level`, when given)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == MONITOR_LOG and needle in r.getMessage() and (level is None or r.levelno == level)
    ]


ROOT = Path(__file__).resolve().parents[3]


def monitor_env(database_url: str, controller_address: str, **overrides: str) -> dict[str, str]:
    """The environment of a `python -m thermostat.idle_monitor` process against the test's controller."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNPOD_", "IDLE_", "CHECK_", "MAX_RUNTIME", "MONITOR_", "POD_CONTROLLER"))
    }
    env.update(
        {
            "DATABASE_URL": database_url,
            "POD_CONTROLLER_ADDR": controller_address,
            "IDLE_MONITOR_PORT": "0",
            "IDLE_MONITOR_METRICS_PORT": "0",
            "HEALTH_PROBE_SECONDS": "0.5",
            "LOG_LEVEL": "INFO",
            INTERNAL_TOKEN_ENV: INTERNAL_TOKEN,
        }
    )
    env.update(overrides)
    return env


@contextlib.asynccontextmanager
async def monitor_process(env: dict[str, str], log_path: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """The idle monitor as its own process, its log in `log_path`; killed (SIGKILL) if it outlives the block."""
    with log_path.open("wb") as log_file:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "thermostat.idle_monitor",
            cwd=ROOT,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log_file,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            yield process
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()


@dataclass
class InProcessMonitor:
    """`python -m thermostat.idle_monitor`'s build() served on loopback in this process: its watches are readable."""

    monitor: Monitor
    address: str

    @property
    def watches(self) -> dict[str, PodWatch]:
        return self.monitor.watches

    async def state(self, name: str = POD) -> monitor_pb2.GetMonitorStateResponse:
        async with grpc.aio.insecure_channel(self.address) as channel:
            reply: monitor_pb2.GetMonitorStateResponse = await monitor_pb2_grpc.IdleMonitorStub(
                channel
            ).GetMonitorState(monitor_pb2.GetMonitorStateRequest(name=name), timeout=10)
            return reply

    async def health(self, service: str = "") -> int:
        async with grpc.aio.insecure_channel(self.address) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=5
            )
            return int(reply.status)


@contextlib.asynccontextmanager
async def in_process_monitor(env: Mapping[str, str], store: Store) -> AsyncIterator[InProcessMonitor]:
    """The idle monitor built from `env` (settings and pod list alike) over the test's store."""
    with pytest.MonkeyPatch.context() as mp:
        for key in IdleMonitorSettings.model_fields:
            mp.delenv(key.upper(), raising=False)
        for key, value in env.items():
            mp.setenv(key, value)
        settings = IdleMonitorSettings()
    monitor = await build_monitor(settings, env, store)
    port = await monitor.host.start("127.0.0.1", 0, metrics_port=0)
    try:
        yield InProcessMonitor(monitor=monitor, address=f"127.0.0.1:{port}")
    finally:
        await monitor.host.stop(1.0)
