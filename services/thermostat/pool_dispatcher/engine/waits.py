"""Waits: a sync submit's wait for its job (wait_finished) and WaitJob's (wait), on in-process events.

The events are set by this process's completions and changes (`finished`, `changed`) and by notifications of other
processes' (listener.py); NOTIFY is a hint, so every wait also re-reads the job once a second (a sync wait's
re-reads gathered into one statement with the others': rereads.py). A completion notifies only where a wait may
be in another process: the channel of the process whose sync submit waits (recorded on the job by the submit;
`job_done_channel`), and every process's `pool_jobs_done` when a WaitJob watches the job (its first read marks
the row, so a completion either lands before and is read, or after and notifies). A sync wait whose job this
process completed takes the job and result from the completion (no read, no notification); one completed
elsewhere takes a small result from the notification (no read either) and reads a larger one, or a failure,
once. A re-read that finds the job still queued asks for placement: the backstop for a completion that raced
its submit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace

from thermostat.chassis.clock import Clock
from thermostat.policy.pool.jobs import TERMINAL_STATES, JobState

from ..repository import Finished, JobView, PoolRepository, parse_job_done
from .local import WantsPlacement
from .rereads import Rereads

REPOLL_SECONDS = 1.0
"""A wait re-reads its job this often even without a notification (NOTIFY is a hint, not a delivery)."""

RECENT_DONE = 4096
"""Job ids whose notification arrived lately, so a wait that registers after its job's NOTIFY reads at once."""


@dataclass(eq=False)
class Waiter:
    event: asyncio.Event = field(default_factory=asyncio.Event)
    finished: Finished | None = None  # set by this process's own completion: nothing to re-read
    announced: bytes | None = None  # the result another process's completion notified: nothing to re-read


@dataclass
class Waiters:
    waiting: dict[str, list[Waiter]] = field(default_factory=dict)
    recent: dict[str, None] = field(default_factory=dict)  # insertion-ordered, bounded
    # jobs whose completion statement this process has in flight: their own NOTIFY can overtake the
    # statement's answer, and would send their waiters to read what the answer brings anyway
    completing: set[str] = field(default_factory=set)

    def add(self, job_id: str) -> Waiter:
        waiter = Waiter()
        self.waiting.setdefault(job_id, []).append(waiter)
        return waiter

    def remove(self, job_id: str, waiter: Waiter) -> None:
        listed = self.waiting.get(job_id, [])
        if waiter in listed:
            listed.remove(waiter)
        if not listed:
            self.waiting.pop(job_id, None)

    def wake(self, job_id: str) -> None:
        self.recent[job_id] = None
        if len(self.recent) > RECENT_DONE:
            del self.recent[next(iter(self.recent))]
        for waiter in self.waiting.get(job_id, []):
            waiter.event.set()

    def finish(self, job_id: str, finished: Finished) -> None:
        for waiter in self.waiting.get(job_id, []):
            waiter.finished = finished
            waiter.event.set()

    def announce(self, job_id: str, result: bytes) -> None:
        for waiter in self.waiting.get(job_id, []):
            waiter.announced = result


