"""PoolRepository: the one module that owns the pool dispatcher's SQL (queries.sql), returning frozen values.

Every statement that writes an owned row takes the process's `Owner` (instance id and lease term) and
matches both, so a process that stalled past its lease cannot write over rows another process took over.
Payloads and results travel as bytes; the machine token is read only where a worker call needs it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from thermostat.policy.pool.hand_back import Refusal, handed_to_machines
from thermostat.policy.pool.machines import Machine, MachineState
from thermostat.policy.pool.queue_order import QueuedJob
from thermostat.store.connections import borrow
from thermostat.store.sql import load_sql

Conn = asyncpg.Connection | PoolConnectionProxy
Q = load_sql(Path(__file__).with_name("queries.sql"))

PLACEMENT_LOCK = "lock_placement"

JOBS_DONE = "pool_jobs_done"
"""Every process's channel: a job watched by a WaitJob, or failed or cancelled outside its runner, ended."""


def job_done_channel(instance: str) -> str:
    """The channel of one instance's sync waits (a completion elsewhere notifies only the waiting process). Hashed:
    an instance id may be longer than a channel name (63 bytes) and hold any character."""
    return f"{JOBS_DONE}_{hashlib.blake2b(instance.encode(), digest_size=8).hexdigest()}"


@dataclass(frozen=True, slots=True)
class Owner:
    """This process as the owner of rows: its instance id and the term of its instance lease."""

    instance: str
    term: int


@dataclass(frozen=True, slots=True, kw_only=True)
class JobView:
    """A job as callers see it: never the payload, result, owner, host or credential."""

    id: str
    tenant_id: str
    machine_type: str
    state: str
    submitted_at: datetime
    priority: int
    session_id: str | None
    worker_id: str | None
    timeout_seconds: float
    error: str | None
    started_at: datetime | None
    completed_at: datetime | None
    has_result: bool
    handed_back: int = 0  # machines that could not be reached with it and handed it back (issue 29)

    @property
    def handed_to_machines(self) -> int:
        """How many machines the job was handed to (thermostat.policy.pool.hand_back)."""
        return handed_to_machines(refused=self.handed_back, on_machine=self.worker_id is not None)


@dataclass(frozen=True, slots=True, kw_only=True)
class HandedBack:
    """A hand-back's answer: whether the job is queued again (else a cancel or a reclaim won) and, its machine
    being retired, where to stop it (None: no provider machine, or the machine is no longer this process's)."""

    handed_back: bool
    provider_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    """A job handed to a machine of this process: what to send, and where (the token never leaves here)."""

    job_id: str
    machine_id: str
    payload: bytes
    timeout_seconds: float
    trace: dict[str, str]
    submitted_at: datetime
    endpoint: str | None = None
    token: str | None = None
    sent: bool = False  # already running: its claim was its conditional send (no mark_sent before the call)


@dataclass(frozen=True, slots=True, kw_only=True)
class Submitted:
    """A submit's outcome: the job, its assignment when a warm machine took it, and what the submit's
    statement saw of the tenant's machines of the type (for placement_may_act) and of its queue (counted up to
    the submit's `count_queued`, for thermostat.policy.pool.submit_batch)."""

    job: JobView
    assignment: Assignment | None
    live_machines: int
    idle_machines: int
    queued_jobs: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedSubmit:
    """One job of a batch submit (submit_queued): what a single submit would write for it, never claimed."""

    job_id: str
    priority: int
    session_id: str | None
    timeout_seconds: float
    payload: bytes
    trace: Mapping[str, str]
    done_channel: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedBatch:
    """A batch submit's outcome: its jobs (queued, in the order given), and what the statement saw of the
    tenant's machines of the type and of its queue before the batch, as a single submit reports them."""

    jobs: tuple[JobView, ...]
    live_machines: int
    idle_machines: int
    queued_jobs: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished:
    """A job as a sync wait answers it: the job, and its result bytes when known (None: not read). From another
    process's notification (a completed job with its result) the job is the submitted view in its terminal
    state: a completed answer names only the job's id and state."""

    job: JobView
    result: bytes | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    job_state: str | None  # None: the job was no longer ours (reclaimed), nothing was written
    job: JobView | None  # the finished job as callers see it (None with job_state)
    machine_state: str | None
    provider_id: str | None
    usage_position: int | None
    next_job: Assignment | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineHold:
    """A machine of this process as a write whose answer was lost left it: its state, and the live job it
    holds under this owner (`job_state` running or dispatched; None with `job`)."""

    machine_state: str
    provider_id: str | None
    job_state: str | None
    job: Assignment | None


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetMachine:
    """A machine row as the policies see it, plus its assigned job."""

    machine: Machine
    job_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnMachine:
    machine: Machine
    provider_id: str | None
    endpoint: str | None
    region: str | None
    backend: str = "local"
    job_id: str | None = None  # the job it holds (busy)


