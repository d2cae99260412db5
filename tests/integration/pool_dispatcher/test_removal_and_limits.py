"""Catalogue removal with a job handed to a booting machine, the fleet-cap warning, and a machine whose row
could not be recorded."""

from __future__ import annotations

import asyncio
import json
import logging
import sys

import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import (
    ADMIN,
    RunningPool,
    caller,
    local_type,
    pool_env,
    sleepy_type,
    start_pool,
)
from tests.integration.pool_dispatcher.seams import before_machine_ready, before_record_started
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store


async def put_catalogue(pool: RunningPool, types: list[dict[str, object]]) -> None:
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = json.dumps(types).encode()
    await pool.stub.PutMachineTypes(request, metadata=ADMIN)


async def test_removing_a_type_fails_its_queued_jobs_and_lets_a_booting_machine_finish_its_job_then_retire(
    pool_store: Store,
) -> None:
    """worker-pool seed: "A removed type accepts none: its queued jobs fail with the reason, and its machines
    finish what they are running, then retire once idle". A job already handed to a booting machine is that
    machine's: it runs; the queued one behind it fails."""
    booting = asyncio.Event()
    boot = asyncio.Event()

    async def hold(machine_id: str) -> None:
        booting.set()
        await boot.wait()

    clock = FakeClock()
    types = [sleepy_type(max_workers=1, cool_down_seconds=30), local_type()]
    async with start_pool(pool_store, pool_env(types), seams=[before_machine_ready(hold)], clock=clock) as pool:
        handed = await pool.submit(b"0", machine_type="sleepy")
        await booting.wait()
        queued = await pool.submit(b"0", machine_type="sleepy")
        assert [(await pool.job(j.id)).state for j in (handed, queued)] == ["dispatched", "queued"]
        await put_catalogue(pool, [local_type()])
        failed = await pool.job(queued.id)
        assert failed.state == "failed" and "sleepy" in failed.error and "removed" in failed.error
        assert (await pool.job(handed.id)).state == "dispatched"
        boot.set()
        assert (await pool.finished(handed.id)).state == "completed"
        assert [w.state for w in await pool.workers()] == ["warm"]
        await pool.dispatcher.scaler.reap()
        assert [w.state for w in await pool.workers()] == ["warm"]  # idle, but not yet past its cool-down
        clock.advance(30)
        await pool.dispatcher.scaler.reap()
        assert await pool.workers() == []


async def test_hitting_the_fleet_cap_logs_one_warning_per_placement_pass(
    pool_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    env = pool_env([sleepy_type()], POOL_MAX_WORKERS_TOTAL="1")
    async with start_pool(pool_store, env) as pool:
        running = await pool.submit(b"30", machine_type="sleepy", tenant="acme")

        async def on_its_machine() -> bool | None:
            return True if (await pool.job(running.id, "acme")).state == "running" else None

        await eventually(on_its_machine, timeout=30, every=0.02)
        for tenant in ("globex", "initech"):
            await pool.submit(b"0", machine_type="sleepy", tenant=tenant)
        await pool.dispatcher.placement.place()  # after the placements the submits poked
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="thermostat.pool_dispatcher"):
            await pool.dispatcher.placement.place()
        warnings = [r.getMessage() for r in caplog.records if "fleet cap" in r.getMessage()]
        assert warnings == ["fleet cap of 1 machines reached: 2 queued job(s) wait for capacity"]
        assert len(await pool.workers()) == 1


async def test_a_started_machine_whose_row_cannot_be_recorded_is_stopped_not_leaked(pool_store: Store) -> None:
    """Between the provider's start and the row's update another actor takes the row (here: a reclaim moves
    it to another owner): the machine is stopped at once."""
    started: list[asyncio.subprocess.Process] = []
    pool_holder: list[RunningPool] = []

    async def taken_meanwhile(machine_id: str) -> None:
        pool = pool_holder[0]
        started.extend(pool.backend._children.values())
        await pool_store.pool.execute(
            "UPDATE pool_machines SET owner = 'someone-else', state = 'stopping' WHERE id = $1::uuid", machine_id
        )

    async with start_pool(pool_store, pool_env([local_type()]), seams=[before_record_started(taken_meanwhile)]) as pool:
        pool_holder.append(pool)
        hint = await pool.stub.SendHint(pool_pb2.SendHintRequest(machine_type="local"), metadata=caller("acme"))
        assert hint.started

        async def stopped() -> bool | None:
            # the child's exit is seen before stop() forgets it, so both are awaited
            exited = started and all(p.returncode is not None for p in started)
            return True if exited and pool.backend._children == {} else None

        await eventually(stopped, timeout=15, every=0.02)
        assert len(started) == 1
        row = await pool_store.pool.fetchrow("SELECT owner, provider_id FROM pool_machines")
        assert row["owner"] == "someone-else" and row["provider_id"] is None  # not recorded as ours


async def test_a_job_whose_machine_fails_to_boot_after_its_type_was_removed_fails_rather_than_waits(
    pool_store: Store,
) -> None:
    """The job was handed to a booting machine, so removal left it to that machine; the boot then fails. No
    machine of a removed type will ever be placed, so the job fails with the reason instead of queueing."""
    starting = asyncio.Event()
    go_on = asyncio.Event()

    async def hold(machine_id: str) -> None:
        starting.set()
        await go_on.wait()

    never_healthy = local_type("mute", image=f"{sys.executable} -c pass", boot_timeout_seconds=1)
    env = pool_env([never_healthy, local_type()])
    async with start_pool(pool_store, env, seams=[before_record_started(hold)]) as pool:
        job = await pool.submit(b"x", machine_type="mute")
        await starting.wait()
        await put_catalogue(pool, [local_type()])
        assert (await pool.job(job.id)).state == "dispatched"
        go_on.set()
        failed = await pool.finished(job.id, timeout=15)
        assert failed.state == "failed" and "mute" in failed.error and "removed" in failed.error
        assert await pool.workers() == []
