"""Who a job's end is notified to, across dispatcher processes (in-process instances over one database).

A completion notifies only where a wait may be in another process: the channel of the instance whose sync submit
waits, or every process when a WaitJob watches the job. Each ordering of "a wait registers" against "the job ends
elsewhere" is pinned with seams, and the waiting instance's re-read is set to an hour, so only a notification (or
the wait's own first read) can answer it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import pytest

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import RunningPool, caller, sleepy_type
from tests.integration.pool_dispatcher.seams import before_execute, before_wait
from tests.integration.pool_dispatcher.test_fences import HeldStep, machine_idle
from tests.integration.pool_dispatcher.test_instances import instance
from thermostat.pool.v1 import pool_pb2
from thermostat.pool_dispatcher.dispatcher import lease_name
from thermostat.pool_dispatcher.repository import JOBS_DONE, job_done_channel

HOUR = 3600.0
SENTINEL = "test_notify_sentinel"


@dataclass
class Notifications:
    """Every notification on the pool's done channels, by channel, in arrival order."""

    connection: asyncpg.Connection
    seen: list[tuple[str, str]] = field(default_factory=list)
    flushed: asyncio.Event = field(default_factory=asyncio.Event)

    def on(self, _c: object, _pid: int, channel: str, payload: str) -> None:
        if channel == SENTINEL:
            self.flushed.set()
        else:
            self.seen.append((channel, payload))

    async def flush(self) -> list[tuple[str, str]]:
        """What arrived up to now: notifications reach a listener in commit order, so once a sentinel sent
        after the writes is here, so is everything they notified."""
        self.flushed.clear()
        await self.connection.execute(f"NOTIFY {SENTINEL}")
        await asyncio.wait_for(self.flushed.wait(), 10)
        return list(self.seen)

    def about(self, job_id: str) -> list[tuple[str, str]]:
        return [(channel, payload) for channel, payload in self.seen if payload.split(" ")[0] == job_id]


@contextlib.asynccontextmanager
async def notifications(database_url: str, *instances: str) -> AsyncIterator[Notifications]:
    connection = await asyncpg.connect(database_url)
    recorder = Notifications(connection)
    try:
        for channel in (JOBS_DONE, SENTINEL, *(job_done_channel(i) for i in instances)):
            await connection.add_listener(channel, recorder.on)
        yield recorder
    finally:
        await connection.close()


async def queued_job(pool: RunningPool) -> str:
    async def one() -> str | None:
        return await pool.dispatcher.repo.pool.fetchval("SELECT id::text FROM pool_jobs WHERE state = 'queued'")

    return await eventually(one, timeout=10, every=0.02)


async def job_state(pool: RunningPool, job_id: str, state: str) -> None:
    async def reached() -> bool | None:
        return True if (await pool.job(job_id)).state == state else None

    await eventually(reached, timeout=30, every=0.02)


async def watched(pool: RunningPool, job_id: str) -> None:
    async def marked() -> bool | None:
        return (
            True
            if await pool.dispatcher.repo.pool.fetchval("SELECT watched FROM pool_jobs WHERE id = $1::uuid", job_id)
            else None
        )

    await eventually(marked, timeout=10, every=0.02)


@pytest.fixture
def held() -> HeldStep:
    return HeldStep()


async def busy_with_a_held_job(runner: RunningPool, held: HeldStep) -> pool_pb2.Job:
    """The runner's one machine warm, then busy with a job held at the worker's door."""
    await runner.run(b"0", machine_type="sleepy")
    await machine_idle(runner)
    held.armed = True
    ahead = await runner.submit(b"0", machine_type="sleepy")
    await held.arrived.wait()
    return ahead


async def test_a_sync_job_its_own_process_runs_is_notified_to_no_one(database_url: str) -> None:
    async with (
        notifications(database_url, "alpha") as notified,
        instance(database_url, "alpha", [sleepy_type(max_workers=1)]) as (alpha, _),
    ):
        alpha.dispatcher.waits.repoll_seconds = HOUR
        await alpha.run(b"0", machine_type="sleepy")
        await machine_idle(alpha)
        body, metadata = await alpha.run(b"0", machine_type="sleepy")
        assert body == b"slept 0" and metadata["x-pool-job-id"]
        assert await notified.flush() == []  # neither job, nor anything else, was notified on any channel


