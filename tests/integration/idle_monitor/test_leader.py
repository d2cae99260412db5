"""Leader election per pod over a Postgres lease, in real time (CHECK_SECONDS 0.2 s, lease 1 s): with two
replicas exactly one ticks; when it leaves the other takes over and the streak goes on where it was."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.services import VOLUME, RunningService
from tests.integration.idle_monitor.conftest import POD, POD_ID, monitor_env, monitor_options, monitor_process
from thermostat.dev.simulators.runpod import RunPodSimulator
from thermostat.idle_monitor.leader import PodLeader
from thermostat.idle_monitor.scrape_clients import ScrapeClients
from thermostat.idle_monitor.state_store import MonitorStateStore, SavedState
from thermostat.idle_monitor.ticker import PodTicker
from thermostat.pods.v1 import pods_pb2_grpc
from thermostat.policy.idle.monitor_tick import TickDecision
from thermostat.store.db import Store

CHECK = 0.2
LEASE = 1.0
# campaign retries every min(lease / 3, check); the rest is scheduling slack on a busy two-core machine
TAKEOVER_BOUND = LEASE + CHECK + 0.5
TIMINGS = {"CHECK_SECONDS": str(CHECK), "IDLE_MINUTES": "60"}  # a window no test reaches: the streak only grows


class RecordingTicker(PodTicker):
    """The real ticker, keeping each decision with its tick time so a test can follow the streak."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.decisions: list[tuple[datetime, TickDecision]] = []

    async def tick_once(self, now: datetime, may_act: Callable[[], bool] = lambda: True) -> TickDecision | None:
        decision = await super().tick_once(now, may_act)
        if decision is not None:
            self.decisions.append((now, decision))
        return decision


@dataclass
class Replica:
    name: str
    leader: PodLeader
    ticker: RecordingTicker
    task: asyncio.Task[None] | None = None
    streaks: list[int] = field(default_factory=list)

    def start(self) -> None:
        self.task = asyncio.create_task(self.leader.run(), name=f"replica {self.name}")

    async def leave(self) -> None:
        """A graceful shutdown: the leader loop is cancelled and releases its lease on the way out."""
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@contextlib.asynccontextmanager
async def replica(name: str, database_url: str, controller: RunningService) -> AsyncIterator[Replica]:
    """One monitor replica in this process: its own pools, channel and HTTP client, like its own process."""
    store = await Store.open(database_url, max_size=2, application_name=name)
    try:
        async with controller.channel() as channel, ScrapeClients() as scrapes:
            states = MonitorStateStore(store.pool)
            ticker = RecordingTicker(pod_name=POD, controller=pods_pb2_grpc.PodControllerInternalStub(channel),
                                     scrapes=scrapes, states=states, options=monitor_options(**TIMINGS), replica=name,
                                     scrape_timeout=1.0, controller_timeout=5.0)
            one = Replica(name=name, ticker=ticker, leader=PodLeader(
                ticker, store.leases, states, replica=name, lease_seconds=LEASE, check_seconds=CHECK))
            try:
                yield one
            finally:
                if one.task is not None and not one.task.done():
                    await one.leave()
    finally:
        await store.close()


def streaks(r: Replica) -> list[int]:
    return [d.state.counters.idle_streak for _, d in r.ticker.decisions]


async def saved(store: MonitorStateStore) -> SavedState:
    return await store.load(POD)


@pytest.fixture
def idle_pod(runpod_sim: RunPodSimulator) -> str:
    runpod_sim.add_pod(pod_id=POD_ID, status="RUNNING", volume_id=VOLUME)
    return POD_ID


async def test_with_two_replicas_exactly_one_ticks_and_a_graceful_leave_hands_over_at_once(
        idle_pod: str, runpod_sim: RunPodSimulator, pod_controller: RunningService, database_url: str) -> None:
    """Only the lease holder scrapes; released on shutdown, the other leads within one retry and goes on."""
    async with replica("replica-a", database_url, pod_controller) as a, \
            replica("replica-b", database_url, pod_controller) as b:
        a.start()
        await eventually(lambda: asyncio.sleep(0, a.ticker.decisions or None), timeout=5)
        b.start()
        await asyncio.sleep(6 * CHECK)
        assert a.leader.leading and not b.leader.leading
        assert b.ticker.decisions == []
        assert streaks(a) == list(range(len(a.ticker.decisions))), "one tick per interval, none twice"
        assert len(runpod_sim.requests("/proxy/")) == len(a.ticker.decisions), "one scrape per tick, one replica"

        left_at = time.monotonic()
        await a.leave()
        last = streaks(a)[-1]
        await eventually(lambda: asyncio.sleep(0, b.ticker.decisions or None), timeout=5)
        took = time.monotonic() - left_at
        await asyncio.sleep(3 * CHECK)

    assert took < CHECK + CHECK + 0.5, f"a released lease is taken on the next campaign retry, took {took:.2f} s"
    assert streaks(b)[: 3] == [last + 1, last + 2, last + 3], "the streak continues exactly where it was"
    (a_last_at, _), (b_first_at, _) = a.ticker.decisions[-1], b.ticker.decisions[0]
    assert (b_first_at - a_last_at).total_seconds() >= CHECK * 0.9, "the interval A began is waited out"


async def test_a_replica_killed_mid_streak_is_taken_over_within_one_lease_and_the_streak_continues(
        idle_pod: str, pod_controller: RunningService, database_url: str, tmp_path: Path) -> None:
    """SIGKILL releases nothing: the survivor leads once the lease lapses and counts on from the dead one."""
    env = monitor_env(database_url, pod_controller.address, MONITOR_LEASE_SECONDS=str(LEASE), **TIMINGS)
    log = tmp_path / "monitor-a.log"
    store = await Store.open(database_url, max_size=2, application_name="observer")
    try:
        states = MonitorStateStore(store.pool)
        async with monitor_process(env, log) as process:
            prefix = f"{socket.gethostname()}:{process.pid}:"

            async def ticked_a_few() -> SavedState | None:
                row = await store.pool.fetchrow("SELECT ticked_by FROM monitor_state")
                state = await saved(states)
                mine = row is not None and row["ticked_by"].startswith(prefix)
                return state if mine and state.state.counters.idle_streak >= 3 else None

            try:
                await eventually(ticked_a_few, timeout=20, every=0.05)
            except AssertionError:
                raise AssertionError(log.read_text()) from None

            async with replica("replica-b", database_url, pod_controller) as b:
                b.start()
                await asyncio.sleep(4 * CHECK)
                assert not b.leader.leading and b.ticker.decisions == [], "the process holds the lease"

                os.kill(process.pid, signal.SIGKILL)
                killed_at = time.monotonic()
                await process.wait()
                await asyncio.sleep(0.05)  # a statement already at the server commits all the same
                last = await saved(states)

                await eventually(lambda: asyncio.sleep(0, b.leader.leading or None), timeout=5, every=0.01)
                took = time.monotonic() - killed_at
                await eventually(lambda: asyncio.sleep(0, len(b.ticker.decisions) >= 2 or None), timeout=5)
    finally:
        await store.close()

    assert process.returncode == -signal.SIGKILL
    assert took <= TAKEOVER_BOUND, f"took {took:.2f} s to take over a {LEASE} s lease"
    assert last.state.counters.idle_streak >= 3
    assert streaks(b)[:2] == [last.state.counters.idle_streak + 1, last.state.counters.idle_streak + 2]
    assert last.last_tick_at is not None
    assert (b.ticker.decisions[0][0] - last.last_tick_at).total_seconds() >= CHECK * 0.9
