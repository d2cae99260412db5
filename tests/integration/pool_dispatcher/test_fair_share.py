"""Fair share at the fleet cap (thermostat.policy.pool.fair_share) through the real dispatcher on real Postgres:
tenant acme's deep backlog holds the whole fleet, globex submits one job; globex's job boots on the slot of the
acme machine that retires after its current job, and every acme job still runs exactly once. Then the orderings:
globex's job cancelled while acme's machine is being retired (before its job ends, and while it stops), two
dispatcher processes deciding at once, and a tenant whose demand disappears giving its slot back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.integration.pool_dispatcher.conftest import RunningPool, caller, pool_env, sleepy_type, start_pool
from tests.integration.pool_dispatcher.seams import (
    before_complete,
    before_machine_ready,
    before_place,
    before_provider_stop,
    before_send,
)
from thermostat.pool.v1 import pool_pb2
from thermostat.store.db import Store

TYPES = [sleepy_type(cool_down_seconds=600)]
CAP = "2"


async def submit_backlog(pool: RunningPool, count: int, seconds: str = "0.02", tenant: str = "acme") -> list[str]:
    gate = asyncio.Semaphore(32)

    async def one() -> str:
        async with gate:
            return (await pool.submit(seconds.encode(), machine_type="sleepy", tenant=tenant)).id

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def busy_machines(store: Store, tenant: str, count: int) -> None:
    async def reached() -> bool | None:
        busy = await store.pool.fetchval(
            "SELECT count(*) FROM pool_machines WHERE tenant_id = $1 AND state = 'busy'", tenant
        )
        return True if busy == count else None

    await eventually(reached, timeout=60, every=0.02)


async def cancel(pool: RunningPool, job_id: str, tenant: str) -> None:
    await pool.stub.CancelJob(pool_pb2.CancelJobRequest(id=job_id, build_id="b-1"), metadata=caller(tenant))


async def all_done(store: Store, tenant: str, timeout: float = 120) -> None:
    async def drained() -> bool | None:
        left = await store.pool.fetchval(
            "SELECT count(*) FROM pool_jobs WHERE tenant_id = $1 AND state IN ('queued', 'dispatched', 'running')",
            tenant,
        )
        return True if left == 0 else None

    await eventually(drained, timeout=timeout, every=0.1)


async def assert_each_ran_once(store: Store, job_ids: list[str]) -> None:
    """Every job completed, with exactly one usage event each."""
    ids = [uuid.UUID(j) for j in job_ids]
    completed = await store.pool.fetchval(
        "SELECT count(*) FROM pool_jobs WHERE id = ANY($1::uuid[]) AND state = 'completed'", ids
    )
    events = await store.pool.fetch(
        "SELECT job_id, count(*) AS n FROM pool_usage WHERE job_id = ANY($1::uuid[]) GROUP BY job_id", ids
    )
    assert completed == len(job_ids)
    assert len(events) == len(job_ids) and all(e["n"] == 1 for e in events)


async def most_machines_at_once(store: Store) -> int:
    """The fleet's high-water mark from the machine lives (each row's insert and delete, in order)."""
    live, most = 0, 0
    for row in await store.pool.fetch("SELECT event FROM pool_machine_events ORDER BY position"):
        live += 1 if row["event"] == "started" else -1
        most = max(most, live)
    return most


async def machine_lives(store: Store) -> list[tuple[str, str, str, datetime]]:
    rows = await store.pool.fetch(
        "SELECT machine_id::text AS id, tenant_id, event, at FROM pool_machine_events ORDER BY position"
    )
    return [(r["id"], r["tenant_id"], r["event"], r["at"]) for r in rows]


async def marked(store: Store) -> list[str]:
    rows = await store.pool.fetch("SELECT id::text FROM pool_machines WHERE yield_to IS NOT NULL AND state = 'busy'")
    return [r["id"] for r in rows]


class Held:
    """A gate every completion waits at (before_complete) until released: the machines stay busy meanwhile."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.waiting = 0

    async def __call__(self, _job_id: str) -> None:
        if self.open.is_set():
            return
        self.waiting += 1
        await self.open.wait()


