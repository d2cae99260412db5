"""Jobs through one dispatcher on real reference workers: warm reuse, affinity, the queue, payloads, outcomes."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import (
    JOB_FIELDS,
    TYPED_JOB_FIELDS,
    RunningPool,
    caller,
    local_type,
    pool_env,
    sleepy_type,
    start_pool,
)
from tests.integration.pool_dispatcher.seams import before_execute
from tests.integration.pool_dispatcher.test_fences import HeldStep, machine_idle
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store


async def no_workers(pool: RunningPool) -> None:
    """The fleet is empty once the retired machine's stop has finished."""

    async def empty() -> bool | None:
        return True if await pool.workers() == [] else None

    await eventually(empty, timeout=10, every=0.05)


@pytest.fixture
async def pool(pool_store: Store) -> RunningPool:
    async with start_pool(pool_store, pool_env([local_type(max_workers=2), sleepy_type(max_workers=2)])) as running:
        yield running


async def test_a_sync_job_runs_on_a_new_machine_and_returns_the_payload_echoed(pool: RunningPool) -> None:
    body, metadata = await pool.run(b"ping")
    assert body == b"ping"
    assert metadata["x-pool-job-state"] == "completed"
    job = await pool.job(metadata["x-pool-job-id"])
    assert job.state == "completed" and job.has_result and job.HasField("worker_id")


async def test_binary_payload_reaches_the_worker_and_comes_back_verbatim(pool: RunningPool) -> None:
    payload = bytes(range(256)) * 1000 + b"\x00\xff"
    body, _ = await pool.run(payload)
    assert body == payload


async def test_a_second_job_reuses_the_warm_machine(pool: RunningPool) -> None:
    _, first = await pool.run(b"one")
    _, second = await pool.run(b"two")
    one, two = await pool.job(first["x-pool-job-id"]), await pool.job(second["x-pool-job-id"])
    assert one.worker_id == two.worker_id
    assert len(await pool.workers()) == 1


async def test_a_session_returns_to_its_machine_when_two_are_warm(pool: RunningPool) -> None:
    slow = await pool.submit(b'{"seconds": 1}', machine_type="sleepy", session_id="other")
    _, mine = await pool.run(b"0", session_id="s1", machine_type="sleepy")
    await pool.finished(slow.id)
    assert len(await pool.workers()) == 2
    mine_machine = (await pool.job(mine["x-pool-job-id"])).worker_id
    for _ in range(3):
        _, again = await pool.run(b"0", session_id="s1", machine_type="sleepy")
        assert (await pool.job(again["x-pool-job-id"])).worker_id == mine_machine


async def test_usage_is_recorded_once_per_job_that_reached_a_machine(pool: RunningPool) -> None:
    _, one = await pool.run(b"a")
    _, two = await pool.run(b"b")
    events = await pool.usage()
    assert [e.job_id for e in events] == [one["x-pool-job-id"], two["x-pool-job-id"]]
    assert all(e.terminal_state == "completed" and e.duration_seconds >= 0 for e in events)
    assert events[0].position < events[1].position


async def test_the_fleet_stops_growing_at_max_workers_and_the_queue_drains(pool: RunningPool) -> None:
    jobs = [await pool.submit(b'{"seconds": 0.3}', machine_type="sleepy") for _ in range(6)]
    for job in jobs:
        assert (await pool.finished(job.id)).state == "completed"
    machines = {(await pool.job(job.id)).worker_id for job in jobs}
    assert len(machines) <= 2
    assert len(await pool.workers()) <= 2


async def test_a_busy_machine_takes_no_second_job(pool: RunningPool) -> None:
    first = await pool.submit(b'{"seconds": 1}', machine_type="sleepy")

    async def running() -> bool | None:
        return True if (await pool.job(first.id)).state == "running" else None

    await eventually(running, timeout=30, every=0.02)
    second = await pool.submit(b"0", machine_type="sleepy")
    await pool.finished(second.id)
    assert (await pool.job(second.id)).worker_id != (await pool.job(first.id)).worker_id


