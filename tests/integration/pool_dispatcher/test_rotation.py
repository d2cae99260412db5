"""Rotation at the fleet cap (thermostat.policy.pool.rotation) through the real dispatcher on real Postgres, local
workers: when the tenants with demand outnumber the slots, nobody is over its share, and the holder that has held
its slot longest gives it up after its current job once its minimum tenure is over. The incident (a cap of 1: light
waited behind heavy's whole backlog), a cap of 2 with three tenants, one heavy tenant and ten light ones; every job
runs exactly once. Time is the machine rows' own (their boot and slot ages are set in the row, as the scaler tests
set idle times), and completions are held at a barrier, so nothing here waits for a clock to pass."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import grpc
import pytest

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import ADMIN, pool_env, sleepy_type, start_pool
from tests.integration.pool_dispatcher.seams import before_complete
from tests.integration.pool_dispatcher.test_catalogue_defaults import put
from tests.integration.pool_dispatcher.test_fair_share import (
    Held,
    all_done,
    assert_each_ran_once,
    marked,
    most_machines_at_once,
    submit_backlog,
)
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store

TENURE_FROM_BOOT = [sleepy_type(cool_down_seconds=600)]  # min_tenure_seconds unset: the measured boot
EVERY_JOB = [sleepy_type(cool_down_seconds=600, min_tenure_seconds=0)]


async def held_at_least(held: Held, count: int) -> None:
    async def reached() -> bool | None:
        return True if held.waiting >= count else None

    await eventually(reached, timeout=60, every=0.02)


async def age(store: Store, tenant: str, *, booted_minutes: float, held_minutes: float) -> None:
    """The tenant's machines booted in `booted_minutes` (their type's measured boot) and have held their slot for
    `held_minutes` since: the rows' clock, moved instead of waited for."""
    await store.pool.execute(
        "UPDATE pool_machines SET warm_at = now() - make_interval(secs => $2::float8 * 60),"
        " created_at = now() - make_interval(secs => ($2::float8 + $3::float8) * 60)"
        " WHERE tenant_id = $1 AND warm_at IS NOT NULL",
        tenant,
        held_minutes,
        booted_minutes,
    )


async def started_at(store: Store, job_ids: list[str]) -> dict[str, datetime]:
    rows = await store.pool.fetch(
        "SELECT id::text AS id, started_at FROM pool_jobs WHERE id = ANY($1::uuid[])", [uuid.UUID(j) for j in job_ids]
    )
    return {r["id"]: r["started_at"] for r in rows}


async def test_at_a_cap_of_one_light_waits_for_heavys_tenure_not_its_backlog(pool_store: Store) -> None:
    """The incident: heavy's fifteen jobs hold the only slot, light submits one. Within heavy's tenure (its type's
    measured boot) heavy keeps the slot; once it is over, heavy's machine is retired after the job it is running and
    light boots in its place: light's job starts after one heavy job, not fifteen. Heavy's turn is recorded, every
    job runs exactly once, and the fleet never holds more than one machine."""
    held = Held()
    env = pool_env(TENURE_FROM_BOOT, POOL_MAX_WORKERS_TOTAL="1")
    async with start_pool(pool_store, env, seams=[before_complete(held)]) as pool:
        heavy = await submit_backlog(pool, 15, tenant="heavy")
        await held_at_least(held, 1)
        await age(pool_store, "heavy", booted_minutes=60, held_minutes=10)
        light = await pool.submit(b"0", machine_type="sleepy", tenant="light")
        await pool.dispatcher.placement.place()
        assert await marked(pool_store) == []  # 10 minutes held, within a 60-minute boot's tenure
        await age(pool_store, "heavy", booted_minutes=60, held_minutes=61)
        await pool.dispatcher.placement.place()
        [retiring] = await marked(pool_store)
        assert await pool_store.pool.fetchval("SELECT yield_to FROM pool_machines WHERE id = $1::uuid", retiring) == (
            "light"
        )
        assert await pool_store.pool.fetchval("SELECT count(*) FROM pool_fair_turns WHERE tenant_id = 'heavy'") == 1
        held.open.set()
        done = await pool.finished(light.id, "light", timeout=180)
        assert done.state == "completed"
        await all_done(pool_store, "heavy")
        await assert_each_ran_once(pool_store, [*heavy, light.id])
        starts = await started_at(pool_store, heavy)
        assert sum(1 for at in starts.values() if at < start_of(done)) == 1  # the job heavy ran when light came
        assert await most_machines_at_once(pool_store) == 1


async def test_a_pass_comes_by_itself_when_the_holders_tenure_ends(pool_store: Store) -> None:
    """Light submits while heavy's tenure has under a second left; no submit, completion or scaler pass follows (its
    job is held), yet heavy's machine is marked for light: the pass that found light waiting asked to run again when
    the tenure ends."""
    held = Held()
    env = pool_env(TENURE_FROM_BOOT, POOL_MAX_WORKERS_TOTAL="1")
    async with start_pool(pool_store, env, seams=[before_complete(held)]) as pool:
        await submit_backlog(pool, 3, tenant="heavy")
        await held_at_least(held, 1)
        await age(pool_store, "heavy", booted_minutes=60, held_minutes=60 - 0.5 / 60)  # half a second left
        await pool.submit(b"0", machine_type="sleepy", tenant="light")

        async def marked_for_light() -> bool | None:
            return True if len(await marked(pool_store)) == 1 else None

        await eventually(marked_for_light, timeout=30, every=0.05)
        held.open.set()


def start_of(job: pool_pb2.Job) -> datetime:
    return datetime.fromtimestamp(job.started_at, UTC)


