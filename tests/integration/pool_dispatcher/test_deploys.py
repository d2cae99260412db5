"""A deploy keeps the fleet (issue 23 item 1): a SIGTERM drains, then releases; the next process adopts at once.

Real Postgres, real gRPC, reference workers as real child processes (the local backend, told to let them outlive
their dispatcher, as the dev stack does). A process here is an in-process dispatcher with its own store pools and
instance id; "SIGTERM" is its host stopped as the signal handler stops it (`stopped_by`), so the departure is the
one a real SIGTERM makes (thermostat.policy.pool.departure). Orderings are held by events, never by sleeps: a job
is seen running before the stop begins, a submit is held inside its statement while the drain begins.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import psutil
import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.integration.pool_dispatcher.conftest import RunningPool, pool_env, sleepy_type, start_pool
from tests.integration.pool_dispatcher.seams import Seam, wrap_before
from thermostat.pool_dispatcher.dispatcher import Dispatcher, lease_name
from thermostat.pool_dispatcher.settings import PoolDispatcherSettings
from thermostat.store.db import Store

GRACE = "30"
KEEPS = {"POOL_LOCAL_MACHINES_OUTLIVE_PROCESS": "true", "POOL_SHUTDOWN_GRACE_SECONDS": GRACE}


@contextlib.asynccontextmanager
async def process(
    database_url: str,
    instance_id: str | None,
    *,
    types: list[dict[str, object]] | None = None,
    clock: Any = None,
    seams: Sequence[Seam] = (),
    **env: str,
) -> AsyncIterator[tuple[RunningPool, Store]]:
    """One dispatcher process: its own store pools, its instance id (None: generated), a long lease (so nothing
    here is a lease lapsing), local machines that outlive it."""
    store = await open_store(database_url, max_size=8, application_name=f"pool-{instance_id}")
    settings = {**KEEPS, "POOL_LEASE_SECONDS": "600", **env}
    if instance_id is not None:
        settings["POOL_INSTANCE_ID"] = instance_id
    try:
        async with start_pool(store, pool_env(types or [sleepy_type()], **settings), clock=clock, seams=seams) as pool:
            yield pool, store
    finally:
        await store.close()


async def sigterm(pool: RunningPool, grace: float = float(GRACE)) -> None:
    """Stop the process's host as its SIGTERM handler does: a deploy."""
    assert pool.host is not None
    pool.host.stopped_by = signal.Signals.SIGTERM.name
    await pool.host.stop(grace)


async def machines(store: Store) -> list[dict[str, Any]]:
    rows = await store.pool.fetch(
        "SELECT id::text, owner, state, provider_id, released_at, "
        "extract(epoch FROM now() - idle_since)::float AS idle FROM pool_machines ORDER BY created_at"
    )
    return [dict(r) for r in rows]


def worker_alive(provider_id: str) -> bool:
    pid = int(provider_id.removeprefix("local-"))
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def running(pool: RunningPool, job_id: str) -> None:
    async def seen() -> bool | None:
        return True if (await pool.job(job_id)).state == "running" else None

    await eventually(seen, timeout=30, every=0.02)


async def test_a_job_in_flight_at_sigterm_finishes_and_its_result_reaches_the_caller(database_url: str) -> None:
    async with process(database_url, "alpha") as (alpha, store):
        await alpha.run(b"0", machine_type="sleepy")  # a warm machine
        call = asyncio.ensure_future(alpha.run(b"2", machine_type="sleepy", wait_seconds="60"))
        job_id = await store.pool.fetchval("SELECT id::text FROM pool_jobs WHERE state <> 'completed'")
        while job_id is None:
            await asyncio.sleep(0.01)
            job_id = await store.pool.fetchval("SELECT id::text FROM pool_jobs WHERE state <> 'completed'")
        await running(alpha, job_id)
        await sigterm(alpha)  # begins while the job runs: the drain waits for it
        body, _ = await call
        assert body == b"slept 2"
        assert await store.pool.fetchval("SELECT state FROM pool_jobs WHERE id = $1", uuid.UUID(job_id)) == "completed"
        [machine] = await machines(store)
        assert machine["state"] == "warm" and machine["released_at"] is not None  # released, not stopped
        assert worker_alive(machine["provider_id"])
        async with process(database_url, "omega"):  # adopts it, and stops it when it closes (the test's end)
            pass


async def test_a_machine_released_by_one_process_is_adopted_by_another_at_once_with_its_remaining_cool_down(
    database_url: str,
) -> None:
    """Released by alpha with 500 s of a 600 s cool-down spent; beta (another id, alpha's lease still 10 minutes
    away from lapsing) adopts it at start, runs its next job on it with no boot, and reaps it 100 s later, not 600."""
    types = [sleepy_type(cool_down_seconds=600)]
    async with process(database_url, "alpha", types=types) as (alpha, store):
        await alpha.run(b"0", machine_type="sleepy")
        await sigterm(alpha)
        [released] = await machines(store)
    await store_exec(database_url, "UPDATE pool_machines SET idle_since = now() - interval '500 seconds'")
    clock = FakeClock()
    async with process(database_url, "beta", types=types, clock=clock) as (beta, store):
        [adopted] = await machines(store)
        assert adopted["owner"] == "beta" and adopted["released_at"] is None and adopted["state"] == "warm"
        assert adopted["id"] == released["id"] and adopted["provider_id"] == released["provider_id"]
        await beta.dispatcher.scaler.reap()
        clock.advance(95)  # 595 s idle by its own clock: kept
        await beta.dispatcher.scaler.reap()
        assert [m["state"] for m in await machines(store)] == ["warm"]
        clock.advance(10)  # 605 s: its cool-down is over (a fresh one would keep it another 495 s)
        await beta.dispatcher.scaler.reap()
        assert await machines(store) == []
        assert not worker_alive(released["provider_id"]) or await gone(released["provider_id"])


