"""Several dispatcher processes over one database (in-process instances, each with its own Store pools):
exactly-once dispatch, the fleet cap under concurrent placement, reclaim after a lapsed lease, restart under
the same instance id, and the two-claims-on-one-machine ordering."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence

import psutil

from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.integration.pool_dispatcher.conftest import (
    RunningPool,
    local_type,
    pool_env,
    sleepy_type,
    start_pool,
)
from tests.integration.pool_dispatcher.seams import Seam, before_insert_machines
from thermostat.pool_dispatcher.dispatcher import lease_name
from thermostat.store.db import Store


@contextlib.asynccontextmanager
async def instance(
    database_url: str, instance_id: str, types: list[dict[str, object]], *, seams: Sequence[Seam] = (), **env: str
) -> AsyncIterator[tuple[RunningPool, Store]]:
    store = await open_store(database_url, max_size=12, application_name=f"pool-{instance_id}")
    try:
        async with start_pool(store, pool_env(types, POOL_INSTANCE_ID=instance_id, **env), seams=seams) as pool:
            yield pool, store
    finally:
        await store.close()


async def test_two_hundred_jobs_alternating_between_two_instances_run_exactly_once(database_url: str) -> None:
    types = [local_type(max_workers=2)]
    async with (
        instance(database_url, "alpha", types) as (alpha, store),
        instance(database_url, "beta", types) as (beta, _),
    ):
        pools = (alpha, beta)
        gate = asyncio.Semaphore(16)

        async def one(i: int) -> bytes:
            async with gate:
                body, _ = await pools[i % 2].run(f"job-{i}".encode())
                return body

        bodies = await asyncio.gather(*(one(i) for i in range(200)))
        assert sorted(bodies) == sorted(f"job-{i}".encode() for i in range(200))
        events = await alpha.usage()
        assert len(events) == 200 and len({e.job_id for e in events}) == 200
        assert await store.pool.fetchval("SELECT count(*) FROM pool_jobs WHERE state = 'completed'") == 200
        assert await store.pool.fetchval("SELECT count(*) FROM pool_machines") <= 2


async def test_two_placements_under_the_fleet_cap_never_overshoot_and_lose_no_deferred_work(database_url: str) -> None:
    """Alpha holds the placement lock (a hook inside its transaction) while beta places: beta waits on the
    lock, then sees alpha's machine and defers; once alpha's machine is gone, beta's next pass places."""
    inside = asyncio.Event()
    release = asyncio.Event()

    async def hold() -> None:
        if not inside.is_set():
            inside.set()
            await release.wait()

    types = [local_type(cool_down_seconds=0)]
    async with (
        instance(database_url, "alpha", types, seams=[before_insert_machines(hold)], POOL_MAX_WORKERS_TOTAL="1") as (
            alpha,
            store,
        ),
        instance(database_url, "beta", types, POOL_MAX_WORKERS_TOTAL="1") as (beta, _),
    ):
        first = await alpha.submit(b"a", tenant="acme")
        await inside.wait()
        second = await beta.submit(b"b", tenant="globex")
        beta_placing = asyncio.create_task(beta.dispatcher.placement.place())

        async def beta_waits_on_the_lock() -> bool | None:
            waiting = await store.pool.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
            return True if waiting else None

        await eventually(beta_waits_on_the_lock, timeout=10)
        release.set()
        await beta_placing
        assert await store.pool.fetchval("SELECT count(*) FROM pool_machines") == 1
        assert (await beta.job(second.id, "globex")).state == "queued"  # deferred: alpha's machine fills the cap
        assert (await alpha.finished(first.id)).state == "completed"
        # acme's machine, idle now, goes (fair share hands an idle machine at the cap to the tenant waiting, or the
        # reaper's cool-down of 0 does): either way the fleet has room, and the deferred job runs
        await alpha.dispatcher.scaler.reap()
        await beta.dispatcher.scaler.scaler_pass()
        assert (await beta.finished(second.id, "globex")).state == "completed"
        assert await store.pool.fetchval("SELECT count(*) FROM pool_machines") == 1


