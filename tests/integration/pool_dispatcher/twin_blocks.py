"""The state conformance scenarios on the in-memory twin (tests/fixtures/pool_twin): a world seeded as `seed` seeds
Postgres, each SQL block's named parameters (a Run's `args`) turned into the call of the repository method that runs
it, and the state changes read off the rows before and after (as the SQL's test-only trigger logs them: an insert is
a change from no row, a deleted machine is `stopped`)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.fixtures.pool_twin import JobRow, MachineRow, MemoryPoolRepository
from thermostat.policy.pool.hand_back import Refusal
from thermostat.pool_dispatcher.repository import CompletionWrite, Owner, QueuedSubmit, SubmitWrite

Args = dict[str, Any]
Call = Callable[[MemoryPoolRepository, Args], Awaitable[object]]


def _id(value: object) -> str:
    return str(value)


def _owner(a: Args) -> Owner:
    """The statement's `:owner` and `:owner_term` (pool_sql.owned) as the repository's Owner."""
    return Owner(a["owner"], a["owner_term"])


def _trace(traceparent: str | None, tracestate: str | None) -> dict[str, str]:
    return {k: v for k, v in (("traceparent", traceparent), ("tracestate", tracestate)) if v}


def _submit(r: MemoryPoolRepository, a: Args) -> Awaitable[object]:
    write = SubmitWrite(
        job_id=_id(a["job_id"]),
        tenant_id=a["tenant_id"],
        machine_type=a["machine_type"],
        image=a["image"],
        priority=a["priority"],
        session_id=a["session_id"],
        timeout_seconds=a["timeout_seconds"],
        payload=a["payload"],
        owner=_owner(a),
        trace=_trace(a["traceparent"], a["tracestate"]),
        send_now=a["send_now"],
        done_channel=a["done_channel"],
        count_queued=a["count_queued"],
    )
    return r.jobs.submit(write)


def _submit_queued(r: MemoryPoolRepository, a: Args) -> Awaitable[object]:
    columns = ("job_ids", "priorities", "session_ids", "timeouts", "payloads", "traceparents", "tracestates")
    jobs = [
        QueuedSubmit(
            job_id=_id(i), priority=p, session_id=s, timeout_seconds=t, payload=b, trace=_trace(tp, ts), done_channel=d
        )
        for i, p, s, t, b, tp, ts, d in zip(*(a[c] for c in (*columns, "done_channels")), strict=True)
    ]
    return r.jobs.submit_queued(a["tenant_id"], a["machine_type"], jobs, count_queued=a["count_queued"])


def _complete(r: MemoryPoolRepository, a: Args) -> Awaitable[object]:
    write = CompletionWrite(
        job_id=_id(a["job_id"]),
        machine_id=_id(a["machine_id"]),
        state=a["state"],
        result=a["result"],
        error=a["error"],
        duration_seconds=a["duration_seconds"],
        owner=_owner(a),
        retire=a["retire"],
        take_next=a["take_next"],
        send_next=a["send_next"],
        tenant_id=a["tenant_id"],
        machine_type=a["machine_type"],
        notified_result_bytes=a["notified_result_bytes"],
        channel=a["channel"],
    )
    return r.jobs.complete(write)


def _insert_machine(r: MemoryPoolRepository, a: Args) -> Awaitable[object]:
    return r.machines.insert_machine(
        None,
        machine_id=_id(a["machine_id"]),
        tenant_id=a["tenant_id"],
        machine_type=a["machine_type"],
        image=a["image"],
        backend=a["backend"],
        token=a["token"],
        owner=_owner(a),
        assign_job=a["assign_job"],
        cool_down_seconds=a["cool_down_seconds"],
    )


def _record_started(r: MemoryPoolRepository, a: Args) -> Awaitable[object]:
    started = {"provider_id": a["provider_id"], "endpoint": a["endpoint"], "region": a["region"]}
    return r.machines.record_started(_id(a["machine_id"]), **started, owner=_owner(a))


def _yield_machine(r: MemoryPoolRepository, a: Args) -> Awaitable[object]:
    to = {"to_tenant": a["to_tenant"], "mark_busy": a["mark_busy"], "reason": a["reason"]}
    return r.machines.yield_machine(None, _id(a["machine_id"]), _owner(a), **to)


def _hand_back(r: MemoryPoolRepository, a: Args) -> Awaitable[object]:
    # the twin writes last_error from the refusal, as jobs.py builds the statement's :last_error from it
    refusal = Refusal(machine_id=_id(a["machine_id"]), reason=a["reason"])
    return r.jobs.hand_back(_id(a["job_id"]), _id(a["machine_id"]), _owner(a), refusal)


def _unyield(r: MemoryPoolRepository, a: Args) -> Awaitable[object]:
    ids = a["machine_ids"]
    return r.machines.unyield(None, None if ids is None else [_id(m) for m in ids])


CALLS: dict[str, Call] = {
    "submit": _submit,
    "submit_queued": _submit_queued,
    "complete": _complete,
    "take_next": lambda r, a: r.jobs.take_next(_id(a["machine_id"]), a["image"], _owner(a)),
    "mark_sent": lambda r, a: r.jobs.mark_sent(_id(a["job_id"]), _id(a["machine_id"]), _owner(a)),
    "requeue_unsent": lambda r, a: r.jobs.requeue_unsent(
        _id(a["job_id"]), _id(a["machine_id"]), _owner(a), marked=a["marked"]
    ),
    "hand_back": _hand_back,
    "abandon_running": lambda r, a: r.jobs.abandon_running(
        _id(a["job_id"]), _id(a["machine_id"]), _owner(a), a["reason"]
    ),
    "cancel": lambda r, a: r.jobs.cancel(_id(a["job_id"]), a["tenant_id"], a["build_id"]),
    "watch_job": lambda r, a: r.jobs.watch_job(_id(a["job_id"]), a["tenant_id"]),
    "insert_machine": _insert_machine,
    "record_started": _record_started,
    "machine_ready": lambda r, a: r.machines.machine_ready(_id(a["machine_id"]), _owner(a)),
    "boot_failed": lambda r, a: r.machines.boot_failed(_id(a["machine_id"]), _owner(a), a["reason"]),
    "retire": lambda r, a: r.machines.retire(_id(a["machine_id"]), _owner(a), reason=a["reason"], states=a["states"]),
    "yield_machine": _yield_machine,
    "unyield": _unyield,
    "forget_machine": lambda r, a: r.machines.forget_machine(_id(a["machine_id"]), _owner(a)),
    "record_misses": lambda r, a: r.machines.record_misses({_id(a["machine_id"]): a["health_misses"]}, _owner(a)),
}
"""Every block of jobs.sql and machines.sql that writes a job or a machine, as the twin's method that runs it."""