async def test_the_adopted_machine_takes_the_next_job_without_a_boot(database_url: str) -> None:
    async with process(database_url, "alpha") as (alpha, store):
        await alpha.run(b"0", machine_type="sleepy")
        [machine] = await machines(store)
        await sigterm(alpha)
    async with process(database_url, "beta") as (beta, store):
        job = await beta.submit(b"0", machine_type="sleepy")
        finished = await beta.finished(job.id)
        assert finished.state == "completed" and finished.worker_id == machine["id"]
        assert [m["id"] for m in await machines(store)] == [machine["id"]]


async def test_an_unhealthy_released_machine_is_stopped_by_the_adopter_not_reused(database_url: str) -> None:
    async with process(database_url, "alpha") as (alpha, store):
        await alpha.run(b"0", machine_type="sleepy")
        [machine] = await machines(store)
        await sigterm(alpha)
    os.killpg(int(machine["provider_id"].removeprefix("local-")), signal.SIGKILL)  # dies while nobody owns it
    async with process(database_url, "beta") as (beta, store):
        assert all(m["id"] != machine["id"] for m in await machines(store))  # stopped at adoption, row gone
        job = await beta.submit(b"0", machine_type="sleepy")
        finished = await beta.finished(job.id)
        assert finished.state == "completed" and finished.worker_id != machine["id"]


async def test_warm_machines_survive_a_restart_under_the_same_instance_id(database_url: str) -> None:
    """Released at the SIGTERM and adopted by the next process under the same id, by the path any other id takes
    (ownership.sql `release_own`, `adopt_released`): the warm machines stay warm and run its next job, no boot."""
    async with process(database_url, "alpha") as (alpha, store):
        await alpha.run(b"0", machine_type="sleepy")
        await alpha.run(b"0", machine_type="sleepy", session_id="s2")
        before = await machines(store)
        term = await store.pool.fetchval("SELECT term FROM leases WHERE name = $1", lease_name("alpha"))
        await sigterm(alpha)
    async with process(database_url, "alpha") as (again, store):
        assert again.dispatcher.ownership.owner.term == term + 1
        after = await machines(store)
        assert [(m["id"], m["provider_id"], m["state"], m["owner"]) for m in after] == [
            (m["id"], m["provider_id"], "warm", "alpha") for m in before
        ]
        assert all(worker_alive(m["provider_id"]) for m in after)
        body, _ = await again.run(b"0", machine_type="sleepy")
        assert body == b"slept 0"
        assert [m["id"] for m in await machines(store)] == [m["id"] for m in before]  # no boot


async def test_a_job_still_running_when_the_grace_runs_out_fails_with_a_clear_error_and_is_not_rerun(
    database_url: str,
) -> None:
    """The worker may still run it and nobody would take its answer: the release fails it rather than queue it again
    (never run twice), while unsent jobs go back to the queue in their old place (ownership.sql `release_own`)."""
    async with process(database_url, "alpha", POOL_SHUTDOWN_GRACE_SECONDS="0.5") as (alpha, store):
        job = await alpha.submit(b"30", machine_type="sleepy")
        await running(alpha, job.id)
        await sigterm(alpha, grace=0.5)
        row = await store.pool.fetchrow("SELECT state, error FROM pool_jobs WHERE id = $1", uuid.UUID(job.id))
        assert row["state"] == "failed"
        assert "shut down (a deploy)" in row["error"] and "0.5 s grace ran out" in row["error"]
        assert await machines(store) == []  # mid-job: stopped, never handed to the next process


async def test_a_submit_after_the_drain_began_is_refused_retryably_and_nothing_is_queued(database_url: str) -> None:
    async with process(database_url, "alpha") as (alpha, store):
        assert await alpha.dispatcher.drain(1.0)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await alpha.submit(b"0", machine_type="sleepy")
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in (refused.value.details() or "") and "retry" in (refused.value.details() or "")
        assert await store.pool.fetchval("SELECT count(*) FROM pool_jobs") == 0