@dataclass(frozen=True, slots=True, kw_only=True)
class StartingMachine:
    """A starting machine of this process, with what its boot needs; `started`: a provider start is recorded."""

    machine: Machine
    started: bool
    token: str
    backend: str
    job_id: str | None  # the job handed to it (dispatched), if any
    trace: dict[str, str]  # that job's trace headers


@dataclass(frozen=True, slots=True, kw_only=True)
class Demand:
    tenant_id: str
    machine_type: str
    queued: int
    head: QueuedJob


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerView:
    id: str
    tenant_id: str
    machine_type: str
    image: str
    backend: str
    state: str
    region: str | None
    session_id: str | None
    job_id: str | None
    created_at: datetime
    warm_at: datetime | None
    last_active_at: datetime | None
    health_misses: int


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageView:
    position: int
    job_id: str
    tenant_id: str
    machine_type: str
    worker_id: str
    terminal_state: str
    duration_seconds: float
    started_at: datetime
    ended_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelResult:
    prior: str
    worker_id: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResult:
    state: str
    error: str | None
    result: bytes | None


def _one(row: asyncpg.Record | None) -> asyncpg.Record:
    """The row a statement that always returns one returned."""
    if row is None:
        raise RuntimeError("the statement returned no row")
    return row


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _job(row: asyncpg.Record) -> JobView:
    return JobView(
        id=str(row["id"]),
        tenant_id=row["tenant_id"],
        machine_type=row["machine_type"],
        state=row["state"],
        submitted_at=row["submitted_at"],
        priority=row["priority"],
        session_id=row["session_id"],
        worker_id=_text(row["worker_id"]),
        timeout_seconds=row["timeout_seconds"],
        error=row["error"],
        started_at=row["started_at"],
        completed_at=row["completed_at"],
        has_result=row["has_result"],
        handed_back=row.get("handed_back") or 0,  # a statement that names no column: a new job, never handed back
    )


def parse_job_done(payload: str) -> tuple[str, bytes | None]:
    """A job-done notification (either channel): the job id, and the result when it announces a completion with it."""
    job_id, _, announced = payload.partition(" ")
    state, _, encoded = announced.partition(" ")
    if state != "completed":
        return job_id, None
    return job_id, base64.b64decode(encoded)  # PostgreSQL breaks base64 into lines: the decoder skips them


def _assignment(
    row: asyncpg.Record,
    machine_id: str,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    sent: bool = False,
) -> Assignment:
    trace = {k: row[k] for k in ("traceparent", "tracestate") if row[k]}
    return Assignment(
        job_id=str(row["id"]),
        machine_id=machine_id,
        payload=bytes(row["payload"] or b""),
        timeout_seconds=row["timeout_seconds"],
        trace=trace,
        submitted_at=row["submitted_at"],
        endpoint=endpoint,
        token=token,
        sent=sent,
    )


def _machine(row: asyncpg.Record) -> Machine:
    return Machine(
        id=str(row["id"]),
        tenant_id=row["tenant_id"],
        machine_type=row["machine_type"],
        image=row["image"],
        state=MachineState(row["state"]),
        last_session_id=row["session_id"],
        health_misses=row["health_misses"],
        cool_down_seconds=row["cool_down_seconds"],
    )


