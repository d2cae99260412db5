"""The pool's jobs in Postgres (jobs.sql): submit and its warm claim, group commit, completion and the machine's next
job, the conditional send, requeue, hand-back, cancel, and the reads callers make.

Every statement that writes an owned row takes the process's `Owner` (instance id and lease term) and matches both,
so a process that stalled past its lease cannot write over rows another process took over. Which warm machine a
submitted job gets is decided in jobs.sql `submit` (the rule: thermostat.policy.pool, tested against it by
tests/integration/pool_dispatcher/test_warm_choice.py); which queued job a freed machine takes next, in `complete`
and `take_next`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import asyncpg

from thermostat.policy.pool.hand_back import Refusal
from thermostat.store.connections import borrow
from thermostat.store.sql import load_sql

from .values import (
    Assignment,
    CancelResult,
    Completion,
    Finished,
    HandedBack,
    JobView,
    Owner,
    QueuedBatch,
    QueuedSubmit,
    StoredResult,
    Submitted,
    UsageView,
    one,
)
from .writes import CompletionWrite, SubmitWrite

Q = load_sql(Path(__file__).with_name("jobs.sql"))


class JobRepository:
    """The pool_jobs rows, and the machine hand-offs a job's own statement makes."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def submit(self, write: SubmitWrite) -> Submitted:
        """Insert the job and claim a warm machine for it; with `send_now` a claimed job is running (this
        statement is its conditional send), else dispatched (sent after mark_sent)."""
        async with borrow(self.pool) as c:
            row = one(await c.fetchrow(*Q.bind("submit", **write.params())))
        job = JobView.from_row(row)
        assignment = None
        if job.state in ("dispatched", "running") and job.worker_id is not None:
            assignment = Assignment(
                job_id=job.id,
                machine_id=job.worker_id,
                payload=write.payload,
                timeout_seconds=write.timeout_seconds,
                trace=dict(write.trace),
                submitted_at=job.submitted_at,
                endpoint=row["endpoint"],
                token=row["token"],
                sent=job.state == "running",
            )
        return Submitted(
            job=job,
            assignment=assignment,
            live_machines=row["live"] or 0,
            idle_machines=row["idle"] or 0,
            queued_jobs=row["queued"] or 0,
        )

    async def submit_queued(
        self,
        tenant_id: str,
        machine_type: str,
        jobs: Sequence[QueuedSubmit],
        *,
        count_queued: int = 0,
        wanted: Callable[[str], bool] | None = None,
    ) -> QueuedBatch | None:
        """Queue several jobs of one tenant and type in one statement, in the order given (no claim: see
        thermostat.policy.pool.submit_batch). The jobs come back in that order. `wanted(job_id)` is asked of each
        once a connection is in hand, right before the statement: a job whose caller left meanwhile (its deadline
        passed while the batch waited for a connection) is not queued. None: no job was still wanted."""
        async with borrow(self.pool) as c:
            if wanted is not None:
                jobs = [job for job in jobs if wanted(job.job_id)]
                if not jobs:
                    return None
            rows = await c.fetch(
                *Q.bind(
                    "submit_queued",
                    tenant_id=tenant_id,
                    machine_type=machine_type,
                    job_ids=[uuid.UUID(job.job_id) for job in jobs],
                    priorities=[job.priority for job in jobs],
                    session_ids=[job.session_id for job in jobs],
                    timeouts=[job.timeout_seconds for job in jobs],
                    payloads=[job.payload for job in jobs],
                    traceparents=[job.trace.get("traceparent") for job in jobs],
                    tracestates=[job.trace.get("tracestate") for job in jobs],
                    done_channels=[job.done_channel for job in jobs],
                    count_queued=count_queued,
                )
            )
        by_id = {str(row["id"]): row for row in rows}
        if len(by_id) != len(jobs):
            raise RuntimeError("the batch statement did not queue every job")
        first = rows[0]
        return QueuedBatch(
            jobs=tuple(JobView.from_row(by_id[job.job_id]) for job in jobs),
            live_machines=first["live"] or 0,
            idle_machines=first["idle"] or 0,
            queued_jobs=first["queued"] or 0,
        )

    async def complete(self, write: CompletionWrite) -> Completion:
        """The terminal state, the usage event and the machine's next job in one statement; with `send_next` the
        next job is handed over running (this statement is its conditional send), else dispatched."""
        async with borrow(self.pool) as c:
            row = one(await c.fetchrow(*Q.bind("complete", **write.params())))
        w = write
        return Completion.from_row(
            row, job_id=w.job_id, machine_id=w.machine_id, tenant_id=w.tenant_id, machine_type=w.machine_type
        )

    async def take_next(self, machine_id: str, image: str, owner: Owner) -> Assignment | None:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(
                *Q.bind("take_next", machine_id=uuid.UUID(machine_id), image=image, **owner.params())
            )
        return (
            None if row is None else Assignment.from_row(row, machine_id, endpoint=row["endpoint"], token=row["token"])
        )

    async def mark_sent(self, job_id: str, machine_id: str, owner: Owner) -> tuple[bool, bool]:
        """(sent, freed): running, right before the send; else a cancel or a reclaim won, and `freed` says
        whether the machine is still this process's and idle again."""
        async with borrow(self.pool) as c:
            sent = Q.bind("mark_sent", job_id=uuid.UUID(job_id), machine_id=uuid.UUID(machine_id), **owner.params())
            row = one(await c.fetchrow(*sent))
        return bool(row["sent"]), bool(row["freed"])

    async def requeue_unsent(self, job_id: str, machine_id: str, owner: Owner, *, marked: bool = False) -> bool:
        """The dispatched job back in the queue in its place, the machine idle with it; False when the job was no
        longer ours to requeue (its machine is then freed only if the job is no longer live on it: see the SQL).
        `marked`: the caller's own mark_sent made it running and nothing was sent, so running is requeued too."""
        async with borrow(self.pool) as c:
            requeue = Q.bind(
                "requeue_unsent",
                job_id=uuid.UUID(job_id),
                machine_id=uuid.UUID(machine_id),
                marked=marked,
                **owner.params(),
            )
            row = one(await c.fetchrow(*requeue))
        return bool(row["requeued"])

    async def refused_by(self, job_id: str) -> tuple[Refusal, ...]:
        """The machines that refused the job before now and handed it back (thermostat.policy.pool.hand_back)."""
        async with borrow(self.pool) as c:
            raw = await c.fetchval(*Q.bind("refused_by", job_id=uuid.UUID(job_id)))
        return tuple(Refusal(machine_id=r["machine"], reason=r["reason"]) for r in json.loads(raw or "[]"))

    async def hand_back(self, job_id: str, machine_id: str, owner: Owner, refusal: Refusal) -> HandedBack:
        """Retire the machine that refused the running job and queue the job again in its place (see the SQL)."""
        async with borrow(self.pool) as c:
            row = one(
                await c.fetchrow(
                    *Q.bind(
                        "hand_back",
                        job_id=uuid.UUID(job_id),
                        machine_id=uuid.UUID(machine_id),
                        reason=refusal.reason,
                        last_error=f"could not be reached with job {job_id}: {refusal.reason}",
                        **owner.params(),
                    )
                )
            )
        return HandedBack(handed_back=bool(row["handed_back"]), provider_id=row["provider_id"])

    async def abandon_running(
        self, job_id: str, machine_id: str, owner: Owner, reason: str
    ) -> tuple[bool, bool, str | None]:
        """Fail a running job no task drives and retire its machine (see the SQL); (failed, retired, provider id)."""
        async with borrow(self.pool) as c:
            abandon = Q.bind(
                "abandon_running",
                job_id=uuid.UUID(job_id),
                machine_id=uuid.UUID(machine_id),
                reason=reason,
                **owner.params(),
            )
            row = one(await c.fetchrow(*abandon))
        return bool(row["failed"]), bool(row["retired"]), row["provider_id"]

    async def cancel(self, job_id: str, tenant_id: str, build_id: str) -> CancelResult | None:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(*Q.bind("cancel", job_id=uuid.UUID(job_id), tenant_id=tenant_id, build_id=build_id))
        return None if row is None else CancelResult.from_row(row)

    async def watch_job(self, job_id: str, tenant_id: str) -> tuple[JobView | None, bool]:
        """Mark the job watched (its completion notifies every process from now on) and read it: the job (None
        when it is not the tenant's) and whether this call marked it (the first mark locks the row a moment)."""
        async with borrow(self.pool) as c:
            row = await c.fetchrow(*Q.bind("watch_job", job_id=uuid.UUID(job_id), tenant_id=tenant_id))
        return (None, False) if row is None else (JobView.from_row(row), bool(row["marked"]))

    async def in_flight(self, owner: Owner) -> int:
        """How many jobs this process has dispatched or running (a shutdown's drain waits for none)."""
        async with borrow(self.pool) as c:
            count: int = await c.fetchval(*Q.bind("in_flight", **owner.params()))
        return count

    async def get_job(self, job_id: str, tenant_id: str) -> JobView | None:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(*Q.bind("get_job", job_id=uuid.UUID(job_id), tenant_id=tenant_id))
        return None if row is None else JobView.from_row(row)

    async def get_job_result(self, job_id: str, tenant_id: str) -> Finished | None:
        """The job and its result (when it has one) in one read; None when it is not the tenant's."""
        async with borrow(self.pool) as c:
            row = await c.fetchrow(*Q.bind("get_job_result", job_id=uuid.UUID(job_id), tenant_id=tenant_id))
        if row is None:
            return None
        return Finished(job=JobView.from_row(row), result=None if row["result"] is None else bytes(row["result"]))

    async def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobView]:
        """The jobs of `job_ids` still in the store, by id, whatever their tenant (the caller checks it)."""
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("get_jobs", job_ids=[uuid.UUID(j) for j in job_ids]))
        return {str(r["id"]): JobView.from_row(r) for r in rows}

    async def get_result(self, job_id: str, tenant_id: str) -> StoredResult | None:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(*Q.bind("get_result", job_id=uuid.UUID(job_id), tenant_id=tenant_id))
        if row is None:
            return None
        return StoredResult.from_row(row)

    async def job_states(self, job_ids: Sequence[str]) -> dict[str, str]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("jobs_by_id", job_ids=[uuid.UUID(j) for j in job_ids]))
        return {str(r["id"]): r["state"] for r in rows}

    async def list_usage(self, tenant_id: str | None, after_position: int, limit: int) -> list[UsageView]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("list_usage", tenant_id=tenant_id, after=after_position, limit=limit))
        return [UsageView.from_row(r) for r in rows]

    async def live_job_counts(self) -> dict[str, int]:
        """Jobs queued, dispatched and running (states absent have none)."""
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("live_job_counts"))
        return {r["state"]: r["jobs"] for r in rows}
