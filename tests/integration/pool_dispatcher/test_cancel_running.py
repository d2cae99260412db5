"""A running job's cancel against its machine's answer (worker-pool seed, Cancelling a job: "The cancel stands even
if the machine finished first: its result is dropped. A machine that ignores the cancel runs the job out, and one
that never answers is retired at the job's timeout, as any other.").

The cancel stands in the completion's own statement (repository/jobs.sql `complete` keeps a `cancelled` row and
drops the result), so the orderings are those of two statements on the job's row, the cancel's and the
completion's, after the machine answered:

    cancel commits, then the completion runs      → cancelled, result dropped, metered as cancelled, machine warm
    the cancel holds the row as the completion    → the completion waits for it, then the same
      comes
    the completion holds the row as the cancel    → the cancel waits for it and finds the job completed: 409,
      comes                                          the result kept

The runner is held right after the machine answered (its before_complete seam); a statement is held on the row by
a lock the test takes, and the next is let in only once the one before it waits on that lock (pg_stat_activity),
so Postgres's queue on the row orders them.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import uuid
from pathlib import Path

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import RunningPool, caller, pool_env, sleepy_type, start_pool
from tests.integration.pool_dispatcher.seams import before_complete
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store

DEAF_WORKER = f"{sys.executable} {Path(__file__).parents[2] / 'fixtures' / 'deaf_worker.py'}"
"""A worker that answers the build cancel 200 and goes on running the job (tests/fixtures/deaf_worker.py)."""


class HeldOnce:
    """A runner seam that holds the first job reaching it until released."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()
        self.armed = True

    async def __call__(self, job_id: str) -> None:
        if self.armed:
            self.armed = False
            self.arrived.set()
            await self.release.wait()


async def cancel(pool: RunningPool, job_id: str, build_id: str = "build-1") -> pool_pb2.Job:
    job: pool_pb2.Job = await pool.stub.CancelJob(
        pool_pb2.CancelJobRequest(id=job_id, build_id=build_id), metadata=caller()
    )
    return job


async def one_usage_event(pool: RunningPool, timeout: float = 15) -> pool_pb2.UsageEvent:
    async def metered() -> list[pool_pb2.UsageEvent] | None:
        return await pool.usage() or None

    [event] = await eventually(metered, timeout=timeout)
    return event


async def state_of(pool: RunningPool, job_id: str) -> str:
    return (await pool.job(job_id)).state


async def waiting_on_a_row_lock(store: Store, count: int) -> None:
    """Until `count` sessions of this database are blocked by another's lock (the test's, then each other's)."""

    async def waiting() -> bool | None:
        found = await store.pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0"
        )
        return True if found == count else None

    await eventually(waiting, timeout=10, every=0.01)


async def result_stored(store: Store, job_id: str) -> bytes | None:
    value: bytes | None = await store.pool.fetchval("SELECT result FROM pool_jobs WHERE id = $1", uuid.UUID(job_id))
    return value


async def assert_cancel_stood(pool: RunningPool, store: Store, job_id: str) -> None:
    """Cancelled, its result dropped, metered once as cancelled, and the machine warm for the next job."""
    event = await one_usage_event(pool)
    assert (event.job_id, event.terminal_state) == (job_id, "cancelled")
    job = await pool.job(job_id)
    assert job.state == "cancelled" and not job.has_result and not job.error
    assert await result_stored(store, job_id) is None
    [machine] = await pool.workers()
    assert machine.state == "warm"
    following = await pool.finished((await pool.submit(b"0", machine_type="sleepy")).id)
    assert following.state == "completed" and following.worker_id == machine.id


@pytest.fixture
def held() -> HeldOnce:
    return HeldOnce()


@pytest.fixture
async def pool(pool_store: Store, held: HeldOnce) -> RunningPool:
    """One sleepy machine at most; the first job's run is held right after its machine answered."""
    async with start_pool(pool_store, pool_env([sleepy_type(max_workers=1)]), seams=[before_complete(held)]) as running:
        yield running


async def test_a_cancel_landing_after_the_machine_answered_stands_and_its_result_is_dropped(
    pool: RunningPool, pool_store: Store, held: HeldOnce
) -> None:
    """The machine finished first (its answer is in the runner's hands); the cancel commits before the completion's
    statement, which keeps it: the seed's "the cancel stands even if the machine finished first"."""
    job = await pool.submit(b'{"seconds": 0, "build_id": "build-1"}', machine_type="sleepy")
    await held.arrived.wait()
    assert await state_of(pool, job.id) == "running"
    assert (await cancel(pool, job.id)).state == "cancelled"  # the machine, done, answers the build cancel 404
    held.release.set()
    await assert_cancel_stood(pool, pool_store, job.id)


