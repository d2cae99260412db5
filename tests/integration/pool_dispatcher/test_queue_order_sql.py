"""Queue order is one rule (policy/pool/queue_order.py), and every SQL block that takes from the queue keeps it.

The rule is written in Python, where placement sorts demand by it. The statements that take a queued job must
order inside the statement (the claim and its row lock are one step), so each of them is run here on real Postgres
against the rule: the order a machine drains the queue in through `take_next`, a completion's hand-off
(`complete`), a placement's first job (`insert_machine`) and the head of line `demand` reports, all equal
`in_queue_order`. A submit is claimed by a warm machine only when no queued job of its tenant and type is ahead
of it by the same rule (the new job comes last among equals). A block that orders queued jobs by priority and
is not checked here fails `test_every_block_ordering_the_queue_is_checked_against_the_rule`.
"""

from __future__ import annotations

import re
import uuid

import asyncpg
import pytest

from tests.integration.pool_dispatcher.pool_sql import owned, pool_blocks, statement, submit_args
from thermostat.policy.pool.queue_order import QueuedJob, in_queue_order, queue_key

BLOCKS = pool_blocks()
ME = ("me", 3)
MACHINE = uuid.UUID(int=1 << 64)
CHECKED = {"take_next", "complete", "insert_machine", "demand"}

# (id, priority, sequence): distinct sequences, as the store's queue_seq always is
CASES = [
    pytest.param([("a", 0, 1), ("b", 5, 2)], id="higher-priority-first"),
    pytest.param([("a", 0, 2), ("b", 0, 1)], id="fifo-within-a-priority"),
    pytest.param([("a", -1, 1), ("b", 0, 2)], id="negative-priority-after-default"),
    pytest.param([("a", 0, 1), ("b", 2**63 - 1, 9), ("c", 1, 3), ("d", 1, 2)], id="mixed"),
    pytest.param(
        [("a", 3, 10), ("b", 3, 4), ("c", -(2**63), 1), ("d", 7, 12), ("e", 0, 2), ("f", 3, 7)],
        id="several-per-priority",
    ),
]


def _uuid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_OID, name)


async def queue(conn: asyncpg.Connection, jobs: list[tuple[str, int, int]], *, tenant: str = "t") -> list[QueuedJob]:
    for name, priority, sequence in jobs:
        await conn.execute(
            "INSERT INTO pool_jobs (id, queue_seq, tenant_id, machine_type, state, priority, timeout_seconds, payload)"
            " VALUES ($1, $2, $3, 'cpu', 'queued', $4, 30, 'x')",
            _uuid(f"{tenant}/{name}"),
            sequence,
            tenant,
            priority,
        )
    return [QueuedJob(id=name, priority=p, sequence=s) for name, p, s in jobs]


async def machine(conn: asyncpg.Connection, state: str, job: uuid.UUID | None = None) -> None:
    await conn.execute(
        "INSERT INTO pool_machines (id, tenant_id, machine_type, image, backend, token, state, job_id, owner,"
        " owner_term, cool_down_seconds) VALUES ($1, 't', 'cpu', 'img', 'local', 'tok', $2, $3, $4, $5, 60)",
        MACHINE,
        state,
        job,
        *ME,
    )


def _names(jobs: list[tuple[str, int, int]]) -> dict[uuid.UUID, str]:
    return {_uuid(f"t/{name}"): name for name, _, _ in jobs}


def expected(queued: list[QueuedJob]) -> list[str]:
    return [job.id for job in in_queue_order(queued)]


def test_every_block_ordering_the_queue_is_checked_against_the_rule() -> None:
    ordering = re.compile(r"ORDER BY[^\n;]*\bpriority\b", re.IGNORECASE)
    assert {name for name, sql in BLOCKS.items() if ordering.search(statement(sql))} == CHECKED


@pytest.mark.parametrize("jobs", CASES)
async def test_take_next_drains_the_queue_in_queue_order(db_pool: asyncpg.Pool, jobs: list) -> None:
    names = _names(jobs)
    async with db_pool.acquire() as conn:
        queued = await queue(conn, jobs)
        await machine(conn, "warm")
        taken = []
        for _ in jobs:
            row = await conn.fetchrow(*BLOCKS.bind("take_next", machine_id=MACHINE, image="img", **owned(ME)))
            taken.append(names[row["id"]])
            await conn.execute("UPDATE pool_machines SET state = 'warm', job_id = NULL")
        assert await conn.fetchrow(*BLOCKS.bind("take_next", machine_id=MACHINE, image="img", **owned(ME))) is None
    assert taken == expected(queued)