async def test_a_sync_job_another_process_completes_is_notified_to_the_waiting_process_only(
    database_url: str, held: HeldStep
) -> None:
    types = [sleepy_type(max_workers=1)]
    async with (
        notifications(database_url, "alpha", "beta") as notified,
        instance(database_url, "alpha", types, seams=[before_execute(held)]) as (alpha, _),
        instance(database_url, "beta", types) as (beta, _),
    ):
        beta.dispatcher.waits.repoll_seconds = HOUR
        await busy_with_a_held_job(alpha, held)
        waiting = asyncio.create_task(beta.run(b"0", machine_type="sleepy"))
        queued = await queued_job(beta)
        held.release.set()  # alpha's machine takes beta's queued job next, and completes it
        body, metadata = await waiting
        assert body == b"slept 0" and metadata["x-pool-job-id"] == queued
        await notified.flush()
        assert notified.about(queued) == [(job_done_channel("beta"), f"{queued} completed c2xlcHQgMA==")]


async def test_a_sync_wait_that_registers_after_its_job_ended_elsewhere_reads_it_at_once(
    database_url: str, held: HeldStep
) -> None:
    types = [sleepy_type(max_workers=1)]
    late = HeldStep()
    late.armed = True
    async with (
        instance(database_url, "alpha", types, seams=[before_execute(held)]) as (alpha, _),
        instance(database_url, "beta", types, seams=[before_wait(late)]) as (beta, _),
    ):
        beta.dispatcher.waits.repoll_seconds = HOUR
        await busy_with_a_held_job(alpha, held)
        waiting = asyncio.create_task(beta.run(b"0", machine_type="sleepy"))
        await late.arrived.wait()  # submitted (queued behind the held job), not yet waiting
        job_id = await queued_job(beta)
        held.release.set()
        await job_state(alpha, job_id, "completed")

        async def heard() -> bool | None:  # the notification reached beta before its wait began
            return True if job_id in beta.dispatcher.waits.waiters.recent else None

        await eventually(heard, timeout=10, every=0.02)
        late.release.set()
        body, metadata = await waiting
        assert body == b"slept 0" and metadata["x-pool-job-id"] == job_id


async def wait_job(pool: RunningPool, job_id: str) -> list[str]:
    return [j.state async for j in pool.stub.WaitJob(pool_pb2.WaitJobRequest(id=job_id), metadata=caller())]


async def test_a_wait_job_elsewhere_that_began_before_the_completion_is_notified(
    database_url: str, held: HeldStep
) -> None:
    types = [sleepy_type(max_workers=1)]
    async with (
        notifications(database_url) as notified,
        instance(database_url, "alpha", types, seams=[before_execute(held)]) as (alpha, _),
        instance(database_url, "beta", types) as (beta, _),
    ):
        beta.dispatcher.waits.repoll_seconds = HOUR
        job = await busy_with_a_held_job(alpha, held)
        streaming = asyncio.create_task(wait_job(beta, job.id))
        await watched(alpha, job.id)  # beta's WaitJob marked the row: a completion from here notifies everyone
        held.release.set()
        assert (await streaming)[-1] == "completed"
        await notified.flush()
        assert notified.about(job.id) == [(JOBS_DONE, job.id)]


