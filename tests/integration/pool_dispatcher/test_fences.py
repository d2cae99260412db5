"""What stands between a claim and the send: a cancel in the narrow window, a newer incarnation of the same
instance id, and a lease this process no longer trusts. In each, the payload never reaches the worker (its
journal says so) and nothing is metered. A hook holds the job between its claim and its send: the window a
dispatched claim has (here a booted machine's first job, cold-started by the submit). A warm machine's claim at
submit, and a completion's hand-off, are the job's conditional send themselves: they have no such window."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from tests.fixtures.clock import FakeClock
from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.integration.pool_dispatcher.conftest import RunningPool, caller, pool_env, sleepy_type, start_pool
from tests.integration.pool_dispatcher.seams import Seam, before_complete, before_send
from thermostat.pool.v1 import pool_pb2
from thermostat.pool_dispatcher.dispatcher import lease_name
from thermostat.store.db import Store


class HeldStep:
    """A seam (before_send, before_execute, before_complete: seams.py) that holds the next job reaching it once
    armed, until released."""

    def __init__(self) -> None:
        self.armed = False
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, job_id: str) -> None:
        if self.armed:
            self.armed = False
            self.arrived.set()
            await self.release.wait()


def reached_worker(journal: Path, payload: bytes) -> int:
    text = journal.read_text() if journal.exists() else ""
    return collections.Counter(text.split())[hashlib.sha256(payload).hexdigest()]


def journalled_type(journal: Path) -> dict[str, Any]:
    return sleepy_type(max_workers=1, env={"STRATA_WORKER_JOURNAL": str(journal)})


async def machine_idle(pool: RunningPool) -> None:
    async def idle() -> bool | None:
        workers = await pool.workers()
        return True if [(w.state, w.job_id) for w in workers] == [("warm", "")] else None

    await eventually(idle, timeout=10)


async def test_a_job_cancelled_between_its_claim_and_its_send_never_reaches_the_worker(
    pool_store: Store, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    held = HeldStep()
    async with start_pool(pool_store, pool_env([journalled_type(journal)]), seams=[before_send(held)]) as pool:
        held.armed = True
        payload = b'{"seconds": 0, "n": "cancelled in the window"}'
        job = await pool.submit(payload, machine_type="sleepy")  # no machine: the one it boots is handed the job
        await held.arrived.wait()
        assert (await pool.job(job.id)).state == "dispatched"
        cancelled = await pool.stub.CancelJob(pool_pb2.CancelJobRequest(id=job.id, build_id="b1"), metadata=caller())
        assert cancelled.state == "cancelled"
        held.release.set()
        await machine_idle(pool)  # the claim is undone on the machine: idle for the next job
        assert reached_worker(journal, payload) == 0
        after = await pool.job(job.id)
        assert after.state == "cancelled" and not after.HasField("started_at")
        assert job.id not in [e.job_id for e in await pool.usage()]
        assert (await pool.run(b"0", machine_type="sleepy"))[0] == b"slept 0"  # the machine takes the next one


@contextlib.asynccontextmanager
async def alpha(
    database_url: str, types: list[dict[str, Any]], *, seams: Sequence[Seam] = (), lease_clock: Any = None
) -> AsyncIterator[tuple[RunningPool, Store]]:
    store = await open_store(database_url, max_size=12, application_name="pool-alpha")
    try:
        env = pool_env(types, POOL_INSTANCE_ID="alpha")
        async with start_pool(store, env, seams=seams, lease_clock=lease_clock) as pool:
            yield pool, store
    finally:
        await store.close()


async def test_a_stalled_old_process_of_the_same_id_cannot_send_once_a_new_one_started(
    database_url: str, tmp_path: Path
) -> None:
    """Old alpha hands a job to the machine it booted and stalls before sending; a new alpha starts under the
    same id: it takes a new term, fails the job as restarted and takes the machine; old alpha, resuming, still
    trusts its own lease but its conditional send is refused by term, so the payload never goes out."""
    journal = tmp_path / "journal"
    held = HeldStep()
    async with alpha(database_url, [journalled_type(journal)], seams=[before_send(held)]) as (old, store):
        held.armed = True
        payload = b'{"seconds": 0, "n": "held by the old incarnation"}'
        job = await old.submit(payload, machine_type="sleepy")  # cold: the booted machine's first job
        await held.arrived.wait()
        old_term = old.dispatcher.ownership.owner.term
        async with alpha(database_url, [journalled_type(journal)]) as (new, _):
            assert new.dispatcher.ownership.owner.term == old_term + 1
            failed = await new.job(job.id)
            assert failed.state == "failed" and "restarted" in failed.error
            # the old one believes its lease: only the term fences it
            assert old.dispatcher.ownership.trusted_for_call()
            held.release.set()

            async def old_gave_up() -> bool | None:
                return True if not [t for t in old.dispatcher.tasks.running if "pool-run" in t.get_name()] else None

            await eventually(old_gave_up, timeout=10)
            assert reached_worker(journal, payload) == 0
            assert job.id not in [e.job_id for e in await new.usage()]
            assert (await new.job(job.id)).state == "failed"
            # the new incarnation serves on
            assert (await new.run(b"0", machine_type="sleepy"))[0] == b"slept 0"
        assert await store.pool.fetchval("SELECT term FROM leases WHERE name = $1", lease_name("alpha")) == old_term + 1


async def test_a_process_whose_lease_is_not_trusted_for_the_call_does_not_send_and_requeues(
    database_url: str, tmp_path: Path
) -> None:
    """Renewals hang (the lease row is locked) and the lease clock moves on: trust left is below the call
    budget, so the held job (a booted machine's first) is not sent but returned to the queue; once a renewal
    lands it runs."""
    journal = tmp_path / "journal"
    held = HeldStep()
    lease_clock = FakeClock()
    async with alpha(database_url, [journalled_type(journal)], seams=[before_send(held)], lease_clock=lease_clock) as (
        pool,
        store,
    ):
        held.armed = True
        payload = b'{"seconds": 0, "n": "not trusted"}'
        job = await pool.submit(payload, machine_type="sleepy")  # cold: the booted machine's first job
        await held.arrived.wait()
        async with store.pool.acquire() as blocker, blocker.transaction():
            await blocker.execute("SELECT 1 FROM leases WHERE name = $1 FOR UPDATE", lease_name("alpha"))
            lease_clock.advance(20)  # a 30 s lease is trusted for 24 s: 4 s left, under the 7.5 s call budget
            assert not pool.dispatcher.ownership.trusted_for_call()
            held.release.set()

            async def requeued() -> bool | None:
                return True if (await pool.job(job.id)).state == "queued" else None

            await eventually(requeued, timeout=10)
            await machine_idle(pool)
            assert reached_worker(journal, payload) == 0
        # the lock goes, the hanging renewal lands: trusted again, and the queued job runs
        await eventually(lambda: _true_or_none(pool.dispatcher.ownership.trusted_for_call()), timeout=10)
        await pool.dispatcher.placement.place()
        assert (await pool.finished(job.id)).state == "completed"
        assert reached_worker(journal, payload) == 1


async def _true_or_none(value: bool) -> bool | None:
    return True if value else None


async def test_a_job_a_warm_machine_takes_at_submit_is_running_from_the_answer_and_never_passes_mark_sent(
    pool_store: Store, tmp_path: Path
) -> None:
    """The submit's claim is the job's conditional send: the answer already says running (started), there is no
    dispatched step for a cancel to land in, and the before_send seam (which precedes mark_sent) never sees it. As
    safe as mark_sent's check: the job's id is new with the statement, so no cancel can name it before the answer,
    and a lapsing lease is caught by the trust check made before the statement (jobs.sql `submit`)."""
    journal = tmp_path / "journal"
    sends: list[str] = []

    async def record_send(job_id: str) -> None:
        sends.append(job_id)

    async with start_pool(pool_store, pool_env([journalled_type(journal)]), seams=[before_send(record_send)]) as pool:
        await pool.run(b"0", machine_type="sleepy")  # a warm machine (its first job, cold, went through mark_sent)
        assert len(sends) == 1
        payload = b'{"seconds": 0, "n": "taken at submit"}'
        job = await pool.submit(payload, machine_type="sleepy")
        assert job.state == "running" and job.worker_id and job.HasField("started_at")
        assert (await pool.finished(job.id)).state == "completed"
        assert len(sends) == 1 and job.id not in sends
        assert reached_worker(journal, payload) == 1
        assert [e.job_id for e in await pool.usage()].count(job.id) == 1


async def test_a_submit_while_the_lease_is_not_trusted_claims_the_warm_machine_dispatched_and_requeues(
    database_url: str, tmp_path: Path
) -> None:
    """Renewals hang and the lease clock moves on before the submit: its claim of the warm machine is only
    dispatched (not sent), so mark_sent's own check requeues it and it never reaches the worker meanwhile; once
    a renewal lands it runs, once."""
    journal = tmp_path / "journal"
    lease_clock = FakeClock()
    sends: list[str] = []

    async def record_send(job_id: str) -> None:
        sends.append(job_id)

    async with alpha(
        database_url, [journalled_type(journal)], seams=[before_send(record_send)], lease_clock=lease_clock
    ) as (pool, store):
        await pool.run(b"0", machine_type="sleepy")  # a warm machine
        payload = b'{"seconds": 0, "n": "submitted untrusted"}'
        async with store.pool.acquire() as blocker, blocker.transaction():
            await blocker.execute("SELECT 1 FROM leases WHERE name = $1 FOR UPDATE", lease_name("alpha"))
            lease_clock.advance(20)  # 4 s of trust left, under the 7.5 s call budget
            assert not pool.dispatcher.ownership.trusted_for_call()
            job = await pool.submit(payload, machine_type="sleepy")
            assert job.state == "dispatched" and job.worker_id and not job.HasField("started_at")

            async def requeued() -> bool | None:
                return True if (await pool.job(job.id)).state == "queued" else None

            await eventually(requeued, timeout=10)
            assert job.id in sends  # it went the way of a dispatched claim: mark_sent's check refused it
            await machine_idle(pool)
            assert reached_worker(journal, payload) == 0
        await eventually(lambda: _true_or_none(pool.dispatcher.ownership.trusted_for_call()), timeout=10)
        await pool.dispatcher.placement.place()
        assert (await pool.finished(job.id)).state == "completed"
        assert reached_worker(journal, payload) == 1
        assert [e.job_id for e in await pool.usage()].count(job.id) == 1


async def test_a_completion_hands_its_machine_the_next_job_running_and_sends_it_without_a_second_claim(
    pool_store: Store, tmp_path: Path
) -> None:
    """The completion is the queued job's conditional send: the job is running from that statement on, with
    no dispatched step for a cancel to land in, and the before_send seam (which precedes mark_sent) never
    sees it. Its claim is fenced by owner and term as mark_sent's is, and the payload goes out right after the
    answer (jobs.sql `complete`)."""
    journal = tmp_path / "journal"
    held, sends = HeldStep(), []

    async def record_send(job_id: str) -> None:
        sends.append(job_id)

    seams = [before_complete(held), before_send(record_send)]
    async with start_pool(pool_store, pool_env([journalled_type(journal)]), seams=seams) as pool:
        await pool.run(b"0", machine_type="sleepy")  # a warm machine
        held.armed = True
        first = await pool.submit(b'{"seconds": 0, "n": "first"}', machine_type="sleepy")
        await held.arrived.wait()  # the first ran and waits to complete: the machine is busy
        queued_payload = b'{"seconds": 0, "n": "handed over by the completion"}'
        queued = await pool.submit(queued_payload, machine_type="sleepy")
        assert (await pool.job(queued.id)).state == "queued"
        sends.clear()
        held.release.set()
        assert (await pool.finished(queued.id)).state == "completed"
        assert (await pool.finished(first.id)).state == "completed"
        assert sends == []  # no mark_sent: the hand-off was the send
        assert reached_worker(journal, queued_payload) == 1
        assert [e.job_id for e in await pool.usage()].count(queued.id) == 1


async def test_a_completion_while_the_lease_is_not_trusted_hands_over_nothing_it_would_send(
    database_url: str, tmp_path: Path
) -> None:
    """The lease is not trusted for a call when the completion runs: the queued job it hands the machine is
    only dispatched, so the send's own check requeues it, and it never reaches the worker meanwhile; once a
    renewal lands it runs."""
    journal = tmp_path / "journal"
    held = HeldStep()
    lease_clock = FakeClock()
    async with alpha(
        database_url, [journalled_type(journal)], seams=[before_complete(held)], lease_clock=lease_clock
    ) as (pool, store):
        await pool.run(b"0", machine_type="sleepy")
        held.armed = True
        first = await pool.submit(b'{"seconds": 0, "n": "first"}', machine_type="sleepy")
        await held.arrived.wait()
        payload = b'{"seconds": 0, "n": "queued behind an untrusted completion"}'
        job = await pool.submit(payload, machine_type="sleepy")
        assert (await pool.job(job.id)).state == "queued"
        async with store.pool.acquire() as blocker, blocker.transaction():
            await blocker.execute("SELECT 1 FROM leases WHERE name = $1 FOR UPDATE", lease_name("alpha"))
            lease_clock.advance(20)  # 4 s of trust left, under the 7.5 s call budget
            assert not pool.dispatcher.ownership.trusted_for_call()
            held.release.set()
            assert (await pool.finished(first.id)).state == "completed"

            async def requeued() -> bool | None:
                return True if not [t for t in pool.dispatcher.tasks.running if "pool-run" in t.get_name()] else None

            await eventually(requeued, timeout=10)
            assert (await pool.job(job.id)).state == "queued"
            await machine_idle(pool)
            assert reached_worker(journal, payload) == 0
        await eventually(lambda: _true_or_none(pool.dispatcher.ownership.trusted_for_call()), timeout=10)
        await pool.dispatcher.placement.place()
        assert (await pool.finished(job.id)).state == "completed"
        assert reached_worker(journal, payload) == 1