async def test_a_completion_meeting_a_cancel_on_the_row_waits_for_it_and_keeps_the_cancel(
    pool: RunningPool, pool_store: Store, held: HeldOnce
) -> None:
    job = await pool.submit(b'{"seconds": 0, "build_id": "build-1"}', machine_type="sleepy")
    await held.arrived.wait()
    async with pool_store.pool.acquire() as gate:
        locked = gate.transaction()
        await locked.start()
        await gate.execute("SELECT 1 FROM pool_jobs WHERE id = $1 FOR UPDATE", uuid.UUID(job.id))
        cancelling = asyncio.ensure_future(cancel(pool, job.id))
        await waiting_on_a_row_lock(pool_store, 1)  # the cancel's statement, first in line for the row
        held.release.set()
        await waiting_on_a_row_lock(pool_store, 2)  # the completion's, behind it
        await locked.commit()
    assert (await cancelling).state == "cancelled"
    await assert_cancel_stood(pool, pool_store, job.id)


async def test_a_cancel_meeting_the_completion_on_the_row_waits_for_it_and_answers_409(
    pool: RunningPool, pool_store: Store, held: HeldOnce
) -> None:
    """The completion's statement came first: the job completed, so the cancel is "finished another way"."""
    job = await pool.submit(b'{"seconds": 0, "build_id": "build-1"}', machine_type="sleepy")
    await held.arrived.wait()
    async with pool_store.pool.acquire() as gate:
        locked = gate.transaction()
        await locked.start()
        await gate.execute("SELECT 1 FROM pool_jobs WHERE id = $1 FOR UPDATE", uuid.UUID(job.id))
        held.release.set()
        await waiting_on_a_row_lock(pool_store, 1)  # the completion's statement, first in line for the row
        cancelling = asyncio.ensure_future(cancel(pool, job.id))
        await waiting_on_a_row_lock(pool_store, 2)  # the cancel's, behind it
        await locked.commit()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await cancelling
    assert refused.value.code() == grpc.StatusCode.ABORTED
    assert dict(refused.value.initial_metadata())["x-http-code"] == "409"
    event = await one_usage_event(pool)
    assert (event.job_id, event.terminal_state) == (job.id, "completed")
    finished = await pool.job(job.id)
    assert finished.state == "completed" and finished.has_result
    assert await result_stored(pool_store, job.id) == b"slept 0"


# machines that do not honour the cancel


async def test_a_machine_that_rejects_the_cancel_runs_the_job_out_and_is_kept(
    pool_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The reference worker answers 404 for a build it is not running (this payload names none): the pool logs
    the refusal, the job runs to its end on the machine, stays cancelled, is metered for the whole run, and the
    machine goes back to warm."""
    async with start_pool(pool_store, pool_env([sleepy_type(max_workers=1)])) as pool:
        job = await pool.submit(b'{"seconds": 0.5}', machine_type="sleepy")

        async def running() -> bool | None:
            return True if await state_of(pool, job.id) == "running" else None

        await eventually(running, timeout=30, every=0.02)
        with caplog.at_level(logging.INFO, logger="thermostat.pool_dispatcher"):
            assert (await cancel(pool, job.id)).state == "cancelled"
        assert f"job {job.id}: the machine did not accept the cancel (404" in caplog.text
        event = await one_usage_event(pool)
        assert event.terminal_state == "cancelled" and event.duration_seconds >= 0.5  # it ran out
        await assert_cancel_stood(pool, pool_store, job.id)


async def test_a_machine_that_ignores_the_cancel_runs_the_job_out_and_is_kept(pool_store: Store) -> None:
    """A worker that answers the cancel 200 and goes on: the job runs out, stays cancelled, result dropped."""
    deaf = sleepy_type(max_workers=1, image=DEAF_WORKER)
    async with start_pool(pool_store, pool_env([deaf])) as pool:
        job = await pool.submit(b'{"seconds": 0.5, "build_id": "build-1"}', machine_type="sleepy")

        async def running() -> bool | None:
            return True if await state_of(pool, job.id) == "running" else None

        await eventually(running, timeout=30, every=0.02)
        assert (await cancel(pool, job.id)).state == "cancelled"
        event = await one_usage_event(pool)
        assert event.terminal_state == "cancelled" and event.duration_seconds >= 0.5
        await assert_cancel_stood(pool, pool_store, job.id)


async def test_a_machine_that_ignores_the_cancel_and_never_answers_is_retired_at_the_jobs_timeout(
    pool_store: Store,
) -> None:
    """Its job outlives its timeout: the call ends at the deadline, the job stays cancelled (not timed out), the
    usage event says cancelled, and the machine, still busy with the job, is retired and stopped."""
    deaf = sleepy_type(max_workers=1, image=DEAF_WORKER)
    async with start_pool(pool_store, pool_env([deaf])) as pool:
        job = await pool.submit(b'{"seconds": 60, "build_id": "build-1"}', machine_type="sleepy", timeout_seconds="1")

        async def running() -> bool | None:
            return True if await state_of(pool, job.id) == "running" else None

        await eventually(running, timeout=30, every=0.02)
        [process] = pool.backend._children.values()
        assert (await cancel(pool, job.id)).state == "cancelled"
        event = await one_usage_event(pool)
        assert event.terminal_state == "cancelled" and event.duration_seconds >= 1

        async def retired() -> bool | None:
            return True if await pool.workers() == [] and process.returncode is not None else None

        await eventually(retired, timeout=15)
        final = await pool.job(job.id)
        assert final.state == "cancelled" and not final.has_result and not final.error
