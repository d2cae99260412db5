"""requeue_unsent at the repository, on real Postgres: the machine is freed only with its job.

The job goes back to the queue when it is dispatched to the machine under this owner and term (or running, when
the caller's own mark_sent marked it); the machine is idle again with it. A job still live on the machine that the
call may not requeue (running, unmarked: a reconcile whose bounded memory of unanswered claims dropped it) keeps its
machine busy, so the machine is never offered to another job while one is said to run on it. A job a cancel took
before it was sent frees its machine (the rule mark_sent keeps too)."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from thermostat.pool_dispatcher.repository import Owner, PoolRepository

ME = Owner(instance="dispatcher-a", term=3)


async def busy_machine_with_job(db: asyncpg.Pool, *, job_state: str, owner: Owner = ME) -> tuple[str, str]:
    """A busy machine of `owner` holding one job in `job_state` dispatched to it under `owner`."""
    machine_id, job_id = uuid.uuid4(), uuid.uuid4()
    await db.execute(
        "INSERT INTO pool_machines (id, tenant_id, machine_type, image, backend, token, state, job_id, owner,"
        " owner_term, cool_down_seconds) VALUES ($1, 't', 'sleepy', 'img', 'local', 'tok', 'busy', $2, $3, $4, 60)",
        machine_id,
        job_id,
        owner.instance,
        owner.term,
    )
    await db.execute(
        "INSERT INTO pool_jobs (id, tenant_id, machine_type, state, timeout_seconds, payload, worker_id, owner,"
        " owner_term) VALUES ($1, 't', 'sleepy', $2, 30, 'x', $3, $4, $5)",
        job_id,
        job_state,
        machine_id,
        owner.instance,
        owner.term,
    )
    return str(job_id), str(machine_id)


async def states(db: asyncpg.Pool, job_id: str, machine_id: str) -> tuple[str, str, str | None]:
    job = await db.fetchval("SELECT state FROM pool_jobs WHERE id = $1", uuid.UUID(job_id))
    machine = await db.fetchrow("SELECT state, job_id FROM pool_machines WHERE id = $1", uuid.UUID(machine_id))
    return job, machine["state"], None if machine["job_id"] is None else str(machine["job_id"])


async def test_a_dispatched_job_is_requeued_and_its_machine_is_idle_again(db_pool: asyncpg.Pool) -> None:
    job_id, machine_id = await busy_machine_with_job(db_pool, job_state="dispatched")
    assert await PoolRepository(db_pool).jobs.requeue_unsent(job_id, machine_id, ME) is True
    assert await states(db_pool, job_id, machine_id) == ("queued", "warm", None)


async def test_a_running_job_the_caller_marked_is_requeued_and_its_machine_is_idle_again(db_pool: asyncpg.Pool) -> None:
    job_id, machine_id = await busy_machine_with_job(db_pool, job_state="running")
    assert await PoolRepository(db_pool).jobs.requeue_unsent(job_id, machine_id, ME, marked=True) is True
    assert await states(db_pool, job_id, machine_id) == ("queued", "warm", None)


async def test_a_running_job_the_call_may_not_requeue_keeps_its_machine_busy(db_pool: asyncpg.Pool) -> None:
    """Running and unmarked (a reconcile that no longer knows its claim went unanswered): the job stays, and its machine
    stays busy, so no other job is handed a machine that one is said to run on."""
    job_id, machine_id = await busy_machine_with_job(db_pool, job_state="running")
    assert await PoolRepository(db_pool).jobs.requeue_unsent(job_id, machine_id, ME, marked=False) is False
    assert await states(db_pool, job_id, machine_id) == ("running", "busy", job_id)


@pytest.mark.parametrize("other", [Owner(instance="dispatcher-b", term=3), Owner(instance="dispatcher-a", term=4)])
async def test_a_job_and_machine_of_another_owner_or_term_are_left_alone(db_pool: asyncpg.Pool, other: Owner) -> None:
    job_id, machine_id = await busy_machine_with_job(db_pool, job_state="dispatched", owner=other)
    assert await PoolRepository(db_pool).jobs.requeue_unsent(job_id, machine_id, ME, marked=True) is False
    assert await states(db_pool, job_id, machine_id) == ("dispatched", "busy", job_id)


async def test_a_job_cancelled_before_it_was_sent_is_not_requeued_and_frees_its_machine(db_pool: asyncpg.Pool) -> None:
    job_id, machine_id = await busy_machine_with_job(db_pool, job_state="dispatched")
    # as the cancel statement leaves a job it took before its send: cancelled, its owner dropped, its worker kept
    await db_pool.execute(
        "UPDATE pool_jobs SET state = 'cancelled', owner = NULL, owner_term = NULL WHERE id = $1", uuid.UUID(job_id)
    )
    assert await PoolRepository(db_pool).jobs.requeue_unsent(job_id, machine_id, ME) is False
    assert await states(db_pool, job_id, machine_id) == ("cancelled", "warm", None)


async def test_a_machine_holding_another_job_is_not_freed(db_pool: asyncpg.Pool) -> None:
    job_id, machine_id = await busy_machine_with_job(db_pool, job_state="dispatched")
    assert await PoolRepository(db_pool).jobs.requeue_unsent(str(uuid.uuid4()), machine_id, ME, marked=True) is False
    assert await states(db_pool, job_id, machine_id) == ("dispatched", "busy", job_id)