async def test_priority_then_fifo_orders_the_queue(pool_store: Store) -> None:
    """Behind a busy machine the queue runs by priority, then in submit order: the two jobs of priority 5 in the
    order they came, then the one of priority 1. The machine is warm and the job ahead is held at the worker
    until all three wait, so the queue's order alone decides (on a cold machine the first job is whichever one
    placement finds first in line when its pass runs, which can be any of them)."""
    held = HeldStep()
    env = pool_env([sleepy_type(max_workers=1)])
    async with start_pool(pool_store, env, seams=[before_execute(held)]) as pool:
        _, warm_up = await pool.run(b"0", machine_type="sleepy")
        await machine_idle(pool)
        held.armed = True
        ahead = await pool.submit(b"0", machine_type="sleepy")
        await held.arrived.wait()  # the job ahead holds the one machine, at the worker's door
        low = await pool.submit(b"0", machine_type="sleepy", priority="1")
        high = await pool.submit(b"0", machine_type="sleepy", priority="5")
        later_high = await pool.submit(b"0", machine_type="sleepy", priority="5")
        assert [(await pool.job(j.id)).state for j in (low, high, later_high)] == ["queued"] * 3
        held.release.set()
        for job in (ahead, low, high, later_high):
            assert (await pool.finished(job.id)).state == "completed"
        ran = [event.job_id for event in await pool.usage()]
        assert ran == [warm_up["x-pool-job-id"], ahead.id, high.id, later_high.id, low.id]
        started = {j.id: (await pool.job(j.id)).started_at for j in (ahead, low, high, later_high)}
        assert started[ahead.id] < started[high.id] < started[later_high.id] < started[low.id]


async def test_the_per_job_timeout_times_the_job_out_and_retires_the_machine(pool: RunningPool) -> None:
    body, metadata = await pool.run(b'{"seconds": 5}', machine_type="sleepy", timeout_seconds="0.3")
    assert metadata["x-pool-job-state"] == "timed_out"
    assert b"timed_out" in body
    job = await pool.job(metadata["x-pool-job-id"])
    assert "timeout" in job.error
    await no_workers(pool)
    assert [e.terminal_state for e in await pool.usage()] == ["timed_out"]


async def test_a_worker_500_fails_the_job_and_keeps_the_machine(pool_store: Store) -> None:
    failing = local_type(env={"STRATA_WORKER_HANDLER": "fail", "STRATA_WORKER_FAIL_MESSAGE": "cell raised"})
    async with start_pool(pool_store, pool_env([failing])) as pool:
        body, metadata = await pool.run(b"x")
        assert metadata["x-pool-job-state"] == "failed"
        assert metadata["x-http-code"] == "502"
        assert b"cell raised" in body
        workers = await pool.workers()
        assert [w.state for w in workers] == ["warm"]
        assert [e.terminal_state for e in await pool.usage()] == ["failed"]


async def test_job_views_never_carry_payload_result_or_credentials(pool: RunningPool) -> None:
    _, metadata = await pool.run(b"secret-payload")
    job = await pool.job(metadata["x-pool-job-id"])
    fields = {f.name for f in job.DESCRIPTOR.fields}
    assert fields == JOB_FIELDS | TYPED_JOB_FIELDS
    assert b"secret-payload" not in job.SerializeToString()


async def test_concurrent_submits_all_complete_exactly_once(pool: RunningPool) -> None:
    results = await asyncio.gather(*(pool.run(f"job-{i}".encode()) for i in range(20)))
    assert sorted(body for body, _ in results) == sorted(f"job-{i}".encode() for i in range(20))
    events = await pool.usage()
    assert len(events) == 20 and len({e.job_id for e in events}) == 20


async def test_an_oversized_payload_is_refused_and_nothing_is_queued(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env()) as pool:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pool.submit(b"x" * (32 * 1024 * 1024 + 1))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert dict(refused.value.initial_metadata())["x-http-code"] == "413"
        count = await pool_store.pool.fetchval("SELECT count(*) FROM pool_jobs")
        assert count == 0


async def test_a_payload_of_sixteen_mebibytes_runs(pool: RunningPool) -> None:
    payload = b"\x01" * (16 * 1024 * 1024)
    body, _ = await pool.run(payload)
    assert body == payload


async def test_sync_wait_running_out_answers_202_with_the_job(pool: RunningPool) -> None:
    body, metadata = await pool.run(b'{"seconds": 2}', machine_type="sleepy", wait_seconds="0.2")
    assert metadata["x-http-code"] == "202"
    assert metadata["x-pool-job-state"] in ("queued", "dispatched", "running")
    assert b'"has_result": false' in body


async def test_wait_job_streams_until_the_job_ends(pool: RunningPool) -> None:
    job = await pool.submit(b'{"seconds": 0.3}', machine_type="sleepy")
    states = [j.state async for j in pool.stub.WaitJob(pool_pb2.WaitJobRequest(id=job.id), metadata=caller())]
    assert states[-1] == "completed"
    assert states[0] in ("queued", "dispatched", "running")