async def test_at_a_cap_of_two_with_three_tenants_the_longest_holder_gives_its_slot(pool_store: Store) -> None:
    """Acme and globex hold one machine each with backlogs (share 1: nobody over it); initech submits one job.
    Acme's machine has held its slot longer, so it is the one retired after its current job, and initech boots in
    its place; globex's machine goes on with its backlog. Every job runs exactly once, never more than two
    machines."""
    held = Held()
    one_each = [sleepy_type(cool_down_seconds=600, min_tenure_seconds=0, max_workers=1)]  # each holds one slot
    env = pool_env(one_each, POOL_MAX_WORKERS_TOTAL="2")
    async with start_pool(pool_store, env, seams=[before_complete(held)]) as pool:
        acme = await submit_backlog(pool, 6, tenant="acme")
        globex = await submit_backlog(pool, 6, tenant="globex")
        await held_at_least(held, 2)
        await age(pool_store, "acme", booted_minutes=1, held_minutes=30)
        await age(pool_store, "globex", booted_minutes=1, held_minutes=5)
        initech = await pool.submit(b"0", machine_type="sleepy", tenant="initech")
        await pool.dispatcher.placement.place()
        [retiring] = await marked(pool_store)
        row = await pool_store.pool.fetchrow(
            "SELECT tenant_id, yield_to FROM pool_machines WHERE id = $1::uuid", retiring
        )
        assert row is not None and (row["tenant_id"], row["yield_to"]) == ("acme", "initech")
        held.open.set()
        done = await pool.finished(initech.id, "initech", timeout=180)
        assert done.state == "completed"
        await all_done(pool_store, "acme")
        await all_done(pool_store, "globex")
        await assert_each_ran_once(pool_store, [*acme, *globex, initech.id])
        starts = await started_at(pool_store, acme)
        # acme's running job, then initech; a boot of initech's that failed (a loaded machine: no health answer in
        # time) gives the slot back to the line once, and acme, next in it, may run one job more per failed boot
        boots = await pool_store.pool.fetchval(
            "SELECT count(*) FROM pool_machine_events WHERE event = 'started' AND tenant_id = 'initech'"
        )
        # and a mark that lands while acme's completion statement runs retires its machine after its next job
        # (jobs.sql, `yielding`): one more of acme's at most, never its backlog (seen about 1 run in 6)
        assert sum(1 for at in starts.values() if at < start_of(done)) in (boots, boots + 1)
        assert await most_machines_at_once(pool_store) == 2


async def test_ten_light_tenants_each_get_the_slot_in_the_order_they_came(pool_store: Store) -> None:
    """A cap of 1: heavy holds the slot with a backlog, ten light tenants submit one job each within its tenure.
    Once the tenure is over heavy is rotated out after its running job and, its wait beginning then, queues behind
    all ten: each light tenant boots in turn, in the order it submitted, before heavy's second job (a light tenant
    with nothing more queued gives its idle machine up at once). Every job runs exactly once, one machine at a
    time, one boot per turn."""
    held = Held()
    env = pool_env(TENURE_FROM_BOOT, POOL_MAX_WORKERS_TOTAL="1")
    async with start_pool(pool_store, env, seams=[before_complete(held)]) as pool:
        heavy = await submit_backlog(pool, 10, tenant="heavy")
        await held_at_least(held, 1)
        await age(pool_store, "heavy", booted_minutes=60, held_minutes=1)  # within its tenure while they come
        lights = [(await pool.submit(b"0", machine_type="sleepy", tenant=f"light{i}")).id for i in range(10)]
        await pool.dispatcher.placement.place()
        assert await marked(pool_store) == []
        await age(pool_store, "heavy", booted_minutes=60, held_minutes=61)
        await pool.dispatcher.placement.place()
        assert len(await marked(pool_store)) == 1
        held.open.set()
        finished = [await pool.finished(job_id, f"light{i}", timeout=180) for i, job_id in enumerate(lights)]
        assert all(job.state == "completed" for job in finished)
        order = sorted(range(10), key=lambda i: finished[i].started_at)
        assert order == list(range(10))
        await all_done(pool_store, "heavy")
        await assert_each_ran_once(pool_store, [*heavy, *lights])
        starts = await started_at(pool_store, heavy)
        last_light = max(start_of(job) for job in finished)
        assert sum(1 for at in starts.values() if at < last_light) == 1
        lives = [row["tenant_id"] for row in await pool_store.pool.fetch(
            "SELECT tenant_id FROM pool_machine_events WHERE event = 'started' ORDER BY position"
        )]  # fmt: skip
        turns = [tenant for i, tenant in enumerate(lives) if i == 0 or lives[i - 1] != tenant]  # a failed boot retries
        assert turns == ["heavy", *(f"light{i}" for i in range(10)), "heavy"]  # one turn each, in line
        assert await most_machines_at_once(pool_store) == 1


async def test_the_minimum_tenure_is_put_stored_and_listed_per_type(pool_store: Store) -> None:
    """`min_tenure_seconds` through the service: a PUT stores it, GET /v1/machine-types lists it (null where unset,
    the measured boot), and a negative one is a 400 naming the entry and the field, nothing stored."""
    async with start_pool(pool_store, pool_env(TENURE_FROM_BOOT)) as pool:
        await put(pool, [sleepy_type("short", min_tenure_seconds=30), sleepy_type("measured")])
        shown = await pool.stub.GetMachineTypes(pool_pb2.GetMachineTypesRequest(), metadata=ADMIN)
        assert [(t["name"], t["min_tenure_seconds"]) for t in json.loads(shown.data)] == [
            ("short", 30.0),
            ("measured", None),
        ]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await put(pool, [sleepy_type("bad", min_tenure_seconds=-1)])
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert (refused.value.details() or "").startswith(
            "machine_types[0] ('bad').min_tenure_seconds: must not be negative"
        )
