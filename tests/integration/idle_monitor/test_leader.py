"""Leader election per pod over a Postgres lease, on a fake clock the test steps (CHECK_SECONDS 1 s): with two
replicas exactly one ticks, once per interval; when it leaves the other takes over on its next campaign retry
and the streak goes on where it was.

The lease's expiry is the database's (real time); everything the replicas wait on is the fake clock, and
after each step the test waits until every replica is asleep on it again (`FakeClock.settled`), so each step
is exactly one tick whatever the machine's load. A lease long enough never to lapse during a test means no
renewal runs inside one: the parked sleepers are the leader loops and their keepers' renewal timers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.fixtures.services import VOLUME, RunningService
from tests.integration.idle_monitor.conftest import (
    POD,
    POD_ID,
    SCRAPE_TIMEOUT,
    monitor_env,
    monitor_options,
    monitor_process,
)
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.idle_monitor.leader import PodLeader
from thermostat.idle_monitor.repository import MonitorRepository, SavedState
from thermostat.idle_monitor.scrape_clients import ScrapeClients
from thermostat.idle_monitor.ticker import PodTicker
from thermostat.pods.v1 import pods_pb2_grpc
from thermostat.policy.idle.monitor_tick import TickDecision

CHECK = 1.0
LEASE = 60.0  # fake seconds for the keepers, real ones for the database: never lapses, never renews in a test
LEASE_NAME = f"monitor:{POD}"
TIMINGS = {"CHECK_SECONDS": str(CHECK), "IDLE_MINUTES": "60"}  # a window no test reaches: the streak only grows
LEADING = 2  # a leader parks in its tick interval and its keeper in the wait for the next renewal
CAMPAIGNING = 1  # a campaigner parks between two attempts


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

    def start(self) -> None:
        self.task = asyncio.create_task(self.leader.run(), name=f"replica {self.name}")

    async def leave(self) -> None:
        """A graceful shutdown: the leader loop is cancelled and releases its lease on the way out."""
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


@contextlib.asynccontextmanager
async def replica(name: str, database_url: str, controller: RunningService, clock: FakeClock) -> AsyncIterator[Replica]:
    """One monitor replica in this process: its own pools, channel and HTTP client, like its own process."""
    store = await open_store(database_url, max_size=2, application_name=name)
    try:
        async with controller.channel() as channel, ScrapeClients() as scrapes:
            states = MonitorRepository(store.pool)
            ticker = RecordingTicker(
                pod_name=POD,
                controller=pods_pb2_grpc.PodControllerInternalStub(channel),
                scrapes=scrapes,
                states=states,
                options=monitor_options(**TIMINGS),
                replica=name,
                scrape_timeout=SCRAPE_TIMEOUT,
                controller_timeout=5.0,
            )
            one = Replica(
                name=name,
                ticker=ticker,
                leader=PodLeader(
                    ticker, store.leases, states, replica=name, lease_seconds=LEASE, check_seconds=CHECK, clock=clock
                ),
            )
            try:
                yield one
            finally:
                if one.task is not None and not one.task.done():
                    await one.leave()
    finally:
        await store.close()


def streaks(r: Replica) -> list[int]:
    return [d.state.counters.idle_streak for _, d in r.ticker.decisions]


async def saved(store: MonitorRepository) -> SavedState:
    return await store.load(POD)


@pytest.fixture
def idle_pod(runpod_sim: RunPodSimulator) -> str:
    runpod_sim.add_pod(pod_id=POD_ID, status="RUNNING", volume_id=VOLUME)
    return POD_ID


async def test_with_two_replicas_exactly_one_ticks_and_a_graceful_leave_hands_over_at_once(
    idle_pod: str, runpod_sim: RunPodSimulator, pod_controller: RunningService, database_url: str
) -> None:
    """Only the lease holder ticks and scrapes, once per interval; released on shutdown, the lease is the other's
    at its next campaign attempt, which waits out the interval the first began and goes on with its streak."""
    clock = FakeClock()
    async with (
        replica("replica-a", database_url, pod_controller, clock) as a,
        replica("replica-b", database_url, pod_controller, clock) as b,
    ):
        a.start()
        await clock.settled(LEADING)
        clock.advance(CHECK / 2)  # B campaigns half an interval out of step with A's ticks
        b.start()
        await clock.settled(LEADING + CAMPAIGNING)
        for _ in range(9):  # to five intervals in: A ticks on the whole ones, B tries (and fails) on the halves
            clock.advance(CHECK / 2)
            await clock.settled(LEADING + CAMPAIGNING)

        assert a.leader.leading and not b.leader.leading
        assert b.ticker.decisions == []
        assert streaks(a) == [0, 1, 2, 3, 4, 5], "one tick per interval, none twice"
        assert len(runpod_sim.requests("/proxy/")) == 6, "one scrape per tick, one replica"

        await a.leave()
        last_at, last = a.ticker.decisions[-1][0], streaks(a)[-1]
        clock.advance(CHECK / 2)  # B's next attempt takes the released lease, then waits out A's interval
        await clock.settled(LEADING)
        assert b.leader.leading and b.ticker.decisions == []
        for _ in range(5):
            clock.advance(CHECK / 2)
            await clock.settled(LEADING)

    assert streaks(b) == [last + 1, last + 2, last + 3], "the streak continues exactly where it was"
    assert [at - last_at for at, _ in b.ticker.decisions] == [timedelta(seconds=CHECK * n) for n in (1, 2, 3)], (
        "B's first tick comes one interval after A's last, not sooner"
    )


async def test_a_replica_killed_mid_streak_is_taken_over_once_its_lease_lapses_and_the_streak_continues(
    idle_pod: str, pod_controller: RunningService, database_url: str, tmp_path: Path
) -> None:
    """SIGKILL releases nothing: the lease still names the dead process; the survivor's campaign takes it at its
    first attempt after it lapses (here expired in SQL, as the database clock would) and counts on from there."""
    # a lease no stall on a busy machine outlives: it lapses only when the test says so
    env = monitor_env(database_url, pod_controller.address, MONITOR_LEASE_SECONDS="30", **TIMINGS)
    log = tmp_path / "monitor-a.log"
    store = await open_store(database_url, max_size=2, application_name="observer")
    try:
        states = MonitorRepository(store.pool)
        async with monitor_process(env, log) as process:
            prefix = f"{socket.gethostname()}:{process.pid}:"

            async def ticked_a_few() -> SavedState | None:
                state = await saved(states)
                return state if state.ticked_by.startswith(prefix) and state.state.counters.idle_streak >= 3 else None

            try:
                await eventually(ticked_a_few, timeout=20, every=0.05)
            except AssertionError:
                raise AssertionError(log.read_text()) from None
            os.kill(process.pid, signal.SIGKILL)
            await process.wait()
        assert process.returncode == -signal.SIGKILL
        # a statement already at the server commits all the same: read the state once the dead sessions are gone
        await eventually(lambda: _sessions_of(store.pool, "idle-monitor"), timeout=10)
        last = await saved(states)
        holder = await store.leases.holder(LEASE_NAME)
        assert holder is not None and holder.holder.startswith(prefix), "a killed process releases nothing"
        assert last.last_tick_at is not None

        clock = FakeClock(wall=last.last_tick_at)
        async with replica("replica-b", database_url, pod_controller, clock) as b:
            b.start()
            await clock.settled(CAMPAIGNING)
            assert not b.leader.leading and b.ticker.decisions == [], "the dead process's lease is still live"

            await store.pool.execute("UPDATE leases SET expires_at = now() WHERE name = $1", LEASE_NAME)
            clock.advance(CHECK)  # B's next attempt, one interval after the dead process's last tick
            await clock.settled(LEADING)
            assert b.leader.leading
            clock.advance(CHECK)
            await clock.settled(LEADING)
    finally:
        await store.close()

    taken = await _holder_term(database_url)
    assert taken == holder.term + 1, "the survivor leads under the next term"
    assert streaks(b) == [last.state.counters.idle_streak + 1, last.state.counters.idle_streak + 2]
    assert [at for at, _ in b.ticker.decisions] == [last.last_tick_at + timedelta(seconds=CHECK * n) for n in (1, 2)]


async def _sessions_of(pool: asyncpg.Pool, application: str) -> bool | None:
    """True once no session of `application` (a dead process's pools) is left at the server."""
    left = await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1", f"{application}%"
    )
    return True if left == 0 else None


async def _holder_term(database_url: str) -> int:
    connection = await asyncpg.connect(database_url)
    try:
        term: int = await connection.fetchval("SELECT term FROM leases WHERE name = $1", LEASE_NAME)
        return term
    finally:
        await connection.close()
