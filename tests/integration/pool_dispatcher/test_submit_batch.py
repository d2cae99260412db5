"""Group commit of submits behind a backlog (thermostat.policy.pool.submit_batch), on one real dispatcher.

Every test builds the same backlog: a sleepy type capped at one machine, whose first job is held before its
completion (the machine stays busy), and two queued submits behind it, after which this process expects the
next submit of the key to queue. Batched submits are made on the dispatcher itself, in task order, so their
arrival order is the test's; each batch's statement passes a gate that records its jobs and can hold it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest

from tests.fixtures.polling import eventually
from tests.integration.pool_dispatcher.conftest import RunningPool, caller, pool_env, sleepy_type, start_pool
from tests.integration.pool_dispatcher.seams import before_complete, before_submit_batch
from tests.integration.pool_dispatcher.test_fences import HeldStep
from thermostat.policy.pool.submit_batch import BatchLimits
from thermostat.policy.pool.submit_options import SubmitOptions, parse_submit_query
from thermostat.pool.v1 import pool_pb2
from thermostat.pool_dispatcher.dispatcher import Dispatcher
from thermostat.pool_dispatcher.repository import JobView
from thermostat.store.db import Store

GATHER_FOR_A_MINUTE = BatchLimits(max_jobs=3, max_delay_seconds=60.0, queued_per_machine=1)


class BatchGate:
    """Before a batch's submit_queued (seams.before_submit_batch): records every batch's job ids, and holds the next
    batch once armed, until released."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.armed = False
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, job_ids: list[str]) -> None:
        self.batches.append(job_ids)
        if self.armed:
            self.armed = False
            self.arrived.set()
            await self.release.wait()


@dataclass
class Backlog:
    pool: RunningPool
    store: Store
    held: HeldStep  # the first job, before its completion
    gate: BatchGate
    first: str
    queued: list[str]  # the two single submits queued behind it
    machine_id: str

    @property
    def dispatcher(self) -> Dispatcher:
        return self.pool.dispatcher

    async def submit(self, payload: bytes = b"0", *, priority: int = 0, remaining: float | None = None) -> JobView:
        """A submit on the dispatcher itself (what the servicer calls once the call's checks passed)."""
        query = {"machine_type": "sleepy", "priority": str(priority)}
        options = parse_submit_query(query, catalogue=self.dispatcher.catalogues.catalogue, sync=False)
        assert isinstance(options, SubmitOptions)
        return await self.dispatcher.submit(
            tenant_id="acme", options=options, payload=payload, trace={}, remaining=remaining
        )

    def submitting(self, payload: bytes = b"0", *, priority: int = 0) -> asyncio.Task[JobView]:
        return asyncio.create_task(self.submit(payload, priority=priority))

    async def cancel(self, job_id: str) -> None:
        request = pool_pb2.CancelJobRequest(id=job_id, build_id=f"cancel-{job_id}")
        assert (await self.pool.stub.CancelJob(request, metadata=caller())).state == "cancelled"

    async def run_order(self) -> list[str]:
        """The jobs that reached the machine, in the order they ran (one machine: the usage feed's order)."""
        return [event.job_id for event in await self.pool.usage()]

    async def state(self, job_id: str) -> str:
        return (await self.pool.job(job_id)).state


async def joined() -> None:
    """Let the submitting tasks created so far run up to their batch's answer (they join without awaiting)."""
    await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def backlog(pool_store: Store, limits: BatchLimits = GATHER_FOR_A_MINUTE) -> AsyncIterator[Backlog]:
    held, gate = HeldStep(), BatchGate()
    seams = [before_complete(held), before_submit_batch(gate)]
    async with start_pool(pool_store, pool_env([sleepy_type(max_workers=1)]), seams=seams) as pool:
        pool.dispatcher.intake.limits = limits
        held.armed = True
        first = await pool.submit(b"0", machine_type="sleepy")  # boots the machine, runs, held before completing
        await held.arrived.wait()
        # queued behind a busy machine: the first with nothing ahead, the second with one job ahead per machine
        queued = [(await pool.submit(b"0", machine_type="sleepy")).id for _ in range(2)]
        machine_id = (await pool.job(first.id)).worker_id
        yield Backlog(pool, pool_store, held, gate, first.id, queued, machine_id)
        held.release.set()
        gate.release.set()


async def finished(backlog: Backlog, *job_ids: str) -> list[str]:
    return [(await backlog.pool.finished(job_id)).state for job_id in job_ids]


