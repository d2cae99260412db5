"""The pool repository's values: frozen, built from a statement's row by `from_row` and nowhere else.

Callers never see a driver row: each aggregate's repository (jobs.py, machines.py, catalogue.py, ownership.py)
turns its rows into these, and the engine and the servicer work on them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from thermostat.policy.pool.hand_back import handed_to_machines
from thermostat.policy.pool.jobs import JobState
from thermostat.policy.pool.machines import Machine, MachineState
from thermostat.policy.pool.queue_order import QueuedJob

USAGE_EVENT_NAMESPACE = uuid.UUID("6f0c5e0a-8f1b-5d7e-9a43-2b7c1d9e4a10")
"""The UUIDv5 namespace of usage event ids (UsageView.event_id): fixed, so an event's id never changes."""


def usage_event_id(job_id: str) -> str:
    """A usage event's own id (the original strata-pool's `id`): derived from its job's, one event per job, so it
    needs no column and reads the same on every replica and every read."""
    return str(uuid.uuid5(USAGE_EVENT_NAMESPACE, job_id))


Row = asyncpg.Record


def one(row: Row | None) -> Row:
    """The row a statement that always returns one returned."""
    if row is None:
        raise RuntimeError("the statement returned no row")
    return row


def text(value: Any) -> str | None:
    return None if value is None else str(value)


def trace_of(row: Row) -> dict[str, str]:
    """The trace headers a row carries (`traceparent`, `tracestate`), those set."""
    return {k: row[k] for k in ("traceparent", "tracestate") if row[k]}


def machine_from_row(row: Row) -> Machine:
    """A machine row as the policies see it (thermostat.policy.pool.machines.Machine)."""
    return Machine(
        id=str(row["id"]),
        tenant_id=row["tenant_id"],
        machine_type=row["machine_type"],
        image=row["image"],
        state=MachineState(row["state"]),
        last_session_id=row["session_id"],
        health_misses=row["health_misses"],
        cool_down_seconds=row["cool_down_seconds"],
        yield_to=row["yield_to"],
        held_seconds=row.get("held_seconds"),
        boot_seconds=row.get("boot_seconds"),
    )