def seed_twin(world: Any, *, job: uuid.UUID, machine: uuid.UUID, next_job: uuid.UUID) -> MemoryPoolRepository:
    """The rows `seed` writes for `world` (a test_state_conformance.World), in the twin."""
    repo = MemoryPoolRepository()
    db, now = repo.db, repo.db.now()
    instance, term = world.owner
    if world.machine is not None:
        db.machines[str(machine)] = MachineRow(
            id=str(machine),
            tenant_id="t",
            machine_type="cpu",
            image="img",
            backend="local",
            token="tok",
            state=world.machine,
            created_at=now,
            owner=instance,
            owner_term=term,
            job_id=str(job) if world.holds else None,
            last_active_at=now,
            idle_since=now if world.machine == "warm" else None,
            yield_to="waiting-tenant" if world.yielding else None,
            released_at=now if world.released else None,
        )
    if world.job is not None:
        cancelled_running = world.job == "cancelled-running"
        owned = world.job in ("dispatched", "running") or cancelled_running
        db.jobs[str(job)] = JobRow(
            id=str(job),
            tenant_id="t",
            machine_type="cpu",
            state="cancelled" if cancelled_running else world.job,
            timeout_seconds=30,
            payload=b"x",
            submitted_at=now,
            queue_seq=db.next_seq(),
            worker_id=None if world.job == "queued" else str(machine),
            owner=instance if owned else None,
            owner_term=term if owned else None,
            started_at=None if world.job in ("queued", "dispatched", "cancelled") else now,
        )
    if world.queued_next:
        db.jobs[str(next_job)] = JobRow(
            id=str(next_job),
            tenant_id="t",
            machine_type="cpu",
            state="queued",
            timeout_seconds=30,
            payload=b"y",
            submitted_at=now,
            queue_seq=db.next_seq(),
        )
    if world.catalogue is not None:
        db.catalogue = set(world.catalogue)
    return repo


def states(repo: MemoryPoolRepository) -> dict[tuple[str, str], str]:
    return {("job", j.id): j.state for j in repo.db.jobs.values()} | {
        ("machine", m.id): m.state for m in repo.db.machines.values()
    }


def changes(before: dict[tuple[str, str], str], after: dict[tuple[str, str], str]) -> list[tuple[str, str | None, str]]:
    """(kind, before, after) of each row whose state changed, as the trigger logs it."""
    found: list[tuple[str, str | None, str]] = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key, "stopped")
        if old != new:
            found.append((key[0], old, new))
    return found


async def run_on_twin(block: str, world: Any, args: Args, **ids: uuid.UUID) -> list[tuple[str, str | None, str]]:
    repo = seed_twin(world, **ids)
    before = states(repo)
    await CALLS[block](repo, args)
    return changes(before, states(repo))