async def test_submits_behind_a_deep_queue_are_queued_by_one_statement_in_arrival_order(pool_store: Store) -> None:
    async with backlog(pool_store) as b:
        assert b.gate.batches == []  # the single submits that built the backlog had their own statements
        tasks = [b.submitting(payload) for payload in (b"0", b"0", b"0")]
        jobs = await asyncio.gather(*tasks)
        assert b.gate.batches == [[job.id for job in jobs]]
        assert [job.state for job in jobs] == ["queued"] * 3
        assert len({job.id for job in jobs}) == 3  # each caller its own job
        b.held.release.set()
        assert await finished(b, *(job.id for job in jobs)) == ["completed"] * 3
        assert await b.run_order() == [b.first, *b.queued, *(job.id for job in jobs)]


async def test_a_lone_batched_submit_goes_out_when_its_window_ends(pool_store: Store) -> None:
    async with backlog(pool_store, BatchLimits(max_jobs=3, max_delay_seconds=0.0, queued_per_machine=1)) as b:
        job = await b.submit()
        assert b.gate.batches == [[job.id]] and job.state == "queued"


async def test_a_single_submit_sends_the_gathering_batch_out_first_so_priority_and_arrival_order_hold(
    pool_store: Store,
) -> None:
    """A call with less time left than the window and its margin never waits in a batch: it goes alone, after
    the batch that was gathering, whose earlier job of the same priority runs first."""
    async with backlog(pool_store) as b:
        gathering = b.submitting(priority=5)
        await joined()
        assert b.gate.batches == []  # one of three: still gathering
        late = await b.submit(priority=5, remaining=0.02)
        early = await gathering
        assert b.gate.batches == [[early.id]]
        b.held.release.set()
        await finished(b, *b.queued)
        assert await b.run_order() == [b.first, early.id, late.id, *b.queued]


async def test_a_submit_arriving_while_a_single_submit_waits_for_a_batch_does_not_batch_ahead_of_it(
    pool_store: Store,
) -> None:
    """A batch formed behind the waiting single submit could be written before it: the later arrival goes
    single too, after the same batch, rather than gather a batch of its own."""
    async with backlog(pool_store) as b:
        b.gate.armed = True
        gathering = b.submitting()
        await joined()
        single = asyncio.create_task(b.submit(remaining=0.02))  # too little time to gather: goes alone
        await b.gate.arrived.wait()  # the single sent the gathering batch out, and waits for it
        later = b.submitting()
        await joined()
        assert b.dispatcher.intake.gathering == {}  # the later one did not start a batch behind the single
        b.gate.release.set()
        early, alone, after = await gathering, await single, await later
        assert b.gate.batches == [[early.id]]
        assert [early.state, alone.state, after.state] == ["queued"] * 3


async def test_a_caller_gone_while_its_batch_gathers_has_nothing_queued(pool_store: Store) -> None:
    async with backlog(pool_store) as b:
        gone = b.submitting()
        kept = b.submitting()
        await joined()
        gone.cancel()
        last = b.submitting()  # the third member: the batch goes out without the caller that left
        jobs = [await kept, await last]
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert b.gate.batches == [[job.id for job in jobs]]
        async with b.store.pool.acquire() as connection:
            count = await connection.fetchval("SELECT count(*) FROM pool_jobs WHERE tenant_id = 'acme'")
        assert count == 1 + 2 + 2  # the first, the two queued singles, and the two kept


async def test_a_caller_gone_after_its_batch_went_out_but_before_its_statement_has_nothing_queued(
    pool_store: Store,
) -> None:
    """As when its deadline passes while the batch waits for a connection: the statement leaves it out."""
    async with backlog(pool_store) as b:
        b.gate.armed = True
        tasks = [b.submitting() for _ in range(3)]
        await b.gate.arrived.wait()  # the batch went out, its statement not yet written
        tasks[1].cancel()
        with pytest.raises(asyncio.CancelledError):
            await tasks[1]
        b.gate.release.set()
        kept = [await tasks[0], await tasks[2]]
        (batch,) = b.gate.batches
        assert len(batch) == 3 and [job.state for job in kept] == ["queued", "queued"]
        async with b.store.pool.acquire() as connection:
            ids = {str(i) for i in await connection.fetchval("SELECT array_agg(id) FROM pool_jobs")}
        assert batch[1] not in ids and {job.id for job in kept} <= ids


