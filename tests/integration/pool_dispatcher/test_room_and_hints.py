"""An image change under the tenant cap, and hints, through the real dispatcher (issue 23 item 6): placement's and a
hint's retirement of an idle old-image machine to make room (`plan.retire`) is carried out before the new machine
is inserted, so a capped tenant never holds an extra billed machine; a hint refused at the fleet cap logs the
seed's warning; a hinted machine no job reaches is stopped after its type's cool-down."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import AsyncIterator

import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.integration.pool_dispatcher.conftest import (
    ADMIN,
    RunningPool,
    caller,
    local_type,
    pool_env,
    start_pool,
)
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store

NEW_IMAGE = f"{sys.executable} -X utf8 -m thermostat.worker"
CAPPED = local_type(max_workers=1, cool_down_seconds=600)


async def hint(pool: RunningPool, tenant: str = "acme") -> tuple[bool, str | None]:
    response = await pool.stub.SendHint(pool_pb2.SendHintRequest(machine_type="local"), metadata=caller(tenant))
    return response.started, (response.reason if response.HasField("reason") else None)


async def change_image(pool: RunningPool, **fields: object) -> None:
    request = pool_pb2.PutMachineTypesRequest()
    request.catalogue.data = json.dumps([{**CAPPED, "image": NEW_IMAGE, **fields}]).encode()
    await pool.stub.PutMachineTypes(request, metadata=ADMIN)


async def most_live_machines_of(store: Store, tenant: str) -> int:
    """The tenant's high-water mark of machines that existed at once (billed), from the machine lives."""
    live, most = 0, 0
    for row in await store.pool.fetch(
        "SELECT event FROM pool_machine_events WHERE tenant_id = $1 ORDER BY position", tenant
    ):
        live += 1 if row["event"] == "started" else -1
        most = max(most, live)
    return most


async def only_machine_is_on_the_new_image(pool: RunningPool) -> None:
    async def settled() -> bool | None:
        workers = await pool.workers()
        return True if [w.image for w in workers] == [NEW_IMAGE] else None

    await eventually(settled, timeout=30, every=0.05)


async def test_an_image_change_under_a_tenant_cap_retires_the_idle_old_machine_before_the_new_one_starts(
    pool_store: Store,
) -> None:
    """max_workers 1, one idle old-image machine: the job placed after the image change retires it in the
    placement's own transaction and the new machine starts; the old one is stopped, not left warm for its 600 s
    cool-down beside the new one."""
    async with start_pool(pool_store, pool_env([CAPPED])) as pool:
        await pool.run(b"old")
        await change_image(pool)
        body, _ = await pool.run(b"new")
        assert body == b"new"
        await only_machine_is_on_the_new_image(pool)
        stopped = await pool_store.pool.fetchval("SELECT count(*) FROM pool_machine_events WHERE event = 'stopped'")
        assert stopped == 1


@contextlib.asynccontextmanager
async def instance(database_url: str, name: str) -> AsyncIterator[tuple[RunningPool, Store]]:
    store = await open_store(database_url, max_size=12, application_name=f"pool-{name}")
    try:
        async with start_pool(store, pool_env([CAPPED], POOL_INSTANCE_ID=name)) as pool:
            yield pool, store
    finally:
        await store.close()


async def test_the_old_machine_another_process_owns_is_taken_over_and_stopped_by_the_placing_one(
    database_url: str,
) -> None:
    """Alpha owns the idle old-image machine; beta places the tenant's next job: beta retires the machine (its row
    becomes beta's), stops it through its own backend and starts the new one. Alpha's reaper finds nothing of it."""
    async with instance(database_url, "alpha") as (alpha, store), instance(database_url, "beta") as (beta, _):
        await alpha.run(b"old")
        [old] = await alpha.workers()
        await change_image(alpha)
        await beta.dispatcher.scaler.scaler_pass()  # beta applies the stored catalogue
        assert (await beta.run(b"new"))[0] == b"new"
        await only_machine_is_on_the_new_image(beta)
        await alpha.dispatcher.scaler.reap()
        lives = await store.pool.fetch("SELECT machine_id::text, event FROM pool_machine_events ORDER BY position")
        assert [(r["machine_id"], r["event"]) for r in lives if r["event"] == "stopped"] == [(old.id, "stopped")]