async def test_a_claim_skips_a_warm_machine_another_actor_holds(database_url: str) -> None:
    """Two claims on one warm machine: the second finds the row locked, skips it, and the job queues; it runs
    once the first claim's transaction ends."""
    async with instance(database_url, "alpha", [local_type(max_workers=1)]) as (alpha, store):
        await alpha.run(b"warm up")
        [machine] = await alpha.workers()
        async with store.pool.acquire() as other, other.transaction():
            await other.execute("SELECT 1 FROM pool_machines WHERE id = $1 FOR UPDATE", uuid.UUID(machine.id))
            job = await alpha.submit(b"second")
            assert job.state == "queued"
        await alpha.dispatcher.placement.place()
        done = await alpha.finished(job.id)
        assert done.state == "completed" and done.worker_id == machine.id


async def test_a_lapsed_instance_has_its_jobs_failed_and_its_machines_stopped_without_usage(database_url: str) -> None:
    async with (
        instance(database_url, "alpha", [sleepy_type()]) as (alpha, store),
        instance(database_url, "beta", [sleepy_type()]) as (beta, _),
    ):
        job = await alpha.submit(b"30", machine_type="sleepy")

        async def running() -> bool | None:
            return True if (await alpha.job(job.id)).state == "running" else None

        await eventually(running, timeout=30, every=0.02)
        pid = int((await store.pool.fetchval("SELECT provider_id FROM pool_machines")).removeprefix("local-"))
        # alpha stops answering: its lease runs out by the database clock (renewals are a third of 30 s apart)
        await store.pool.execute(
            "UPDATE leases SET expires_at = now() - interval '1 second' WHERE name = $1", lease_name("alpha")
        )
        await beta.dispatcher.scaler.reclaim()
        failed = await beta.job(job.id)
        assert failed.state == "failed" and "alpha" in failed.error
        for _ in range(2):
            await beta.dispatcher.scaler.scaler_pass()  # stops the reclaimed machine through beta's backend
        assert await store.pool.fetchval("SELECT count(*) FROM pool_machines") == 0
        assert await beta.usage() == []

        async def gone() -> bool | None:
            try:
                return True if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE else None
            except psutil.NoSuchProcess:
                return True

        await eventually(gone, timeout=10)
        assert (await alpha.job(job.id)).state == "failed"  # alpha's late completion wrote nothing
        assert await beta.usage() == []


async def test_a_restart_under_the_same_instance_id_takes_its_rows_back_at_once(database_url: str) -> None:
    async with instance(database_url, "alpha", [sleepy_type()], POOL_LEASE_SECONDS="600") as (alpha, store):
        job = await alpha.submit(b"30", machine_type="sleepy")

        async def running() -> bool | None:
            return True if (await alpha.job(job.id)).state == "running" else None

        await eventually(running, timeout=30, every=0.02)
        term = await store.pool.fetchval("SELECT term FROM leases WHERE name = $1", lease_name("alpha"))
        # the same id starts again while the old lease has ten minutes left: no wait, and a new term, so the
        # old incarnation (were it only stalled) is fenced off
        async with asyncio.timeout(10):
            async with instance(database_url, "alpha", [sleepy_type()], POOL_LEASE_SECONDS="600") as (again, _):
                assert again.dispatcher.ownership.owner.term == term + 1
                failed = await again.job(job.id)
                assert failed.state == "failed" and "restarted" in failed.error
                assert await again.usage() == []


async def test_an_instance_that_renewed_after_being_read_as_lapsed_keeps_its_rows(database_url: str) -> None:
    """Reclaim judges the lapse again inside its statement: read lapsed, then renewed, then reclaim: nothing moves."""
    async with (
        instance(database_url, "alpha", [local_type()]) as (alpha, store),
        instance(database_url, "beta", [local_type()]) as (beta, _),
    ):
        await alpha.run(b"warm up")
        await store.pool.execute(
            "UPDATE leases SET expires_at = now() - interval '1 second' WHERE name = $1", lease_name("alpha")
        )
        [lapsed] = await beta.dispatcher.repo.ownership.lapsed_owners(beta.dispatcher.ownership.owner)
        await store.pool.execute(
            "UPDATE leases SET expires_at = now() + interval '30 seconds' WHERE name = $1", lease_name("alpha")
        )
        assert await beta.dispatcher.repo.ownership.reclaim(lapsed, beta.dispatcher.ownership.owner) == (0, 0)
        assert [w.state for w in await alpha.workers()] == ["warm"]