class Waits:
    """Sync and WaitJob waits. `before_wait` is an ordering test's seam (production passes none), awaited with the
    job id before the wait registers: a completion that lands there is one the wait must find by its read, and no
    injected call precedes the registration (wait_finished reads nothing before it)."""

    def __init__(
        self,
        repo: PoolRepository,
        wants_placement: WantsPlacement,
        clock: Clock,
        *,
        before_wait: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.repo = repo
        self.wants_placement = wants_placement
        self.before_wait = before_wait
        self.clock = clock
        self.repoll_seconds = REPOLL_SECONDS
        self.waiters = Waiters()
        self.rereads = Rereads(repo.jobs.get_jobs, wants_placement)

    def finished(self, job_id: str, finished: Finished) -> None:  # this process's completion: no read
        self.waiters.finish(job_id, finished)

    def changed(self, job_id: str) -> None:  # ended or moved outside a wait's sight: its waiters read it
        self.waiters.wake(job_id)

    @contextlib.contextmanager
    def completing(self, job_id: str) -> Iterator[None]:
        """The job's completion statement is in flight here: its own NOTIFY wakes nobody; its waiters are woken
        when it answers (or fails)."""
        self.waiters.completing.add(job_id)
        try:
            yield
        finally:
            self.waiters.completing.discard(job_id)
            self.waiters.wake(job_id)

    def on_job_done(self, payload: str) -> None:
        """A job-done notification (either channel)."""
        job_id, result = parse_job_done(payload)
        if job_id in self.waiters.completing:
            self.waiters.recent[job_id] = None  # the completion in flight here wakes its waiters itself
            return
        if result is not None:
            self.waiters.announce(job_id, result)
        self.waiters.wake(job_id)

    async def wait_finished(self, job: JobView, timeout: float) -> Finished:
        """A job this caller just submitted, once terminal (with its result) or as it stands when `timeout` runs
        out. This process's own completion hands over the job and result with no read; another process's
        arrives by NOTIFY and is read once (job and result together)."""
        if self.before_wait is not None:
            await self.before_wait(job.id)
        now = self.clock.monotonic
        deadline = now() + timeout
        waiter = self.waiters.add(job.id)
        try:
            latest = Finished(job=job, result=None)
            stale = job.id in self.waiters.recent  # its notification came before this wait began
            timed_out = False  # a second passed with no wake-up
            while True:
                if waiter.finished is not None:
                    return waiter.finished
                if waiter.announced is not None:
                    completed = replace(job, state=JobState.COMPLETED, has_result=True)
                    return Finished(job=completed, result=waiter.announced)
                remaining = deadline - now()
                if timed_out and remaining > self.rereads.gather_seconds:
                    # the backstop's re-read, gathered with the others' (rereads.py); the job alone, with its
                    # result, only once it is done or gone
                    timed_out = False
                    waiter.event.clear()
                    view = await self.rereads.read(job.id)
                    if view is None or view.tenant_id != job.tenant_id or view.state in TERMINAL_STATES:
                        stale = True
                        continue
                    latest = Finished(job=view, result=None)
                    remaining = deadline - now()
                elif stale or remaining <= 0:
                    waiter.event.clear()
                    read = await self.repo.jobs.get_job_result(job.id, job.tenant_id)
                    if read is None:
                        return latest
                    latest = read
                    state = read.job.state
                    if state in TERMINAL_STATES or remaining <= 0:
                        return read
                    if state is JobState.QUEUED:
                        self.wants_placement()
                    remaining = deadline - now()  # the read took a while: the wait is that much shorter
                stale = True  # a wake-up: read again
                try:
                    async with asyncio.timeout(max(0.0, min(remaining, self.repoll_seconds))):
                        await waiter.event.wait()
                except TimeoutError:
                    stale, timed_out = False, True
        finally:
            self.waiters.remove(job.id, waiter)

    async def wait(
        self, job_id: str, tenant_id: str, timeout: float, *, since_state: str | None = None
    ) -> JobView | None:
        """The job once terminal (or no longer in `since_state`), or as it stands when `timeout` runs out;
        None when it is not the tenant's. The first read marks the job watched (registered first, so a completion
        after it notifies and wakes this wait; one before it is what the read finds)."""
        if self.before_wait is not None:
            await self.before_wait(job_id)
        now = self.clock.monotonic
        deadline = now() + timeout
        waiter = self.waiters.add(job_id)
        try:
            job, marked = await self.repo.jobs.watch_job(job_id, tenant_id)
            if marked and job is not None and job.state == JobState.QUEUED:
                # a machine freed while the mark held the row passed the job over (SKIP LOCKED) and went idle
                self.wants_placement()
            while True:
                remaining = deadline - now()
                moved = since_state is not None and job is not None and job.state != since_state
                if job is None or moved or job.state in TERMINAL_STATES or remaining <= 0:
                    return job
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can drop a cancellation (the caller gone)
                # that lands as the event fires, and this loop would then poll on until its deadline
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(remaining, self.repoll_seconds)):
                        await waiter.event.wait()
                waiter.event.clear()  # before the read: a wake-up after it is for the next wait
                job = await self.repo.jobs.get_job(job_id, tenant_id)
        finally:
            self.waiters.remove(job_id, waiter)
