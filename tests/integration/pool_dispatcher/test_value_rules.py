"""The pool's value rules (a job's and a machine's state, a usage event's terminal state, timeout and duration) hold
in the database, as domains rather than table CHECK constraints (migration 0016): a table CHECK is re-read and
re-planned on every statement that writes its table, the pool's hot statements included."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

JOB = uuid.UUID(int=1)
MACHINE = uuid.UUID(int=2)


async def seed(pool: asyncpg.Pool) -> None:
    """A job, a machine and the job's usage event, each valid."""
    await pool.execute(
        "INSERT INTO pool_jobs (id, tenant_id, machine_type, state, timeout_seconds)"
        " VALUES ($1, 't', 'echo', 'queued', 5)",
        JOB,
    )
    await pool.execute(
        "INSERT INTO pool_machines (id, tenant_id, machine_type, image, backend, token, state, owner, owner_term,"
        " cool_down_seconds) VALUES ($1, 't', 'echo', 'img', 'local', 'tok', 'warm', 'me', 1, 60)",
        MACHINE,
    )
    await pool.execute(
        "INSERT INTO pool_usage (job_id, tenant_id, machine_type, worker_id, terminal_state, duration_seconds,"
        " started_at, ended_at) VALUES ($1, 't', 'echo', $2, 'completed', 0, now(), now())",
        JOB,
        MACHINE,
    )


@pytest.mark.parametrize(
    ("table", "column", "value", "rule"),
    [
        ("pool_jobs", "state", "'lost'", "pool_job_state_check"),
        ("pool_jobs", "timeout_seconds", "0", "pool_timeout_seconds_check"),
        ("pool_machines", "state", "'idle'", "pool_machine_state_check"),
        ("pool_usage", "terminal_state", "'running'", "pool_terminal_state_check"),
        ("pool_usage", "duration_seconds", "-1", "pool_duration_seconds_check"),
    ],
)
async def test_a_value_outside_the_pools_rules_is_refused(db_pool, table, column, value, rule):
    await seed(db_pool)
    with pytest.raises(asyncpg.CheckViolationError) as refused:
        await db_pool.execute(f"UPDATE {table} SET {column} = {value}")  # noqa: S608 - the test's own literals
    assert refused.value.constraint_name == rule


async def test_every_state_the_pool_writes_is_accepted(db_pool):
    await seed(db_pool)
    for state in ("queued", "dispatched", "running", "completed", "failed", "timed_out", "cancelled"):
        await db_pool.execute("UPDATE pool_jobs SET state = $1", state)
    for state in ("starting", "warm", "busy", "stopping"):
        await db_pool.execute("UPDATE pool_machines SET state = $1", state)
    for state in ("completed", "failed", "timed_out", "cancelled"):
        await db_pool.execute("UPDATE pool_usage SET terminal_state = $1", state)
    assert await db_pool.fetchval("SELECT terminal_state FROM pool_usage") == "cancelled"


async def test_the_tables_the_hot_statements_write_carry_no_table_check_constraint(db_pool):
    checks = await db_pool.fetch(
        "SELECT conrelid::regclass::text AS rel, conname FROM pg_constraint"
        " WHERE contype = 'c'"
        " AND conrelid IN ('pool_jobs'::regclass, 'pool_machines'::regclass, 'pool_usage'::regclass)"
    )
    assert [(r["rel"], r["conname"]) for r in checks] == []
