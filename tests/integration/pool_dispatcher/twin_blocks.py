"""The state conformance scenarios on the in-memory twin (tests/fixtures/pool_twin): a world seeded as `seed` seeds
Postgres, each SQL block's arguments turned into the call of the repository method that runs it, and the state
changes read off the rows before and after (as the SQL's test-only trigger logs them: an insert is a change from no
row, a deleted machine is `stopped`)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.fixtures.pool_twin import JobRow, MachineRow, MemoryPoolRepository
from thermostat.policy.pool.hand_back import Refusal
from thermostat.pool_dispatcher.repository import Owner, QueuedSubmit

Call = Callable[[MemoryPoolRepository, tuple[Any, ...]], Awaitable[object]]


def _id(value: object) -> str:
    return str(value)


def _owner(instance: str, term: int) -> Owner:
    return Owner(instance, term)


def _trace(traceparent: str | None, tracestate: str | None) -> dict[str, str]:
    return {k: v for k, v in (("traceparent", traceparent), ("tracestate", tracestate)) if v}


def _submit(r: MemoryPoolRepository, a: tuple[Any, ...]) -> Awaitable[object]:
    return r.jobs.submit(
        job_id=_id(a[0]),
        tenant_id=a[1],
        machine_type=a[2],
        image=a[3],
        priority=a[4],
        session_id=a[5],
        timeout_seconds=a[6],
        payload=a[7],
        owner=_owner(a[8], a[9]),
        trace=_trace(a[10], a[11]),
        send_now=a[12],
        done_channel=a[13],
        count_queued=a[14],
    )


def _submit_queued(r: MemoryPoolRepository, a: tuple[Any, ...]) -> Awaitable[object]:
    jobs = [
        QueuedSubmit(
            job_id=_id(i), priority=p, session_id=s, timeout_seconds=t, payload=b, trace=_trace(tp, ts), done_channel=d
        )
        for i, p, s, t, b, tp, ts, d in zip(*a[2:10], strict=True)
    ]
    return r.jobs.submit_queued(a[0], a[1], jobs, count_queued=a[10])


def _complete(r: MemoryPoolRepository, a: tuple[Any, ...]) -> Awaitable[object]:
    return r.jobs.complete(
        job_id=_id(a[0]),
        machine_id=_id(a[1]),
        state=a[2],
        result=a[3],
        error=a[4],
        duration_seconds=a[5],
        owner=_owner(a[6], a[7]),
        retire=a[8],
        take_next=a[9],
        tenant_id=a[10],
        machine_type=a[11],
        send_next=a[12],
        notified_result_bytes=a[13],
        channel=a[14],
    )


def _insert_machine(r: MemoryPoolRepository, a: tuple[Any, ...]) -> Awaitable[object]:
    return r.machines.insert_machine(
        None,
        machine_id=_id(a[0]),
        tenant_id=a[1],
        machine_type=a[2],
        image=a[3],
        backend=a[4],
        token=a[5],
        owner=_owner(a[6], a[7]),
        assign_job=a[8],
        cool_down_seconds=a[9],
    )


def _record_started(r: MemoryPoolRepository, a: tuple[Any, ...]) -> Awaitable[object]:
    return r.machines.record_started(_id(a[0]), provider_id=a[1], endpoint=a[2], region=a[3], owner=_owner(a[4], a[5]))


def _yield_machine(r: MemoryPoolRepository, a: tuple[Any, ...]) -> Awaitable[object]:
    owner = _owner(a[1], a[2])
    return r.machines.yield_machine(None, _id(a[0]), owner, to_tenant=a[3], mark_busy=a[4], reason=a[5])


CALLS: dict[str, Call] = {
    "submit": _submit,
    "submit_queued": _submit_queued,
    "complete": _complete,
    "take_next": lambda r, a: r.jobs.take_next(_id(a[0]), a[3], _owner(a[1], a[2])),
    "mark_sent": lambda r, a: r.jobs.mark_sent(_id(a[0]), _id(a[1]), _owner(a[2], a[3])),
    "requeue_unsent": lambda r, a: r.jobs.requeue_unsent(_id(a[0]), _id(a[1]), _owner(a[2], a[3]), marked=a[4]),
    "hand_back": lambda r, a: r.jobs.hand_back(
        _id(a[0]), _id(a[1]), _owner(a[2], a[3]), Refusal(machine_id=_id(a[1]), reason=a[4])
    ),
    "abandon_running": lambda r, a: r.jobs.abandon_running(_id(a[0]), _id(a[1]), _owner(a[2], a[3]), a[4]),
    "cancel": lambda r, a: r.jobs.cancel(_id(a[0]), a[1], a[2]),
    "watch_job": lambda r, a: r.jobs.watch_job(_id(a[0]), a[1]),
    "insert_machine": _insert_machine,
    "record_started": _record_started,
    "machine_ready": lambda r, a: r.machines.machine_ready(_id(a[0]), _owner(a[1], a[2])),
    "boot_failed": lambda r, a: r.machines.boot_failed(_id(a[0]), _owner(a[1], a[2]), a[3]),
    "retire": lambda r, a: r.machines.retire(_id(a[0]), _owner(a[1], a[2]), reason=a[3], states=a[4]),
    "yield_machine": _yield_machine,
    "unyield": lambda r, a: r.machines.unyield(None, None if a[0] is None else [_id(m) for m in a[0]]),
    "forget_machine": lambda r, a: r.machines.forget_machine(_id(a[0]), _owner(a[1], a[2])),
    "record_misses": lambda r, a: r.machines.record_misses({_id(a[0]): a[1]}, _owner(a[2], a[3])),
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


async def run_on_twin(
    block: str, world: Any, args: tuple[Any, ...], **ids: uuid.UUID
) -> list[tuple[str, str | None, str]]:
    repo = seed_twin(world, **ids)
    before = states(repo)
    await CALLS[block](repo, args)
    return changes(before, states(repo))
