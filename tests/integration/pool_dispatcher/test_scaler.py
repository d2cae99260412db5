"""The scaler's parts, each called directly with an injected monotonic clock: cool-down reaping, health
retirement (all-fail-is-local), hints, and catalogue add / image change / removal."""

from __future__ import annotations

import json
import sys

import grpc
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
from thermostat.pool.v1 import pool_pb2
from thermostat.providers.pool.backend import BackendError
from thermostat.store.db import Store


async def states(pool: RunningPool) -> list[str]:
    return sorted(w.state for w in await pool.workers())


async def until(pool: RunningPool, wanted: list[str]) -> None:
    async def reached() -> bool | None:
        return True if await states(pool) == wanted else None

    await eventually(reached, timeout=15, every=0.05)


async def test_an_idle_machine_is_stopped_after_its_types_cool_down_and_not_before(pool_store: Store) -> None:
    clock = FakeClock()
    async with start_pool(pool_store, pool_env([local_type(cool_down_seconds=60)]), clock=clock) as pool:
        await pool.run(b"x")
        clock.advance(59)
        await pool.dispatcher.scaler.reap()
        assert await states(pool) == ["warm"]
        clock.advance(1)
        await pool.dispatcher.scaler.reap()
        assert await states(pool) == []


async def test_cool_down_reads_only_the_monotonic_clock(pool_store: Store) -> None:
    """The database's and the host's wall clocks play no part: a machine idle for 10 monotonic seconds is not
    reaped under a 60 s cool-down however the wall clock jumps (here: its recorded times are moved a day back)."""
    clock = FakeClock()
    async with start_pool(pool_store, pool_env([local_type(cool_down_seconds=60)]), clock=clock) as pool:
        await pool.run(b"x")
        await pool_store.pool.execute(
            "UPDATE pool_machines SET last_active_at = now() - interval '1 day', warm_at = now() - interval '1 day'"
        )
        clock.advance(10)
        await pool.dispatcher.scaler.reap()
        assert await states(pool) == ["warm"]


async def test_a_busy_machine_is_neither_reaped_nor_probed(pool_store: Store) -> None:
    clock = FakeClock()
    types = [sleepy_type(cool_down_seconds=1, health_check_failures=1)]
    async with start_pool(pool_store, pool_env(types), clock=clock) as pool:
        job = await pool.submit(b"1.5", machine_type="sleepy")

        async def running() -> bool | None:
            return True if (await pool.job(job.id)).state == "running" else None

        await eventually(running, timeout=30, every=0.02)
        clock.advance(3600)
        await pool.dispatcher.scaler.reap()
        await pool.dispatcher.scaler.probe()
        assert await states(pool) == ["busy"]
        assert (await pool.finished(job.id)).state == "completed"


async def test_a_machine_missing_n_probes_in_a_row_is_retired(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env([local_type(health_check_failures=2)])) as pool:
        await pool.run(b"a", tenant="acme")
        await pool.run(b"b", tenant="globex")
        acme = next(w for w in await pool.workers() if w.tenant_id == "acme")
        victim = await pool_store.pool.fetchval("SELECT provider_id FROM pool_machines WHERE id = $1::uuid", acme.id)
        pool.backend._children[victim].kill()
        await pool.backend._children[victim].wait()
        await pool.dispatcher.scaler.probe()
        assert len(await pool.workers()) == 2  # one miss is a hiccup
        await pool.dispatcher.scaler.probe()
        await until(pool, ["warm"])
        assert [w.tenant_id for w in await pool.workers()] == ["globex"]


async def test_a_pass_where_every_probe_fails_retires_nobody(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env([local_type(health_check_failures=1)])) as pool:
        await pool.run(b"a", tenant="acme")
        await pool.run(b"b", tenant="globex")
        for process in pool.backend._children.values():
            process.kill()
            await process.wait()
        await pool.dispatcher.scaler.probe()
        await pool.dispatcher.scaler.probe()
        assert await states(pool) == ["warm", "warm"]


# hints


async def hint(pool: RunningPool, machine_type: str, tenant: str = "acme") -> tuple[bool, str | None, str]:
    call = pool.stub.SendHint(pool_pb2.SendHintRequest(machine_type=machine_type), metadata=caller(tenant))
    response = await call
    code = dict(await call.initial_metadata()).get("x-http-code", "")
    return response.started, (response.reason if response.HasField("reason") else None), code


async def test_a_hint_starts_one_machine_and_a_repeat_is_no_demand(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env([local_type()])) as pool:
        assert await hint(pool, "local") == (True, None, "202")
        assert await hint(pool, "local") == (False, "no_demand", "202")
        await until(pool, ["warm"])
        assert await hint(pool, "local") == (False, "no_demand", "202")
        await pool.run(b"x")  # the hinted machine takes the job
        assert len(await pool.workers()) == 1


