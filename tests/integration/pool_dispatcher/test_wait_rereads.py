"""Sync waits' once-a-second re-reads (the backstop for a lost NOTIFY) share one statement (engine/rereads.py).

Jobs queue behind a job held at the worker's door on the only machine (max_workers 1); their sync waits re-read
every 0.3 s. The gathered read answers them together; a job that finished with no notification reaching its wait
is still found by the backstop, result and all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import RunningPool, sleepy_type
from tests.integration.pool_dispatcher.seams import before_execute
from tests.integration.pool_dispatcher.test_fences import HeldStep
from tests.integration.pool_dispatcher.test_instances import instance
from tests.integration.pool_dispatcher.test_job_done_notify import HOUR, busy_with_a_held_job
from thermostat.pool_dispatcher.repository import JobView

WAITS = 6
REPOLL = 0.3


class CountedReads:
    """The real gathered read, each call's ids noted."""

    def __init__(self, pool: RunningPool) -> None:
        self.read = pool.dispatcher.repo.jobs.get_jobs
        self.calls: list[list[str]] = []

    async def __call__(self, job_ids: Sequence[str]) -> dict[str, JobView]:
        self.calls.append(list(job_ids))
        return await self.read(job_ids)


async def queued(pool: RunningPool, count: int) -> None:
    async def enough() -> bool | None:
        n = await pool.dispatcher.repo.pool.fetchval("SELECT count(*) FROM pool_jobs WHERE state = 'queued'")
        return True if n >= count else None

    await eventually(enough, timeout=10, every=0.02)


async def test_the_re_reads_of_many_sync_waits_share_one_statement(database_url: str) -> None:
    """Six waits queued behind a held job: each round of their re-reads is one statement naming several of them
    (not one each), and once the machine is free every wait answers with its own job's result."""
    held = HeldStep()
    async with instance(database_url, "alpha", [sleepy_type(max_workers=1)], seams=[before_execute(held)]) as (
        alpha,
        _,
    ):
        await busy_with_a_held_job(alpha, held)
        reads = CountedReads(alpha)
        alpha.dispatcher.waits.rereads.read_many = reads
        alpha.dispatcher.waits.repoll_seconds = REPOLL
        waits = [asyncio.create_task(alpha.run(f"0.0{i + 1}".encode(), machine_type="sleepy")) for i in range(WAITS)]
        await queued(alpha, WAITS)
        await asyncio.sleep(4 * REPOLL)
        assert reads.calls, "no re-read in four re-read periods"
        asked = sum(len(ids) for ids in reads.calls)
        assert asked >= WAITS  # every wait re-read at least once ...
        assert len(reads.calls) < asked  # ... in fewer statements than re-reads
        assert max(len(ids) for ids in reads.calls) >= 2
        held.release.set()
        bodies = [body for body, _ in await asyncio.gather(*waits)]
        assert bodies == [f"slept 0.0{i + 1}".encode() for i in range(WAITS)]


async def test_a_job_whose_notification_never_came_is_found_by_the_gathered_re_read(database_url: str) -> None:
    """Another instance's machine completes a wait's job, and the wait is told nothing (its instance deaf to
    every notification and wake-up): the gathered re-read sees the job done and the wait answers with the job's
    result."""
    held = HeldStep()
    types = [sleepy_type(max_workers=1)]
    async with (
        instance(database_url, "alpha", types, seams=[before_execute(held)]) as (alpha, _),
        instance(database_url, "beta", types) as (beta, _),
    ):
        await busy_with_a_held_job(alpha, held)
        deaf = beta.dispatcher.waits.waiters
        deaf.wake = lambda job_id: None  # type: ignore[method-assign]
        deaf.announce = lambda job_id, result: None  # type: ignore[method-assign]
        beta.dispatcher.waits.repoll_seconds = REPOLL
        reads = CountedReads(beta)
        beta.dispatcher.waits.rereads.read_many = reads
        waiting = asyncio.create_task(beta.run(b"0", machine_type="sleepy", wait_seconds="30"))
        await queued(beta, 1)
        alpha.dispatcher.waits.repoll_seconds = HOUR
        held.release.set()  # alpha's machine takes beta's queued job next and completes it
        body, metadata = await asyncio.wait_for(waiting, 10)
        assert body == b"slept 0" and metadata["x-pool-job-state"] == "completed"
        assert any(metadata["x-pool-job-id"] in ids for ids in reads.calls)