@pytest.mark.parametrize("jobs", CASES)
async def test_a_completion_hands_its_machine_the_next_job_in_queue_order(db_pool: asyncpg.Pool, jobs: list) -> None:
    names = _names(jobs)
    async with db_pool.acquire() as conn:
        queued = await queue(conn, jobs)
        running = uuid.UUID(int=7)
        await conn.execute(
            "INSERT INTO pool_jobs (id, tenant_id, machine_type, state, timeout_seconds, worker_id, owner, owner_term,"
            " started_at) VALUES ($1, 't', 'cpu', 'running', 30, $2, $3, $4, now())",
            running,
            MACHINE,
            *ME,
        )
        await machine(conn, "busy", running)
        handed = []
        for _ in jobs:
            args = {
                "job_id": running,
                "machine_id": MACHINE,
                "state": "completed",
                "result": b"r",
                "error": None,
                "duration_seconds": 1.0,
                "retire": False,
                "take_next": True,
                "tenant_id": "t",
                "machine_type": "cpu",
                "send_next": True,
                "notified_result_bytes": 1000,
                "channel": "own",
                **owned(ME),
            }
            row = await conn.fetchrow(*BLOCKS.bind("complete", **args))
            running = row["id"]
            handed.append(names[running])
    assert handed == expected(queued)


@pytest.mark.parametrize("jobs", CASES)
async def test_each_placed_machine_is_handed_the_first_job_in_line(db_pool: asyncpg.Pool, jobs: list) -> None:
    names = _names(jobs)
    async with db_pool.acquire() as conn:
        queued = await queue(conn, jobs)
        assigned = []
        for n in jobs:
            args = {
                "machine_id": uuid.uuid5(MACHINE, str(n)),
                "tenant_id": "t",
                "machine_type": "cpu",
                "image": "img",
                "backend": "local",
                "token": "tok",
                "assign_job": True,
                "cool_down_seconds": 60.0,
                **owned(ME),
            }
            row = await conn.fetchrow(*BLOCKS.bind("insert_machine", **args))
            assigned.append(names[row["job_id"]])
    assert assigned == expected(queued)


@pytest.mark.parametrize("jobs", CASES)
async def test_demand_names_the_first_job_in_line_of_each_tenant(db_pool: asyncpg.Pool, jobs: list) -> None:
    async with db_pool.acquire() as conn:
        mine = await queue(conn, jobs)
        theirs = await queue(conn, [(name, priority, 200 - sequence) for name, priority, sequence in jobs], tenant="u")
        rows = {r["tenant_id"]: r for r in await conn.fetch(*BLOCKS.bind("demand"))}
    for tenant, queued in (("t", mine), ("u", theirs)):
        head = in_queue_order(queued)[0]
        assert rows[tenant]["id"] == _uuid(f"{tenant}/{head.id}")
        assert (rows[tenant]["queued"], rows[tenant]["priority"], rows[tenant]["queue_seq"]) == (
            len(queued),
            head.priority,
            head.sequence,
        )


@pytest.mark.parametrize("jobs", CASES)
@pytest.mark.parametrize("priority", [-1, 0, 1, 5, 2**63 - 1])
async def test_a_submit_is_claimed_only_when_no_queued_job_is_ahead_of_it(
    db_pool: asyncpg.Pool, jobs: list, priority: int
) -> None:
    """The new job's place is after every queued job of its priority (its sequence is the newest)."""
    async with db_pool.acquire() as conn:
        queued = await queue(conn, jobs)
        await machine(conn, "warm")
        new = QueuedJob(id="new", priority=priority, sequence=max(j.sequence for j in queued) + 1)
        args = submit_args(job_id=uuid.UUID(int=9), tenant_id="t", priority=priority, session_id=None, owner=ME)
        row = await conn.fetchrow(*BLOCKS.bind("submit", **args))
    ahead = any(queue_key(job) < queue_key(new) for job in queued)
    assert (row["state"] == "queued") is ahead