async def test_a_hint_is_held_to_the_tenant_cap(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env([sleepy_type(max_workers=1)])) as pool:
        job = await pool.submit(b"2", machine_type="sleepy")

        async def running() -> bool | None:
            return True if (await pool.job(job.id)).state == "running" else None

        await eventually(running, timeout=30, every=0.02)
        assert await hint(pool, "sleepy") == (False, "tenant_cap", "202")


async def test_a_hint_is_held_to_the_fleet_cap(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env([local_type()], POOL_MAX_WORKERS_TOTAL="1")) as pool:
        assert (await hint(pool, "local", tenant="acme"))[0] is True
        assert await hint(pool, "local", tenant="globex") == (False, "fleet_cap", "202")


async def test_a_hint_for_an_unknown_type_is_400_as_a_jobs_is(pool_store: Store) -> None:
    """One answer for one mistake: the job route's 400 and words (issue 35: the hint answered 422)."""
    async with start_pool(pool_store, pool_env([local_type()])) as pool:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pool.stub.SendHint(pool_pb2.SendHintRequest(machine_type="nope"), metadata=caller())
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details() == "unknown machine type: 'nope'"
        assert ("x-http-code", "400") in tuple(refused.value.initial_metadata() or ())


# the catalogue


async def put(pool: RunningPool, types: list[dict[str, object]]) -> None:
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = json.dumps(types).encode()
    await pool.stub.PutMachineTypes(request, metadata=ADMIN)


async def test_a_type_added_accepts_jobs_at_once(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env([local_type()])) as pool:
        await put(pool, [local_type(), local_type("extra")])
        body, _ = await pool.run(b"new", machine_type="extra")
        assert body == b"new"


async def test_an_image_change_sends_new_work_to_new_machines_and_retires_the_old_at_cool_down(
    pool_store: Store,
) -> None:
    clock = FakeClock()
    async with start_pool(pool_store, pool_env([local_type(cool_down_seconds=30)]), clock=clock) as pool:
        _, first = await pool.run(b"old")
        old_machine = (await pool.job(first["x-pool-job-id"])).worker_id
        await put(pool, [local_type(image=f"{sys.executable} -X utf8 -m thermostat.worker", cool_down_seconds=30)])
        _, second = await pool.run(b"new")
        assert (await pool.job(second["x-pool-job-id"])).worker_id != old_machine
        clock.advance(30)
        await pool.dispatcher.scaler.reap()
        assert old_machine not in {w.id for w in await pool.workers()}


async def test_a_removed_type_fails_its_queued_jobs_and_its_machines_retire(pool_store: Store) -> None:
    clock = FakeClock()
    types = [sleepy_type(max_workers=1, cool_down_seconds=30), local_type()]
    async with start_pool(pool_store, pool_env(types), clock=clock) as pool:
        running = await pool.submit(b"0.5", machine_type="sleepy")

        async def started() -> bool | None:
            return True if (await pool.job(running.id)).state == "running" else None

        await eventually(started, timeout=30, every=0.02)
        queued = await pool.submit(b"0", machine_type="sleepy")
        await put(pool, [local_type()])
        failed = await pool.job(queued.id)
        assert failed.state == "failed" and "removed" in failed.error
        assert (await pool.finished(running.id)).state == "completed"  # a running job finishes
        await until(pool, ["warm"])
        clock.advance(30)
        await pool.dispatcher.scaler.reap()
        assert await states(pool) == []
        with pytest.raises(grpc.aio.AioRpcError):
            await pool.submit(b"0", machine_type="sleepy")


async def test_a_stored_catalogue_replaces_the_configured_one_on_start(pool_store: Store) -> None:
    async with start_pool(pool_store, pool_env([local_type()])) as pool:
        await put(pool, [local_type("stored")])
    async with start_pool(pool_store, pool_env([local_type()])) as restarted:
        catalogue = json.loads(
            (await restarted.stub.GetMachineTypes(pool_pb2.GetMachineTypesRequest(), metadata=ADMIN)).data
        )
        assert [t["name"] for t in catalogue] == ["stored"]


async def test_a_failed_stop_keeps_the_row_counted_and_the_next_pass_retries_it(pool_store: Store) -> None:
    clock = FakeClock()
    env = pool_env([local_type(cool_down_seconds=0)], POOL_MAX_WORKERS_TOTAL="1")
    async with start_pool(pool_store, env, clock=clock) as pool:
        await pool.run(b"x", tenant="acme")
        real_stop = pool.backend.stop
        refusals = []

        async def refuse_once(provider_id: str) -> None:
            if not refusals:
                refusals.append(provider_id)
                raise BackendError("provider said no")
            await real_stop(provider_id)

        pool.backend.stop = refuse_once  # type: ignore[method-assign]
        await pool.dispatcher.scaler.reap()
        assert await states(pool) == ["stopping"]  # still there, still counted against the fleet cap
        assert await hint(pool, "local", tenant="globex") == (False, "fleet_cap", "202")
        await pool.dispatcher.scaler.scaler_pass()  # the retry stops it and forgets the row
        assert await states(pool) == []
        assert pool.backend.pid(refusals[0]) is None
        assert await hint(pool, "local", tenant="globex") == (True, None, "202")
