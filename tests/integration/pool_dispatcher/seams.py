"""Seams where ordering tests hold a dispatcher's run, at the point two actors race.

Most are the repository's injection point: the seam wraps the one method of the dispatcher's aggregate
(`repo.jobs`, `repo.machines`) whose call comes right after the point, so nothing in production marks it. Five
points precede no such call (a trust check, a mark in memory, a read of what batches were seen, a wait's
registration, the placement lock): there the seam sets the part's own documented constructor seam (Runner's
before_send / before_execute / before_complete, Waits' before_wait, Placement's before_place), which production
leaves None.

`start_pool(seams=[...])` applies each to the dispatcher it built, before the host starts, so the wrapper is in place
before the first pass can reach the call. A wrapper awaits the test's barrier with the call's key (a job or a
machine id: the method's first argument) and then delegates; a call inside a retrying write (`durably`) meets it on
every attempt, so a barrier that must act once arms itself off (as `Outage` and `HeldStep` do).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from thermostat.pool_dispatcher.dispatcher import Dispatcher
from thermostat.pool_dispatcher.repository import QueuedSubmit

Hold = Callable[[str], Awaitable[None]]
Seam = Callable[[Dispatcher], None]


def wrap_before(
    target: object, method: str, hold: Callable[..., Awaitable[None]], key: Callable[..., Any] | None
) -> None:
    """Replace `target.method` (on that instance) by one that awaits `hold(key(*args))` before the real call (with
    no argument when `key` is None)."""
    real = getattr(target, method)

    @functools.wraps(real)
    async def held(*args: Any, **kwargs: Any) -> Any:
        await (hold() if key is None else hold(key(*args, **kwargs)))
        return await real(*args, **kwargs)

    setattr(target, method, held)


def _first(*args: Any, **_kwargs: Any) -> str:
    return str(args[0])


def before_take_next(hold: Hold) -> Seam:
    """Before `repo.jobs.take_next`: a machine asks for its next job (by machine id)."""
    return lambda d: wrap_before(d.repo.jobs, "take_next", hold, _first)


def before_hand_back(hold: Hold) -> Seam:
    """Before `repo.jobs.hand_back`: a job its worker refused goes back to the queue (by job id)."""
    return lambda d: wrap_before(d.repo.jobs, "hand_back", hold, _first)


def before_record_started(hold: Hold) -> Seam:
    """Before `repo.machines.record_started`: the backend started a machine; its row is written (by machine id)."""
    return lambda d: wrap_before(d.repo.machines, "record_started", hold, _first)


def before_machine_ready(hold: Hold) -> Seam:
    """Before `repo.machines.machine_ready`: a booted machine answered its health check (by machine id)."""
    return lambda d: wrap_before(d.repo.machines, "machine_ready", hold, _first)


def before_provider_stop(hold: Hold) -> Seam:
    """Before `repo.machines.machine_backend`, the read that opens a retired machine's provider stop (by machine id):
    the fleet reads which backend to call, then calls its stop."""
    return lambda d: wrap_before(d.repo.machines, "machine_backend", hold, _first)


def _batch(_tenant_id: str, _machine_type: str, jobs: Sequence[QueuedSubmit], **_kwargs: Any) -> list[str]:
    return [job.job_id for job in jobs]


def before_submit_batch(hold: Callable[[list[str]], Awaitable[None]]) -> Seam:
    """Before `repo.jobs.submit_queued`: a gathered batch's one statement (by the batch's job ids)."""
    return lambda d: wrap_before(d.repo.jobs, "submit_queued", hold, _batch)


def before_insert_machines(hold: Callable[[], Awaitable[None]]) -> Seam:
    """Before `repo.machines.insert_machine`: inside placement's transaction, under its lock, the pass's counts read
    and its first start not yet inserted (a hint's insert meets it too)."""
    return lambda d: wrap_before(d.repo.machines, "insert_machine", hold, None)


SEAMS: dict[str, Callable[[Any], Seam]] = {
    "before_take_next": before_take_next,
    "before_hand_back": before_hand_back,
    "before_record_started": before_record_started,
    "before_machine_ready": before_machine_ready,
    "before_provider_stop": before_provider_stop,
    "before_insert_machines": before_insert_machines,
}


def _part_seam(part: str, name: str, hold: Callable[..., Awaitable[None]]) -> Seam:
    return lambda d: setattr(getattr(d, part), name, hold)


def before_send(hold: Hold) -> Seam:
    """Runner's own seam: a dispatched claim, before the lease's trust check that gates mark_sent (by job id)."""
    return _part_seam("runner", "before_send", hold)


def before_execute(hold: Hold) -> Seam:
    """Runner's own seam: every job, before its `sent` mark and the worker call (by job id)."""
    return _part_seam("runner", "before_execute", hold)


def before_complete(hold: Hold) -> Seam:
    """Runner's own seam: the worker answered, before the completion's trust check and batches read (by job id)."""
    return _part_seam("runner", "before_complete", hold)


def before_wait(hold: Hold) -> Seam:
    """Waits' own seam: a sync or WaitJob wait, before it registers (by job id)."""
    return _part_seam("waits", "before_wait", hold)


def before_place(hold: Callable[[], Awaitable[None]]) -> Seam:
    """Placement's own seam: every pass, before it takes the placement lock."""
    return _part_seam("placement", "before_place", hold)


SEAMS.update(before_send=before_send, before_complete=before_complete)