async def test_a_hint_under_a_tenant_cap_retires_the_idle_old_machine_it_counts_on(pool_store: Store) -> None:
    """The hint's plan leans on the same retirement: it is carried out, so the tenant never holds two machines."""
    async with start_pool(pool_store, pool_env([CAPPED])) as pool:
        await pool.run(b"old")
        await change_image(pool)
        assert await hint(pool) == (True, None)
        await only_machine_is_on_the_new_image(pool)
        assert await most_live_machines_of(pool_store, "acme") <= 2  # the old one stopping while the new one boots
        assert (await pool.workers())[0].state in ("starting", "warm")
        stopped = await pool_store.pool.fetchval("SELECT count(*) FROM pool_machine_events WHERE event = 'stopped'")
        assert stopped == 1


async def test_a_hint_after_the_old_machine_was_reaped_first_starts_without_retiring_anything(
    pool_store: Store,
) -> None:
    """The other ordering: the old machine's cool-down reap landed before the hint; the hint sees it gone (or
    stopping) and starts one machine, retiring nothing it did not need to."""
    clock = FakeClock()
    types = [{**CAPPED, "cool_down_seconds": 30}]
    async with start_pool(pool_store, pool_env(types), clock=clock) as pool:
        await pool.run(b"old")
        await change_image(pool, cool_down_seconds=30)
        clock.advance(30)
        await pool.dispatcher.scaler.reap()
        assert await pool.workers() == []
        assert await hint(pool) == (True, None)
        await only_machine_is_on_the_new_image(pool)
        assert await most_live_machines_of(pool_store, "acme") == 1


async def test_a_hint_refused_at_the_fleet_cap_logs_a_warning(
    pool_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The seed: hitting the ceiling logs a warning, since "a capped fleet looks exactly like a slow queue from
    the outside"; the line names the cap, the tenant and the type."""
    async with start_pool(pool_store, pool_env([local_type()], POOL_MAX_WORKERS_TOTAL="1")) as pool:
        assert (await hint(pool, "acme"))[0] is True
        with caplog.at_level(logging.WARNING, logger="thermostat.pool_dispatcher"):
            assert await hint(pool, "globex") == (False, "fleet_cap")
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert "fleet cap of 1 machines reached: a hint for tenant globex (local) started no machine" in warnings


async def test_a_hint_refused_at_the_tenant_cap_logs_no_fleet_warning(
    pool_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    async with start_pool(pool_store, pool_env([local_type(max_workers=1)], POOL_MAX_WORKERS_TOTAL="5")) as pool:
        await pool.run(b"x")
        pool_machine = (await pool.workers())[0]
        await pool_store.pool.execute("UPDATE pool_machines SET state = 'busy' WHERE id = $1::uuid", pool_machine.id)
        with caplog.at_level(logging.WARNING, logger="thermostat.pool_dispatcher"):
            assert await hint(pool, "acme") == (False, "tenant_cap")
        assert not [r for r in caplog.records if "fleet cap" in r.getMessage()]
        await pool_store.pool.execute("UPDATE pool_machines SET state = 'warm' WHERE id = $1::uuid", pool_machine.id)


async def test_a_hinted_machine_no_job_reaches_is_stopped_after_its_types_cool_down(pool_store: Store) -> None:
    """The seed: "a machine no job reaches is stopped after the type's cool_down_seconds, like any idle one"."""
    clock = FakeClock()
    async with start_pool(pool_store, pool_env([local_type(cool_down_seconds=45)]), clock=clock) as pool:
        assert await hint(pool) == (True, None)

        async def warm() -> bool | None:
            return True if [w.state for w in await pool.workers()] == ["warm"] else None

        await eventually(warm, timeout=30, every=0.05)
        clock.advance(44)
        await pool.dispatcher.scaler.reap()
        assert [w.state for w in await pool.workers()] == ["warm"]
        clock.advance(1)
        await pool.dispatcher.scaler.reap()
        assert await pool.workers() == []
        assert await pool_store.pool.fetchval("SELECT count(*) FROM pool_usage") == 0