class Subscription:
    """A LISTEN on a connection of its own, held until closed; NOTIFY is a hint (callers re-read anyway)."""

    def __init__(
        self, pool: asyncpg.Pool, connection: PoolConnectionProxy, handlers: Mapping[str, Callable[..., None]]
    ) -> None:
        self._pool = pool
        self._connection = connection
        self._handlers = dict(handlers)

    def is_closed(self) -> bool:
        try:
            return self._connection.is_closed()
        except asyncpg.InterfaceError:  # the pool took the connection back when it was lost (a store outage)
            return True

    async def close(self) -> None:
        try:
            for channel, handler in self._handlers.items():
                await self._connection.remove_listener(channel, handler)
        finally:
            await self._pool.release(self._connection)


class PoolRepository:
    """The pool's rows in Postgres (see queries.sql for what each statement guarantees)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def listen(self, handlers: Mapping[str, Callable[[str], None]]) -> Subscription:
        """LISTEN to each channel, calling its handler with the notification's payload."""
        connection = await self.pool.acquire()
        callbacks: dict[str, Callable[..., None]] = {}
        try:
            for channel, handler in handlers.items():

                def callback(
                    _c: object, _pid: int, _channel: str, payload: object, handler: Callable[[str], None] = handler
                ) -> None:
                    handler(str(payload))

                await connection.add_listener(channel, callback)
                callbacks[channel] = callback
        except BaseException:
            await self.pool.release(connection)
            raise
        return Subscription(self.pool, connection, callbacks)

    async def submit(
        self,
        *,
        job_id: str,
        tenant_id: str,
        machine_type: str,
        image: str,
        priority: int,
        session_id: str | None,
        timeout_seconds: float,
        payload: bytes,
        owner: Owner,
        trace: dict[str, str],
        send_now: bool,
        done_channel: str | None = None,
        count_queued: int = 0,
    ) -> Submitted:
        """Insert the job and claim a warm machine for it; with `send_now` a claimed job is running (this
        statement is its conditional send), else dispatched (sent after mark_sent). `done_channel`: where a
        completion in another process tells this process's sync wait (None: nothing waits)."""
        async with borrow(self.pool) as c:
            row = _one(
                await c.fetchrow(
                    Q["submit"],
                    uuid.UUID(job_id),
                    tenant_id,
                    machine_type,
                    image,
                    priority,
                    session_id,
                    timeout_seconds,
                    payload,
                    owner.instance,
                    owner.term,
                    trace.get("traceparent"),
                    trace.get("tracestate"),
                    send_now,
                    done_channel,
                    count_queued,
                )
            )
        job = _job(row)
        assignment = None
        if job.state in ("dispatched", "running") and job.worker_id is not None:
            assignment = Assignment(
                job_id=job.id,
                machine_id=job.worker_id,
                payload=payload,
                timeout_seconds=timeout_seconds,
                trace=dict(trace),
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
                Q["submit_queued"],
                tenant_id,
                machine_type,
                [uuid.UUID(job.job_id) for job in jobs],
                [job.priority for job in jobs],
                [job.session_id for job in jobs],
                [job.timeout_seconds for job in jobs],
                [job.payload for job in jobs],
                [job.trace.get("traceparent") for job in jobs],
                [job.trace.get("tracestate") for job in jobs],
                [job.done_channel for job in jobs],
                count_queued,
            )
        by_id = {str(row["id"]): row for row in rows}
        if len(by_id) != len(jobs):
            raise RuntimeError("the batch statement did not queue every job")
        first = rows[0]
        return QueuedBatch(
            jobs=tuple(_job(by_id[job.job_id]) for job in jobs),
            live_machines=first["live"] or 0,
            idle_machines=first["idle"] or 0,
            queued_jobs=first["queued"] or 0,
        )

    async def complete(
        self,
        *,
        job_id: str,
        machine_id: str,
        state: str,
        result: bytes | None,
        error: str | None,
        duration_seconds: float,
        owner: Owner,
        retire: bool,
        take_next: bool,
        send_next: bool,
        tenant_id: str,
        machine_type: str,
        notified_result_bytes: int,
        channel: str,
    ) -> Completion:
        """The terminal state, the usage event and the machine's next job in one statement; with `send_next` the
        next job is handed over running (this statement is its conditional send), else dispatched. `channel`:
        this process's own (its sync waits are woken here, not notified)."""
        async with borrow(self.pool) as c:
            row = _one(
                await c.fetchrow(
                    Q["complete"],
                    uuid.UUID(job_id),
                    uuid.UUID(machine_id),
                    state,
                    result,
                    error,
                    duration_seconds,
                    owner.instance,
                    owner.term,
                    retire,
                    take_next,
                    tenant_id,
                    machine_type,
                    send_next,
                    notified_result_bytes,
                    channel,
                )
            )
        next_job = None if row["id"] is None else _assignment(row, machine_id, sent=bool(row["sent"]))
        finished = None
        if row["job_state"] is not None:
            finished = JobView(
                id=job_id,
                tenant_id=tenant_id,
                machine_type=machine_type,
                state=row["job_state"],
                submitted_at=row["job_submitted_at"],
                priority=row["job_priority"],
                session_id=row["job_session_id"],
                worker_id=machine_id,
                timeout_seconds=row["job_timeout_seconds"],
                error=row["job_error"],
                started_at=row["job_started_at"],
                completed_at=row["job_completed_at"],
                has_result=row["job_has_result"],
                handed_back=row["job_handed_back"],
            )
        return Completion(
            job_state=row["job_state"],
            job=finished,
            machine_state=row["machine_state"],
            provider_id=row["provider_id"],
            usage_position=row["position"],
            next_job=next_job,
        )

    async def take_next(self, machine_id: str, image: str, owner: Owner) -> Assignment | None:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(Q["take_next"], uuid.UUID(machine_id), owner.instance, owner.term, image)
        return None if row is None else _assignment(row, machine_id, endpoint=row["endpoint"], token=row["token"])

    async def machine_address(self, machine_id: str) -> tuple[str | None, str] | None:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(Q["machine_address"], uuid.UUID(machine_id))
        return None if row is None else (row["endpoint"], row["token"])

    # placement: the caller holds one transaction under the placement lock
    async def lock_placement(self, c: Conn) -> None:
        await c.execute(Q[PLACEMENT_LOCK])

    async def demand(self, c: Conn) -> list[Demand]:
        rows = await c.fetch(Q["demand"])
        return [
            Demand(
                tenant_id=r["tenant_id"],
                machine_type=r["machine_type"],
                queued=r["queued"],
                head=QueuedJob(id=str(r["id"]), priority=r["priority"], sequence=r["queue_seq"]),
            )
            for r in rows
        ]

    async def fleet(self, c: Conn | None = None) -> list[FleetMachine]:
        if c is None:
            async with borrow(self.pool) as own:
                rows = await own.fetch(Q["fleet"])
        else:
            rows = await c.fetch(Q["fleet"])
        return [FleetMachine(machine=_machine(r), job_id=_text(r["job_id"])) for r in rows]

    async def insert_machine(
        self,
        c: Conn,
        *,
        machine_id: str,
        tenant_id: str,
        machine_type: str,
        image: str,
        backend: str,
        token: str,
        owner: Owner,
        cool_down_seconds: float,
        assign_job: bool,
    ) -> tuple[str | None, dict[str, str]]:
        """Insert a starting machine; returns the id of the queued job assigned to it, if any, and its trace."""
        row = _one(
            await c.fetchrow(
                Q["insert_machine"],
                uuid.UUID(machine_id),
                tenant_id,
                machine_type,
                image,
                backend,
                token,
                owner.instance,
                owner.term,
                assign_job,
                cool_down_seconds,
            )
        )
        return _text(row["job_id"]), {k: row[k] for k in ("traceparent", "tracestate") if row[k]}

    async def record_started(
        self, machine_id: str, *, provider_id: str, endpoint: str, region: str | None, owner: Owner
    ) -> bool:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(
                Q["record_started"], uuid.UUID(machine_id), provider_id, endpoint, region, owner.instance, owner.term
            )
        return row is not None

    async def machine_ready(self, machine_id: str, owner: Owner) -> tuple[str | None, Assignment | None]:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(Q["machine_ready"], uuid.UUID(machine_id), owner.instance, owner.term)
        if row is None:
            return None, None
        return row["machine_state"], (None if row["id"] is None else _assignment(row, machine_id))

    async def boot_failed(self, machine_id: str, owner: Owner, reason: str) -> dict[str, str]:
        """Forget the machine; its dispatched job's new state by id (queued carrying `reason`, or failed: its
        type is gone)."""
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["boot_failed"], uuid.UUID(machine_id), owner.instance, owner.term, reason)
        return {str(r["id"]): r["state"] for r in rows}

    async def mark_sent(self, job_id: str, machine_id: str, owner: Owner) -> tuple[bool, bool]:
        """(sent, freed): running, right before the send; else a cancel or a reclaim won, and `freed` says
        whether the machine is still this process's and idle again."""
        async with borrow(self.pool) as c:
            row = _one(
                await c.fetchrow(Q["mark_sent"], uuid.UUID(job_id), uuid.UUID(machine_id), owner.instance, owner.term)
            )
        return bool(row["sent"]), bool(row["freed"])

    async def requeue_unsent(self, job_id: str, machine_id: str, owner: Owner, *, marked: bool = False) -> bool:
        """The dispatched job back in the queue in its place, the machine idle with it; False when the job was no
        longer ours to requeue (its machine is then freed only if the job is no longer live on it: see the SQL).
        `marked`: the caller's own mark_sent made it running and nothing was sent, so running is requeued too."""
        async with borrow(self.pool) as c:
            row = _one(
                await c.fetchrow(
                    Q["requeue_unsent"], uuid.UUID(job_id), uuid.UUID(machine_id), owner.instance, owner.term, marked
                )
            )
        return bool(row["requeued"])

    async def refused_by(self, job_id: str) -> tuple[Refusal, ...]:
        """The machines that refused the job before now and handed it back (thermostat.policy.pool.hand_back)."""
        async with borrow(self.pool) as c:
            raw = await c.fetchval(Q["refused_by"], uuid.UUID(job_id))
        return tuple(Refusal(machine_id=r["machine"], reason=r["reason"]) for r in json.loads(raw or "[]"))

    async def hand_back(self, job_id: str, machine_id: str, owner: Owner, refusal: Refusal) -> HandedBack:
        """Retire the machine that refused the running job and queue the job again in its place (see the SQL)."""
        async with borrow(self.pool) as c:
            row = _one(
                await c.fetchrow(
                    Q["hand_back"],
                    uuid.UUID(job_id),
                    uuid.UUID(machine_id),
                    owner.instance,
                    owner.term,
                    refusal.reason,
                    f"could not be reached with job {job_id}: {refusal.reason}",
                )
            )
        return HandedBack(handed_back=bool(row["handed_back"]), provider_id=row["provider_id"])

    async def abandon_running(
        self, job_id: str, machine_id: str, owner: Owner, reason: str
    ) -> tuple[bool, bool, str | None]:
        """Fail a running job no task drives and retire its machine (see the SQL); (failed, retired, provider id)."""
        async with borrow(self.pool) as c:
            row = _one(
                await c.fetchrow(
                    Q["abandon_running"], uuid.UUID(job_id), uuid.UUID(machine_id), owner.instance, owner.term, reason
                )
            )
        return bool(row["failed"]), bool(row["retired"]), row["provider_id"]

    async def machine_hold(self, machine_id: str, owner: Owner) -> MachineHold | None:
        """The machine and its live job under this owner (None: the machine is no longer ours)."""
        async with borrow(self.pool) as c:
            row = await c.fetchrow(Q["machine_hold"], uuid.UUID(machine_id), owner.instance, owner.term)
        if row is None:
            return None
        job = None
        if row["id"] is not None:
            job = _assignment(
                row, machine_id, endpoint=row["endpoint"], token=row["token"], sent=row["job_state"] == "running"
            )
        return MachineHold(
            machine_state=row["machine_state"], provider_id=row["provider_id"], job_state=row["job_state"], job=job
        )

    async def known_machines(self) -> tuple[list[str], list[str]]:
        """(machine ids, provider ids) of every machine row, whichever process owns it."""
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["known_machines"])
        return [row["id"] for row in rows], [row["provider_id"] for row in rows if row["provider_id"] is not None]

    async def record_orphan_stop(
        self, *, backend: str, provider_id: str, name: str, machine_id: str, machine_type: str, stopped_by: str
    ) -> None:
        async with borrow(self.pool) as c:
            await c.execute(
                Q["record_orphan_stop"], backend, provider_id, name, uuid.UUID(machine_id), stopped_by, machine_type
            )

    async def machine_backend(self, machine_id: str) -> str | None:
        async with borrow(self.pool) as c:
            backend: str | None = await c.fetchval(Q["machine_backend"], uuid.UUID(machine_id))
        return backend

    async def retire(
        self, machine_id: str, owner: Owner, *, reason: str, states: Sequence[str] = ("warm",)
    ) -> tuple[bool, str | None]:
        """Set the machine stopping if it is in one of `states`; (retired, provider id)."""
        async with borrow(self.pool) as c:
            row = await c.fetchrow(Q["retire"], uuid.UUID(machine_id), owner.instance, owner.term, reason, list(states))
        return (False, None) if row is None else (True, row["provider_id"])

    async def stopping(self, owner: Owner) -> list[tuple[str, str | None]]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["stopping"], owner.instance, owner.term)
        return [(str(r["id"]), r["provider_id"]) for r in rows]

    async def forget_machine(self, machine_id: str, owner: Owner) -> None:
        async with borrow(self.pool) as c:
            await c.execute(Q["forget_machine"], uuid.UUID(machine_id), owner.instance, owner.term)

    async def record_misses(self, misses: dict[str, int], owner: Owner) -> None:
        if not misses:
            return
        async with borrow(self.pool) as c:
            await c.executemany(
                Q["record_misses"], [(uuid.UUID(m), n, owner.instance, owner.term) for m, n in misses.items()]
            )

    async def own_machines(self, owner: Owner) -> list[OwnMachine]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["own_machines"], owner.instance, owner.term)
        return [
            OwnMachine(
                machine=_machine(r),
                provider_id=r["provider_id"],
                endpoint=r["endpoint"],
                region=r["region"],
                backend=r["backend"],
                job_id=_text(r["job_id"]),
            )
            for r in rows
        ]

    async def starting_machines(self, owner: Owner) -> list[StartingMachine]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["starting_machines"], owner.instance, owner.term)
        return [
            StartingMachine(
                machine=_machine(r),
                started=r["provider_id"] is not None,
                token=r["token"],
                backend=r["backend"],
                job_id=_text(r["job_id"]),
                trace={k: r[k] for k in ("traceparent", "tracestate") if r[k]},
            )
            for r in rows
        ]

    async def cancel(self, job_id: str, tenant_id: str, build_id: str) -> CancelResult | None:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(Q["cancel"], uuid.UUID(job_id), tenant_id, build_id)
        return None if row is None else CancelResult(prior=row["prior"], worker_id=_text(row["worker_id"]))

    async def watch_job(self, job_id: str, tenant_id: str) -> tuple[JobView | None, bool]:
        """Mark the job watched (its completion notifies every process from now on) and read it: the job (None
        when it is not the tenant's) and whether this call marked it (the first mark locks the row a moment)."""
        async with borrow(self.pool) as c:
            row = await c.fetchrow(Q["watch_job"], uuid.UUID(job_id), tenant_id)
        return (None, False) if row is None else (_job(row), bool(row["marked"]))

    async def get_job(self, job_id: str, tenant_id: str) -> JobView | None:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(Q["get_job"], uuid.UUID(job_id), tenant_id)
        return None if row is None else _job(row)

    async def get_job_result(self, job_id: str, tenant_id: str) -> Finished | None:
        """The job and its result (when it has one) in one read; None when it is not the tenant's."""
        async with borrow(self.pool) as c:
            row = await c.fetchrow(Q["get_job_result"], uuid.UUID(job_id), tenant_id)
        if row is None:
            return None
        return Finished(job=_job(row), result=None if row["result"] is None else bytes(row["result"]))

    async def get_result(self, job_id: str, tenant_id: str) -> StoredResult | None:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(Q["get_result"], uuid.UUID(job_id), tenant_id)
        if row is None:
            return None
        return StoredResult(
            state=row["state"], error=row["error"], result=None if row["result"] is None else bytes(row["result"])
        )

    async def job_states(self, job_ids: Sequence[str]) -> dict[str, str]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["jobs_by_id"], [uuid.UUID(j) for j in job_ids])
        return {str(r["id"]): r["state"] for r in rows}

    async def list_workers(self, tenant_id: str | None) -> list[WorkerView]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["list_workers"], tenant_id)
        return [
            WorkerView(
                id=str(r["id"]),
                tenant_id=r["tenant_id"],
                machine_type=r["machine_type"],
                image=r["image"],
                backend=r["backend"],
                state=r["state"],
                region=r["region"],
                session_id=r["session_id"],
                job_id=_text(r["job_id"]),
                created_at=r["created_at"],
                warm_at=r["warm_at"],
                last_active_at=r["last_active_at"],
                health_misses=r["health_misses"],
            )
            for r in rows
        ]

    async def list_usage(self, tenant_id: str | None, after_position: int, limit: int) -> list[UsageView]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["list_usage"], tenant_id, after_position, limit)
        return [
            UsageView(
                position=r["position"],
                job_id=str(r["job_id"]),
                tenant_id=r["tenant_id"],
                machine_type=r["machine_type"],
                worker_id=str(r["worker_id"]),
                terminal_state=r["terminal_state"],
                duration_seconds=r["duration_seconds"],
                started_at=r["started_at"],
                ended_at=r["ended_at"],
            )
            for r in rows
        ]

    async def machine_counts(self) -> dict[str, int]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["machine_counts"])
        return {r["state"]: r["machines"] for r in rows}

    async def machine_counts_by_backend(self) -> dict[tuple[str, str], int]:
        """Machines by (state, backend)."""
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["machine_counts_by_backend"])
        return {(r["state"], r["backend"]): r["machines"] for r in rows}

    async def live_job_counts(self) -> dict[str, int]:
        """Jobs queued, dispatched and running (states absent have none)."""
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["live_job_counts"])
        return {r["state"]: r["jobs"] for r in rows}

    async def read_catalogue(self) -> tuple[int, Any] | None:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(Q["read_catalogue"])
        return None if row is None else (row["version"], json.loads(row["types"]))

    async def catalogue_version(self) -> int:
        async with borrow(self.pool) as c:
            version = await c.fetchval(Q["catalogue_version"])
        return int(version or 0)

    async def replace_catalogue(self, types_json: str, names: Sequence[str]) -> tuple[int, int]:
        """Store the catalogue; (its version, queued jobs failed for removed types)."""
        async with borrow(self.pool) as c:
            row = _one(await c.fetchrow(Q["replace_catalogue"], types_json, list(names)))
        return row["version"], row["failed"]

    async def lapsed_owners(self, owner: Owner) -> list[Owner]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["lapsed_owners"], owner.instance)
        return [Owner(r["owner"], r["owner_term"]) for r in rows]

    async def reclaim(self, lapsed: Owner, owner: Owner) -> tuple[int, int]:
        async with borrow(self.pool) as c:
            row = _one(await c.fetchrow(Q["reclaim"], lapsed.instance, lapsed.term, owner.instance, owner.term))
        return row["jobs"], row["machines"]

    async def recover_own(self, owner: Owner, *, any_term: bool = True) -> tuple[int, int]:
        """Fail the id's in-flight jobs and take its machines under `owner`'s term; `any_term=False` keeps
        to rows of that very term (shutdown)."""
        async with borrow(self.pool) as c:
            row = _one(await c.fetchrow(Q["recover_own"], owner.instance, owner.term, any_term))
        return row["jobs"], row["machines"]