async def test_a_tenant_waiting_at_the_fleet_cap_boots_in_the_slot_of_a_machine_retired_after_its_job(
    pool_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Acme: 500 queued jobs at a fleet cap of 2; globex submits one while both acme machines run a job (held at
    its completion so the moment is exact). One acme machine finishes that job, runs no other, and retires; the
    next machine the fleet boots is globex's, with globex's job handed to it at placement: globex waits one of
    acme's job times plus one boot. Every acme job runs exactly once and the fleet never exceeds its cap."""
    held = Held()
    env = pool_env(TYPES, POOL_MAX_WORKERS_TOTAL=CAP)
    async with start_pool(pool_store, env, seams=[before_complete(held)]) as pool:
        backlog = await submit_backlog(pool, 500)
        await eventually(lambda: _at_least(held, 2), timeout=60, every=0.02)
        with caplog.at_level(logging.WARNING, logger="thermostat.pool_dispatcher"):
            waiting = await pool.submit(b"0", machine_type="sleepy", tenant="globex")
            await eventually(lambda: _one_marked(pool_store), timeout=30, every=0.02)  # the submit's placement pass
            held.open.set()
            done = await pool.finished(waiting.id, "globex", timeout=60)
        assert done.state == "completed"
        await all_done(pool_store, "acme")
        await assert_each_ran_once(pool_store, backlog)

        submitted_at = await pool_store.pool.fetchval(
            "SELECT submitted_at FROM pool_jobs WHERE id = $1", uuid.UUID(waiting.id)
        )
        lives = await machine_lives(pool_store)
        first_after = next(i for i, (_, _, event, at) in enumerate(lives) if event == "started" and at >= submitted_at)
        booted_for_it = lives[first_after]
        assert booted_for_it[1] == "globex" and booted_for_it[0] == done.worker_id
        [retired] = [m for m, tenant, event, _ in lives[:first_after] if tenant == "acme" and event == "stopped"]
        after_submit = await pool_store.pool.fetchval(
            "SELECT count(*) FROM pool_usage WHERE worker_id = $1 AND started_at > $2", uuid.UUID(retired), submitted_at
        )
        assert after_submit == 0  # the job it ran when globex submitted was its last
        assert await most_machines_at_once(pool_store) == 2
        logged = [r.getMessage() for r in caplog.records if "fair share" in r.getMessage()]
        assert any(f"machine {retired} of tenant acme retires after its current job" in m for m in logged)
        assert any(f"machine {retired} of tenant acme retired after its job" in m for m in logged)


async def _at_least(held: Held, waiting: int) -> bool | None:
    return True if held.waiting >= waiting else None


async def _one_marked(store: Store) -> bool | None:
    return True if len(await marked(store)) == 1 else None


@pytest.mark.parametrize("placed_between", [True, False], ids=["mark-cleared-before-the-job-ends", "job-ends-first"])
async def test_the_waiting_job_cancelled_before_the_marked_machine_retires(
    pool_store: Store, placed_between: bool
) -> None:
    """Globex's job is cancelled while an acme machine is marked (its job held at completion). A placement pass
    before the job ends clears the mark: both acme machines go on with the backlog and none retires. If the job
    ends first the machine retires, and its slot goes back to acme. Either way every acme job runs once."""
    held = Held()
    async with start_pool(
        pool_store, pool_env(TYPES, POOL_MAX_WORKERS_TOTAL=CAP), seams=[before_complete(held)]
    ) as pool:
        backlog = await submit_backlog(pool, 20)
        await busy_machines(pool_store, "acme", 2)
        waiting = await pool.submit(b"0", machine_type="sleepy", tenant="globex")
        await pool.dispatcher.placement.place()
        assert len(await marked(pool_store)) == 1
        await cancel(pool, waiting.id, "globex")
        if placed_between:
            await pool.dispatcher.placement.place()
            assert await marked(pool_store) == []
        held.open.set()
        await all_done(pool_store, "acme")
        await assert_each_ran_once(pool_store, backlog)
        lives = await machine_lives(pool_store)
        stopped = [m for m, _, event, _ in lives if event == "stopped"]
        assert len(stopped) == (0 if placed_between else 1)
        assert {tenant for _, tenant, _, _ in lives} == {"acme"}
        assert await most_machines_at_once(pool_store) == 2


async def test_the_waiting_job_cancelled_while_the_retired_machine_stops_gives_the_slot_back(
    pool_store: Store,
) -> None:
    """The marked machine's job ended and its stop is under way (held at the provider stop) when globex's job is
    cancelled: the stop completes, and the freed slot boots an acme machine for the backlog."""
    held, stopping, go_on = Held(), asyncio.Event(), asyncio.Event()

    async def hold_stop(_machine_id: str) -> None:
        stopping.set()
        await go_on.wait()

    seams = [before_complete(held), before_provider_stop(hold_stop)]
    async with start_pool(pool_store, pool_env(TYPES, POOL_MAX_WORKERS_TOTAL=CAP), seams=seams) as pool:
        backlog = await submit_backlog(pool, 20)
        await busy_machines(pool_store, "acme", 2)
        waiting = await pool.submit(b"0", machine_type="sleepy", tenant="globex")
        await pool.dispatcher.placement.place()
        [retiring] = await marked(pool_store)
        held.open.set()
        await asyncio.wait_for(stopping.wait(), 30)
        await cancel(pool, waiting.id, "globex")
        go_on.set()
        await all_done(pool_store, "acme")
        await assert_each_ran_once(pool_store, backlog)
        lives = await machine_lives(pool_store)
        assert [m for m, _, event, _ in lives if event == "stopped"] == [retiring]
        assert sum(1 for _, tenant, event, _ in lives if event == "started" and tenant == "acme") == 3
        assert (await pool.job(waiting.id, "globex")).state == "cancelled"
        assert await most_machines_at_once(pool_store) == 2


@contextlib.asynccontextmanager
async def instance(database_url: str, name: str, held: Held) -> AsyncIterator[tuple[RunningPool, Store]]:
    store = await open_store(database_url, max_size=12, application_name=f"pool-{name}")
    try:
        env = pool_env(TYPES, POOL_MAX_WORKERS_TOTAL=CAP, POOL_INSTANCE_ID=name)
        async with start_pool(store, env, seams=[before_complete(held)]) as pool:
            yield pool, store
    finally:
        await store.close()


async def test_two_dispatchers_deciding_at_once_retire_one_machine_per_needed_slot(database_url: str) -> None:
    """Both processes place for globex's one job at the same moment (acme's completions held, so the fleet stands
    still): the placement lock orders them, the second sees the first's mark, and one acme machine retires."""
    held = Held()
    async with (
        instance(database_url, "alpha", held) as (alpha, store),
        instance(database_url, "beta", held) as (
            beta,
            _,
        ),
    ):
        backlog = await submit_backlog(alpha, 30)
        await busy_machines(store, "acme", 2)
        waiting = await beta.submit(b"0", machine_type="sleepy", tenant="globex")
        await asyncio.gather(
            alpha.dispatcher.placement.place(), beta.dispatcher.placement.place(), alpha.dispatcher.placement.place()
        )
        assert len(await marked(store)) == 1
        held.open.set()
        assert (await beta.finished(waiting.id, "globex", timeout=60)).state == "completed"
        await all_done(store, "acme")
        await assert_each_ran_once(store, backlog)
        lives = await machine_lives(store)
        globex_start = next(i for i, (_, tenant, _, _) in enumerate(lives) if tenant == "globex")
        assert sum(1 for _, tenant, event, _ in lives[:globex_start] if event == "stopped" and tenant == "acme") == 1
        assert await most_machines_at_once(store) == 2


async def test_a_tenant_whose_demand_disappears_gives_its_idle_machine_back_before_its_cool_down(
    pool_store: Store,
) -> None:
    """Globex's one job done, its machine idles (a 600 s cool-down) while acme's backlog waits at the cap: the next
    placement pass retires globex's idle machine at once and acme boots in its place."""
    held = Held()
    async with start_pool(
        pool_store, pool_env(TYPES, POOL_MAX_WORKERS_TOTAL=CAP), seams=[before_complete(held)]
    ) as pool:
        held.open.set()
        backlog = await submit_backlog(pool, 200, seconds="0.05")
        await busy_machines(pool_store, "acme", 2)
        waiting = await pool.submit(b"0", machine_type="sleepy", tenant="globex")
        assert (await pool.finished(waiting.id, "globex", timeout=60)).state == "completed"
        globex_machine = (await pool.job(waiting.id, "globex")).worker_id
        await pool.dispatcher.placement.place()  # the scaler's pass, as it would run within scaler_seconds

        async def acme_holds_two_again() -> bool | None:
            workers = await pool.workers()
            acme = [w for w in workers if w.tenant_id == "acme" and w.state in ("starting", "warm", "busy")]
            return True if len(acme) == 2 and globex_machine not in {w.id for w in workers} else None

        await eventually(acme_holds_two_again, timeout=60, every=0.05)
        left = await pool_store.pool.fetchval("SELECT count(*) FROM pool_jobs WHERE state = 'queued'")
        assert left > 0  # given back while acme's backlog still waited, not at its end
        await all_done(pool_store, "acme")
        await assert_each_ran_once(pool_store, backlog)
        assert await most_machines_at_once(pool_store) == 2


@pytest.mark.parametrize("carried_out_by", ["placement", "reaper"])
async def test_a_marked_machine_whose_job_is_cancelled_before_it_was_sent_retires_once_idle(
    pool_store: Store, carried_out_by: str
) -> None:
    """The mark lands while acme's machine holds a job not yet sent (held before its send); that job is cancelled:
    nothing is sent, the machine is idle and still marked, so no claim takes it. The next placement pass (the one its
    going idle pokes at the fleet cap, held here so the idle mark is seen) or the reaper, whatever the cool-down,
    retires it, and globex boots in its slot."""
    release, passes = asyncio.Event(), asyncio.Event()
    passes.set()

    async def hold_send(_job_id: str) -> None:
        await release.wait()

    async def hold_passes() -> None:  # the pass the idle machine pokes (at the fleet cap) waits until let through
        await passes.wait()

    env = pool_env(TYPES, POOL_MAX_WORKERS_TOTAL=CAP)
    async with start_pool(pool_store, env, seams=[before_send(hold_send), before_place(hold_passes)]) as pool:
        backlog = await submit_backlog(pool, 10)
        await busy_machines(pool_store, "acme", 2)
        waiting = await pool.submit(b"0", machine_type="sleepy", tenant="globex")
        await pool.dispatcher.placement.place()
        [retiring] = await marked(pool_store)
        held_job = await pool_store.pool.fetchval(
            "SELECT id::text FROM pool_jobs WHERE worker_id = $1::uuid AND state = 'dispatched'", retiring
        )
        passes.clear()
        await cancel(pool, held_job, "acme")
        release.set()

        async def idle_and_marked() -> bool | None:
            state = await pool_store.pool.fetchval(
                "SELECT state FROM pool_machines WHERE id = $1::uuid AND yield_to = 'globex'", retiring
            )
            return True if state == "warm" else None

        await eventually(idle_and_marked, timeout=30, every=0.02)
        if carried_out_by == "placement":
            passes.set()
            await pool.dispatcher.placement.place()
        else:
            await pool.dispatcher.scaler.reap()
            passes.set()
        assert (await pool.finished(waiting.id, "globex", timeout=60)).state == "completed"
        await all_done(pool_store, "acme")
        await assert_each_ran_once(pool_store, [j for j in backlog if j != held_job])
        assert (await pool.job(held_job, "acme")).state == "cancelled"
        lives = await machine_lives(pool_store)
        assert (retiring, "acme", "stopped") in {(m, t, e) for m, t, e, _ in lives}
        assert await most_machines_at_once(pool_store) == 2


async def test_a_tenant_that_came_while_the_backlogs_machines_booted_gets_a_slot_once_they_answer(
    pool_store: Store,
) -> None:
    """Globex submits while both of acme's machines are still booting (held before they are marked ready): fair
    share never takes a booting machine, so that pass retires nothing. Once they answer, their boot runs a pass of
    its own (no scaler here, no submit, and each completion hands the machine acme's next job), which marks one for
    globex: globex runs long before acme's backlog is done."""
    booting = asyncio.Event()

    async def hold_ready(_machine_id: str) -> None:
        await booting.wait()

    env = pool_env(TYPES, POOL_MAX_WORKERS_TOTAL=CAP)
    async with start_pool(pool_store, env, seams=[before_machine_ready(hold_ready)]) as pool:
        backlog = await submit_backlog(pool, 200, seconds="0.05")

        async def two_starting() -> bool | None:
            starting = await pool_store.pool.fetchval(
                "SELECT count(*) FROM pool_machines WHERE tenant_id = 'acme' AND state = 'starting'"
            )
            return True if starting == 2 else None

        await eventually(two_starting, timeout=30, every=0.02)
        waiting = await pool.submit(b"0", machine_type="sleepy", tenant="globex")
        await pool.dispatcher.placement.place()
        assert await marked(pool_store) == []  # nothing to take while they boot
        booting.set()
        assert (await pool.finished(waiting.id, "globex", timeout=60)).state == "completed"
        left = await pool_store.pool.fetchval("SELECT count(*) FROM pool_jobs WHERE state = 'queued'")
        assert left > 0  # long before the backlog's end
        await all_done(pool_store, "acme")
        await assert_each_ran_once(pool_store, backlog)
        assert await most_machines_at_once(pool_store) == 2