async def test_a_submit_inside_its_statement_when_the_drain_begins_lands_and_runs_before_the_release(
    database_url: str,
) -> None:
    """The other ordering of a deploy racing a submit: the submit passed its check, its statement is held, the
    drain begins; the statement then lands (a warm machine's claim) and the drain waits for the job it started."""
    entered, go = asyncio.Event(), asyncio.Event()

    async def hold(*_: object) -> None:
        entered.set()
        await go.wait()

    def seam(dispatcher: Dispatcher) -> None:
        wrap_before(dispatcher.repo.jobs, "submit", hold, None)

    async with process(database_url, "alpha") as (alpha, store):
        await alpha.run(b"0", machine_type="sleepy")  # a warm machine for the held submit to claim
        seam(alpha.dispatcher)
        call = asyncio.ensure_future(alpha.run(b"1", machine_type="sleepy", wait_seconds="60"))
        await entered.wait()
        drain = asyncio.ensure_future(alpha.dispatcher.drain(30.0))
        await asyncio.sleep(0)  # the drain has begun (draining is set at its first step)
        assert alpha.dispatcher.draining
        go.set()
        body, _ = await call
        assert body == b"slept 1" and await drain
        assert await store.pool.fetchval("SELECT count(*) FROM pool_jobs WHERE state = 'completed'") == 2


async def test_generated_instance_ids_differ_per_process(database_url: str) -> None:
    async with process(database_url, None) as (one, _), process(database_url, None) as (two, store):
        ids = {one.dispatcher.instance_id, two.dispatcher.instance_id}
        assert len(ids) == 2 and all(i.startswith("pool-") and len(i) == len("pool-") + 12 for i in ids)
        holders = await store.pool.fetch("SELECT holder FROM leases WHERE name LIKE 'pool-instance:%'")
        assert {r["holder"] for r in holders} == ids


async def test_the_instance_lease_defaults_to_30_seconds(database_url: str) -> None:
    assert PoolDispatcherSettings.model_fields["pool_lease_seconds"].default == 30.0
    store = await open_store(database_url, max_size=4, application_name="pool-lease-default")
    try:
        env = {
            k: v for k, v in pool_env([sleepy_type()], POOL_INSTANCE_ID="alpha").items() if k != "POOL_LEASE_SECONDS"
        }
        async with start_pool(store, env) as pool:
            assert pool.dispatcher.lease_seconds == 30.0
            ttl = await store.pool.fetchval(
                "SELECT extract(epoch FROM expires_at - renewed_at) FROM leases WHERE name = $1", lease_name("alpha")
            )
            assert float(ttl) == pytest.approx(30.0, abs=0.5)
    finally:
        await store.close()


async def store_exec(database_url: str, sql: str) -> None:
    store = await open_store(database_url, max_size=1, application_name="pool-deploy-test")
    try:
        await store.pool.execute(sql)
    finally:
        await store.close()


async def gone(provider_id: str) -> bool:
    async def dead() -> bool | None:
        return True if not worker_alive(provider_id) else None

    return bool(await eventually(dead, timeout=15, every=0.05))


async def test_a_machine_whose_job_ends_during_the_drain_takes_no_next_job_and_the_adopter_runs_it(
    database_url: str,
) -> None:
    """Draining, alpha's machine finishes its job with another queued behind it: the machine goes warm instead of
    taking it (new work is not alpha's now), alpha releases it, and beta adopts it and runs the queued job on it."""
    types = [sleepy_type(max_workers=1)]
    async with process(database_url, "alpha", types=types) as (alpha, store):
        first = await alpha.submit(b"1", machine_type="sleepy")
        await running(alpha, first.id)
        second = await alpha.submit(b"0", machine_type="sleepy")
        assert (await alpha.job(second.id)).state == "queued"
        await sigterm(alpha)
        assert (
            await store.pool.fetchval("SELECT state FROM pool_jobs WHERE id = $1", uuid.UUID(first.id)) == "completed"
        )
        assert await store.pool.fetchval("SELECT state FROM pool_jobs WHERE id = $1", uuid.UUID(second.id)) == "queued"
        [machine] = await machines(store)
        assert machine["state"] == "warm" and machine["released_at"] is not None
    async with process(database_url, "beta", types=types) as (beta, store):
        done = await beta.finished(second.id)
        assert done.state == "completed" and done.worker_id == machine["id"]


async def test_a_machine_recovered_under_the_same_id_after_a_crash_keeps_its_remaining_cool_down(
    database_url: str,
) -> None:
    """No release here: alpha is still there (stalled, as after a crash) when a new alpha starts and takes its rows
    back (recover); the warm machine is kept with 500 s of its 600 s cool-down spent, not a fresh 600."""
    types = [sleepy_type(cool_down_seconds=600)]
    async with process(database_url, "alpha", types=types) as (alpha, store):
        await alpha.run(b"0", machine_type="sleepy")
        [machine] = await machines(store)
        await store.pool.execute("UPDATE pool_machines SET idle_since = now() - interval '500 seconds'")
        clock = FakeClock()
        async with process(database_url, "alpha", types=types, clock=clock) as (again, _):
            [kept] = await machines(store)
            assert kept["id"] == machine["id"] and kept["state"] == "warm" and kept["released_at"] is None
            clock.advance(95)
            await again.dispatcher.scaler.reap()
            assert [m["state"] for m in await machines(store)] == ["warm"]
            clock.advance(10)
            await again.dispatcher.scaler.reap()
            assert await machines(store) == []