@dataclass(frozen=True, slots=True)
class Owner:
    """This process as the owner of rows: its instance id and the term of its instance lease."""

    instance: str
    term: int

    def params(self) -> dict[str, object]:
        """The `:owner` and `:owner_term` every statement that writes an owned row matches."""
        return {"owner": self.instance, "owner_term": self.term}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobView:
    """A job as callers see it: never the payload, result, owner, host or credential."""

    id: str
    tenant_id: str
    machine_type: str
    state: JobState
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

    @classmethod
    def from_row(cls, row: Row) -> JobView:
        return cls(
            id=str(row["id"]),
            tenant_id=row["tenant_id"],
            machine_type=row["machine_type"],
            state=JobState(row["state"]),
            submitted_at=row["submitted_at"],
            priority=row["priority"],
            session_id=row["session_id"],
            worker_id=text(row["worker_id"]),
            timeout_seconds=row["timeout_seconds"],
            error=row["error"],
            started_at=row["started_at"],
            completed_at=row["completed_at"],
            has_result=row["has_result"],
            handed_back=row.get("handed_back") or 0,  # a statement that names no column: a new job, never handed back
        )

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

    @classmethod
    def from_row(
        cls, row: Row, machine_id: str, *, endpoint: str | None = None, token: str | None = None, sent: bool = False
    ) -> Assignment:
        """The job a statement handed the machine (its columns `id`, `payload`, `timeout_seconds`, the trace)."""
        return cls(
            job_id=str(row["id"]),
            machine_id=machine_id,
            payload=bytes(row["payload"] or b""),
            timeout_seconds=row["timeout_seconds"],
            trace=trace_of(row),
            submitted_at=row["submitted_at"],
            endpoint=endpoint,
            token=token,
            sent=sent,
        )


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
    yielded_to: str | None = None  # the machine was retired to give its slot to this tenant (fair share)

    @classmethod
    def from_row(cls, row: Row, *, job_id: str, machine_id: str, tenant_id: str, machine_type: str) -> Completion:
        next_job = None if row["id"] is None else Assignment.from_row(row, machine_id, sent=bool(row["sent"]))
        finished = None
        if row["job_state"] is not None:
            finished = JobView(
                id=job_id,
                tenant_id=tenant_id,
                machine_type=machine_type,
                state=JobState(row["job_state"]),
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
        return cls(
            job_state=row["job_state"],
            job=finished,
            machine_state=row["machine_state"],
            provider_id=row["provider_id"],
            usage_position=row["position"],
            next_job=next_job,
            yielded_to=row["yielded_to"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineHold:
    """A machine of this process as a write whose answer was lost left it: its state, and the live job it
    holds under this owner (`job_state` running or dispatched; None with `job`)."""

    machine_state: str
    provider_id: str | None
    job_state: str | None
    job: Assignment | None

    @classmethod
    def from_row(cls, row: Row, machine_id: str) -> MachineHold:
        job = None
        if row["id"] is not None:
            job = Assignment.from_row(
                row, machine_id, endpoint=row["endpoint"], token=row["token"], sent=row["job_state"] == "running"
            )
        return cls(
            machine_state=row["machine_state"], provider_id=row["provider_id"], job_state=row["job_state"], job=job
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetMachine:
    """A machine row as the policies see it, plus its assigned job."""

    machine: Machine
    job_id: str | None

    @classmethod
    def from_row(cls, row: Row) -> FleetMachine:
        return cls(machine=machine_from_row(row), job_id=text(row["job_id"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnMachine:
    machine: Machine
    provider_id: str | None
    endpoint: str | None
    region: str | None
    backend: str = "local"
    job_id: str | None = None  # the job it holds (busy)
    idle_seconds: float | None = None  # warm: how long it has been idle by its row's clock (idle_since)

    @classmethod
    def from_row(cls, row: Row) -> OwnMachine:
        return cls(
            machine=machine_from_row(row),
            provider_id=row["provider_id"],
            endpoint=row["endpoint"],
            region=row["region"],
            backend=row["backend"],
            job_id=text(row["job_id"]),
            idle_seconds=row["idle_seconds"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Released:
    """What a deploy's release_own did: jobs requeued (never sent), jobs failed (running past the grace),
    machines set stopping (the caller stops them) and warm machines released for adoption."""

    requeued: int
    failed: int
    stopping: int
    released: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StartingMachine:
    """A starting machine of this process, with what its boot needs; `started`: a provider start is recorded."""

    machine: Machine
    started: bool
    token: str
    backend: str
    job_id: str | None  # the job handed to it (dispatched), if any
    trace: dict[str, str]  # that job's trace headers

    @classmethod
    def from_row(cls, row: Row) -> StartingMachine:
        return cls(
            machine=machine_from_row(row),
            started=row["provider_id"] is not None,
            token=row["token"],
            backend=row["backend"],
            job_id=text(row["job_id"]),
            trace=trace_of(row),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Demand:
    tenant_id: str
    machine_type: str
    queued: int
    head: QueuedJob
    turn: int = 0  # the tenant's last rotation out at the fleet cap, in the jobs' sequence (0: never)

    @classmethod
    def from_row(cls, row: Row) -> Demand:
        return cls(
            tenant_id=row["tenant_id"],
            machine_type=row["machine_type"],
            queued=row["queued"],
            head=QueuedJob(id=str(row["id"]), priority=row["priority"], sequence=row["queue_seq"]),
            turn=row["turn"],
        )


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
    provider_id: str | None = None  # the backend's id, once the machine started
    endpoint: str | None = None  # where its worker answers (the token is never in a view)

    @classmethod
    def from_row(cls, row: Row) -> WorkerView:
        return cls(
            id=str(row["id"]),
            tenant_id=row["tenant_id"],
            machine_type=row["machine_type"],
            image=row["image"],
            backend=row["backend"],
            state=row["state"],
            region=row["region"],
            session_id=row["session_id"],
            job_id=text(row["job_id"]),
            created_at=row["created_at"],
            warm_at=row["warm_at"],
            last_active_at=row["last_active_at"],
            health_misses=row["health_misses"],
            provider_id=row["provider_id"],
            endpoint=row["endpoint"],
        )


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

    @property
    def event_id(self) -> str:
        return usage_event_id(self.job_id)

    @classmethod
    def from_row(cls, row: Row) -> UsageView:
        return cls(
            position=row["position"],
            job_id=str(row["job_id"]),
            tenant_id=row["tenant_id"],
            machine_type=row["machine_type"],
            worker_id=str(row["worker_id"]),
            terminal_state=row["terminal_state"],
            duration_seconds=row["duration_seconds"],
            started_at=row["started_at"],
            ended_at=row["ended_at"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelResult:
    prior: str
    worker_id: str | None

    @classmethod
    def from_row(cls, row: Row) -> CancelResult:
        return cls(prior=row["prior"], worker_id=text(row["worker_id"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResult:
    state: str
    error: str | None
    result: bytes | None

    @classmethod
    def from_row(cls, row: Row) -> StoredResult:
        return cls(
            state=row["state"], error=row["error"], result=None if row["result"] is None else bytes(row["result"])
        )