async def test_a_wait_job_elsewhere_that_begins_after_the_completion_reads_the_end(
    database_url: str, held: HeldStep
) -> None:
    types = [sleepy_type(max_workers=1)]
    late = HeldStep()
    async with (
        notifications(database_url) as notified,
        instance(database_url, "alpha", types, seams=[before_execute(held)]) as (alpha, _),
        instance(database_url, "beta", types, seams=[before_wait(late)]) as (beta, _),
    ):
        beta.dispatcher.waits.repoll_seconds = HOUR
        job = await busy_with_a_held_job(alpha, held)
        late.armed = True
        streaming = asyncio.create_task(wait_job(beta, job.id))
        await late.arrived.wait()  # the stream read the job running; its wait has not begun
        held.release.set()
        await job_state(alpha, job.id, "completed")
        late.release.set()
        assert await streaming == ["running", "completed"]
        await notified.flush()
        assert notified.about(job.id) == []  # nobody watched when it completed: its end was read, not notified


async def test_a_wait_job_elsewhere_on_a_lapsed_instances_job_is_woken_by_the_reclaim(database_url: str) -> None:
    types = [sleepy_type()]
    async with (
        instance(database_url, "alpha", types) as (alpha, store),
        instance(database_url, "beta", types) as (beta, _),
        instance(database_url, "gamma", types) as (gamma, _),
    ):
        gamma.dispatcher.waits.repoll_seconds = HOUR
        job = await alpha.submit(b"30", machine_type="sleepy")
        await job_state(alpha, job.id, "running")
        streaming = asyncio.create_task(wait_job(gamma, job.id))
        await watched(alpha, job.id)
        await store.pool.execute(
            "UPDATE leases SET expires_at = now() - interval '1 second' WHERE name = $1", lease_name("alpha")
        )
        await beta.dispatcher.scaler.reclaim()
        assert (await streaming)[-1] == "failed"


async def backend_waiting_on_a_lock(store: asyncpg.Pool) -> None:
    async def blocked() -> bool | None:
        waiting = await store.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        return True if waiting else None

    await eventually(blocked, timeout=10, every=0.02)


async def test_a_repeat_watch_reads_the_job_without_waiting_for_its_row_lock(database_url: str) -> None:
    """Only a WaitJob's first mark writes the row: every later read of the stream takes no lock, so it neither
    waits for a writer nor makes a claim's SKIP LOCKED pass the job over."""
    async with instance(database_url, "alpha", [sleepy_type(max_workers=1)]) as (alpha, store):
        job = await alpha.submit(b"0", machine_type="sleepy")
        first, marked = await alpha.dispatcher.repo.jobs.watch_job(job.id, "acme")
        assert marked and first is not None
        async with store.pool.acquire() as locker, locker.transaction():
            await locker.execute("SELECT 1 FROM pool_jobs WHERE id = $1::uuid FOR UPDATE", job.id)
            async with asyncio.timeout(5):  # a write of the row would wait for this transaction's end
                again, marked_again = await alpha.dispatcher.repo.jobs.watch_job(job.id, "acme")
        assert again is not None and again.id == job.id and not marked_again


async def test_a_job_a_freed_machine_passed_over_while_its_row_was_locked_runs_once_a_wait_job_marks_it(
    database_url: str, held: HeldStep
) -> None:
    """The machine's completion finds the queued job's row locked (as a WaitJob's first mark locks it), passes it
    over (SKIP LOCKED) and goes idle; the mark, once through, sends placement round: the job runs at once, not
    at the next scaler pass (none runs here)."""
    async with instance(database_url, "alpha", [sleepy_type(max_workers=1)], seams=[before_execute(held)]) as (
        alpha,
        store,
    ):
        await busy_with_a_held_job(alpha, held)
        held.armed = False
        queued = await alpha.submit(b"0", machine_type="sleepy")
        async with store.pool.acquire() as locker:
            lock = locker.transaction()
            await lock.start()
            await locker.execute("SELECT 1 FROM pool_jobs WHERE id = $1::uuid FOR UPDATE", queued.id)
            held.release.set()
            await machine_idle(alpha)  # the completion passed the locked job over
            assert (await alpha.job(queued.id)).state == "queued"
            streaming = asyncio.create_task(wait_job(alpha, queued.id))
            await backend_waiting_on_a_lock(store.pool)  # the WaitJob's mark waits for the row
            await lock.commit()
        async with asyncio.timeout(20):
            assert (await streaming)[-1] == "completed"