async def test_a_batch_whose_answer_is_lost_fails_each_caller_and_its_jobs_stay_queued_as_a_lost_single_submit(
    pool_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with backlog(pool_store) as b:
        write = b.dispatcher.repo.jobs.submit_queued

        async def lands_then_loses_its_answer(*args: object, **kwargs: object) -> object:
            await write(*args, **kwargs)  # type: ignore[arg-type]
            raise ConnectionResetError("the store went away with the answer")

        monkeypatch.setattr(b.dispatcher.repo.jobs, "submit_queued", lands_then_loses_its_answer)
        outcomes = await asyncio.gather(*(b.submitting() for _ in range(3)), return_exceptions=True)
        assert [type(outcome) for outcome in outcomes] == [ConnectionResetError] * 3
        (batch,) = b.gate.batches
        b.held.release.set()
        assert await finished(b, *batch) == ["completed"] * 3  # they landed: they run, as a lost single submit's job


async def test_a_batched_job_can_be_cancelled_and_never_runs(pool_store: Store) -> None:
    async with backlog(pool_store) as b:
        jobs = await asyncio.gather(*(b.submitting() for _ in range(3)))
        await b.cancel(jobs[1].id)
        b.held.release.set()
        assert await finished(b, jobs[0].id, jobs[2].id) == ["completed", "completed"]
        assert await b.state(jobs[1].id) == "cancelled"
        assert jobs[1].id not in await b.run_order()


# A completion that frees the machine, against a batch of the same key: every ordering ends with the batch's
# jobs run without a scaler pass or a wait's re-read (these submits have no wait).


async def test_a_machine_freed_here_sends_the_next_submit_to_its_own_statement_which_claims_it(
    pool_store: Store,
) -> None:
    async with backlog(pool_store) as b:
        for job_id in b.queued:
            await b.cancel(job_id)
        b.held.release.set()
        await b.pool.finished(b.first)
        job = await b.submit()
        assert b.gate.batches == [] and job.state == "running" and job.worker_id == b.machine_id


async def test_a_machine_freed_before_the_batch_goes_out_sends_it_out_and_its_answer_places_the_jobs(
    pool_store: Store,
) -> None:
    async with backlog(pool_store) as b:
        gathering = [b.submitting(), b.submitting()]
        await joined()
        for job_id in b.queued:
            await b.cancel(job_id)
        b.held.release.set()  # the completion finds no next job: the machine idles, the batch goes out at once
        jobs = await asyncio.gather(*gathering)
        assert b.gate.batches == [[job.id for job in jobs]]
        assert await finished(b, *(job.id for job in jobs)) == ["completed"] * 2


async def test_a_machine_freed_after_the_batch_landed_takes_its_jobs_in_its_completion(pool_store: Store) -> None:
    async with backlog(pool_store) as b:
        jobs = await asyncio.gather(*(b.submitting() for _ in range(3)))
        for job_id in b.queued:
            await b.cancel(job_id)
        b.held.release.set()
        assert await finished(b, *(job.id for job in jobs)) == ["completed"] * 3
        assert await b.run_order() == [b.first, *(job.id for job in jobs)]


async def test_a_machine_freed_while_the_batch_is_written_unseen_by_either_statement_is_handed_the_jobs(
    pool_store: Store, database_url: str
) -> None:
    """The completion statement starts before the batch's and commits after it (held on the machine's row by
    this test), so neither sees the other: the batch's answer sees the machine busy, the completion no queued
    job. The completion knows a batch of its key was out meanwhile, and pokes placement after it answered."""
    async with backlog(pool_store) as b:
        for job_id in b.queued:
            await b.cancel(job_id)
        b.gate.armed = True
        batched = [b.submitting() for _ in range(3)]
        await b.gate.arrived.wait()  # the batch is out, not yet written
        blocker = await asyncpg.connect(database_url)
        try:
            lock = blocker.transaction()
            await lock.start()
            await blocker.execute("SELECT 1 FROM pool_machines WHERE id = $1 FOR UPDATE", b.machine_id)
            b.held.release.set()  # the completion statement starts, and waits for the machine's row

            async def completion_waits() -> bool | None:
                waiting = await blocker.fetchval(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND datname = current_database()"
                )
                return True if waiting else None

            await eventually(completion_waits, timeout=10, every=0.01)
            b.gate.release.set()
            jobs = await asyncio.gather(*batched)  # written and answered: the machine was busy as it saw it
            assert [job.state for job in jobs] == ["queued"] * 3
            await lock.commit()  # the completion lands: no next job for it, the machine idles
        finally:
            await blocker.close()
        assert await finished(b, *(job.id for job in jobs)) == ["completed"] * 3
