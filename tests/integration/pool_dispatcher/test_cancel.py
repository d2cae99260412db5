"""Cancel in every state (worker-pool seed: Cancelling a job), and the cancel-vs-dispatch orderings."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import RunningPool, caller, pool_env, sleepy_type, start_pool
from tests.integration.pool_dispatcher.seams import before_machine_ready
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store

LONG = b'{"seconds": 30, "build_id": "build-1"}'


@pytest.fixture
async def pool(pool_store: Store) -> RunningPool:
    async with start_pool(pool_store, pool_env([sleepy_type(max_workers=1)])) as running:
        yield running


async def cancel(pool: RunningPool, job_id: str, build_id: str = "build-1") -> pool_pb2.Job:
    job: pool_pb2.Job = await pool.stub.CancelJob(
        pool_pb2.CancelJobRequest(id=job_id, build_id=build_id), metadata=caller()
    )
    return job


async def in_state(pool: RunningPool, job_id: str, state: str) -> None:
    async def reached() -> bool | None:
        return True if (await pool.job(job_id)).state == state else None

    await eventually(reached, timeout=30, every=0.02)


async def test_a_queued_job_cancelled_never_reaches_a_machine_and_is_not_metered(pool: RunningPool) -> None:
    blocker = await pool.submit(b"0.5", machine_type="sleepy")
    queued = await pool.submit(b"0", machine_type="sleepy")
    assert (await cancel(pool, queued.id)).state == "cancelled"
    await pool.finished(blocker.id)
    job = await pool.job(queued.id)
    assert job.state == "cancelled" and not job.HasField("started_at")
    assert [e.job_id for e in await pool.usage()] == [blocker.id]


async def test_a_dispatched_job_cancelled_before_its_machine_boots_never_runs(pool_store: Store) -> None:
    gate = asyncio.Event()
    arrived = asyncio.Event()

    async def hold(machine_id: str) -> None:
        arrived.set()
        await gate.wait()

    async with start_pool(
        pool_store, pool_env([sleepy_type(max_workers=1)]), seams=[before_machine_ready(hold)]
    ) as pool:
        job = await pool.submit(b"0", machine_type="sleepy")
        await arrived.wait()
        assert (await pool.job(job.id)).state == "dispatched"
        assert (await cancel(pool, job.id)).state == "cancelled"
        gate.set()

        async def warm() -> bool | None:
            return True if [w.state for w in await pool.workers()] == ["warm"] else None

        await eventually(warm, timeout=10)
        assert not (await pool.job(job.id)).HasField("started_at")
        assert await pool.usage() == []


async def test_a_running_job_cancelled_posts_the_cancel_and_is_metered_as_cancelled(pool: RunningPool) -> None:
    job = await pool.submit(LONG, machine_type="sleepy")
    await in_state(pool, job.id, "running")
    assert (await cancel(pool, job.id)).state == "cancelled"

    async def metered() -> list[pool_pb2.UsageEvent] | None:
        events = await pool.usage()
        return events or None

    [event] = await eventually(metered, timeout=10)  # the worker's sleep ended by the cancel, not after 30 s
    assert event.job_id == job.id and event.terminal_state == "cancelled" and event.duration_seconds < 30
    assert [w.state for w in await pool.workers()] == ["warm"]
    final = await pool.job(job.id)
    assert final.state == "cancelled" and not final.has_result


async def test_a_sync_wait_returns_at_once_when_its_job_is_cancelled(pool: RunningPool) -> None:
    request = pool_pb2.SubmitJobSyncRequest(machine_type="sleepy", wait_seconds="60")
    request.payload.data = LONG
    call = pool.stub.SubmitJobSync(request, metadata=caller())

    async def running_job() -> str | None:  # the job id comes with the answer: find the job in the store
        row = await pool.dispatcher.repo.pool.fetchval("SELECT id::text FROM pool_jobs WHERE state = 'running'")
        return row

    job_id = await eventually(running_job, timeout=30)
    await cancel(pool, job_id)
    body = await asyncio.wait_for(call, timeout=10)  # the job itself would sleep for 30 s
    assert dict(await call.initial_metadata())["x-http-code"] == "409" and body.data == b'{"state": "cancelled"}'
    assert dict(await call.trailing_metadata())["x-pool-job-state"] == "cancelled"


async def test_cancelling_a_cancelled_job_answers_again_and_a_finished_one_is_409(pool: RunningPool) -> None:
    queued_blocker = await pool.submit(b"0.2", machine_type="sleepy")
    job = await pool.submit(b"0", machine_type="sleepy")
    await cancel(pool, job.id)
    assert (await cancel(pool, job.id)).state == "cancelled"
    await pool.finished(queued_blocker.id)
    with pytest.raises(grpc.aio.AioRpcError) as finished:
        await cancel(pool, queued_blocker.id)
    assert finished.value.code() == grpc.StatusCode.ABORTED
    assert dict(finished.value.initial_metadata())["x-http-code"] == "409"


@pytest.mark.parametrize("build_id", ["", "has space", "../etc", "x" * 129])
async def test_a_bad_build_id_is_400(pool: RunningPool, build_id: str) -> None:
    job = await pool.submit(b"0", machine_type="sleepy")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await cancel(pool, job.id, build_id)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "build_id" in refused.value.details()


async def test_cancel_first_a_job_locked_by_a_cancel_is_skipped_by_the_dispatch(
    pool: RunningPool, pool_store: Store
) -> None:
    """Cancel holds the row when the machine frees up: the completion's claim skips it, the machine goes warm,
    and the committed cancel stands (the job never runs)."""
    blocker = await pool.submit(b"0", machine_type="sleepy")
    await pool.finished(blocker.id)
    held = await pool.submit(b'{"seconds": 0.3}', machine_type="sleepy")
    await in_state(pool, held.id, "running")
    queued = await pool.submit(b"0", machine_type="sleepy")
    async with pool_store.pool.acquire() as other, other.transaction():
        await other.execute("SELECT 1 FROM pool_jobs WHERE id = $1 FOR UPDATE", uuid.UUID(queued.id))
        await pool.finished(held.id)  # its completion looked for the next job and skipped the locked one

        async def warm() -> bool | None:
            return True if [w.state for w in await pool.workers()] == ["warm"] else None

        await eventually(warm, timeout=10)
        await other.execute(
            "UPDATE pool_jobs SET state = 'cancelled', completed_at = now() WHERE id = $1", uuid.UUID(queued.id)
        )
    await pool.dispatcher.placement.place()  # a later pass finds nothing queued
    job = await pool.job(queued.id)
    assert job.state == "cancelled" and not job.HasField("worker_id")
    assert {e.job_id for e in await pool.usage()} == {blocker.id, held.id}
