"""Intake: a submit goes into the store, alone or in a group commit, and a warm machine may take it at once.

The hot path is one statement per submit: it inserts the job and claims a warm machine together (which machine:
repository/jobs.sql `submit`; placement.py says more). The claim is the job's conditional send when the lease is
trusted for the call before the statement (the job's id is new with it, so no cancel can name it before the send):
the job is `running` from that statement, its machine is driven from its answer, and the facade starts its run.
Behind a backlog (the last submit of its tenant, type and image here queued with placement unable to act, behind
a deep queue) a submit joins a short batch instead, and one statement queues the batch's jobs (group commit:
thermostat.policy.pool.submit_batch). A single submit of the key first sends its gathering batch out and waits for
the key's batches to answer, so its claim never passes a batched job ahead of it. A submit that queued asks for
placement only when placement can act (policy: placement_may_act).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from thermostat.policy.pool.placement import placement_may_act
from thermostat.policy.pool.submit_batch import (
    BatchLimits,
    goes_out_now,
    joins_batch,
    outlook_after_submit,
    queued_to_count,
)
from thermostat.policy.pool.submit_options import SubmitOptions

from ..repository import Assignment, JobView, PoolRepository, QueuedSubmit, SubmitWrite
from ..repository.ids import new_job_id
from .catalogue import CatalogueCache
from .drivers import Drivers
from .local import Local, SubmitKey, WantsPlacement
from .ownership import Ownership
from .tasks import Tasks


@dataclass(frozen=True, slots=True, kw_only=True)
class Accepted:
    """A submit's job, and the warm machine its statement claimed for it, if any: driven under `driver` from the
    statement's answer, its run to start at once."""

    job: JobView
    claim: Assignment | None = None
    driver: object | None = None


@dataclass(eq=False)
class Batch:
    """Submits of one key gathering for one submit_queued statement (thermostat.policy.pool.submit_batch)."""

    key: SubmitKey
    members: list[tuple[QueuedSubmit, asyncio.Future[JobView]]] = field(default_factory=list)
    window: asyncio.TimerHandle | None = None
    payload_bytes: int = 0
    sent: bool = False


class Intake:
    def __init__(
        self,
        *,
        repo: PoolRepository,
        ownership: Ownership,
        catalogue: CatalogueCache,
        drivers: Drivers,
        tasks: Tasks,
        wants_placement: WantsPlacement,
        channel: str,
        limits: BatchLimits,
        local: Local,
    ) -> None:
        self.repo = repo
        self.ownership = ownership
        self.catalogue = catalogue
        self.drivers = drivers
        self.tasks = tasks
        self.wants_placement = wants_placement
        self.channel = channel
        self.limits = limits
        self.local = local  # the outlooks and batches out are the process's (local.py)
        self.gathering: dict[SubmitKey, Batch] = {}
        self.singles_waiting: dict[SubmitKey, int] = {}  # single submits waiting for the key's batches to answer

    async def submit(
        self,
        *,
        tenant_id: str,
        options: SubmitOptions,
        payload: bytes,
        trace: dict[str, str],
        waiting: bool = False,
        remaining: float | None = None,
    ) -> Accepted:
        """Queue the job, or claim a warm machine for it (Dispatcher.submit says more)."""
        machine_type = options.machine_type
        key = SubmitKey(tenant_id, machine_type.name, machine_type.image)
        if joins_batch(
            outlook=self.local.outlooks.get(key),
            remaining_seconds=remaining,
            limits=self.limits,
            single_waiting=key in self.singles_waiting,
        ):
            return Accepted(job=await self._submit_batched(key, options, payload, trace, waiting))
        if key in self.gathering or self.local.batches_out.get(key):
            self.singles_waiting[key] = self.singles_waiting.get(key, 0) + 1
            try:
                await self._batches_answered(key)
            finally:
                self.singles_waiting[key] -= 1
                if not self.singles_waiting[key]:
                    del self.singles_waiting[key]
        job_id = new_job_id()
        answered = self.drivers.submitting()
        try:
            # a warm machine's claim is the job's send when the lease is trusted for the call now, as before mark_sent
            send_now = self.ownership.trusted_for_call()
            try:
                write = SubmitWrite(
                    job_id=job_id,
                    tenant_id=tenant_id,
                    machine_type=machine_type.name,
                    image=machine_type.image,
                    priority=options.priority,
                    session_id=options.session_id,
                    timeout_seconds=options.timeout_seconds,
                    payload=payload,
                    owner=self.ownership.owner,
                    trace=trace,
                    send_now=send_now,
                    done_channel=self.channel if waiting else None,
                    count_queued=queued_to_count(max_workers=machine_type.max_workers, limits=self.limits),
                )
                submitted = await self.repo.jobs.submit(write)
            except BaseException:
                self.drivers.unanswered(job_id)
                raise
            assignment = submitted.assignment
            # driven before the claim counts as answered: a reconcile waiting for it never finds it undriven
            driver = self.drivers.drive(assignment.machine_id) if assignment is not None else None
        finally:
            self.drivers.submitted(answered)
        self.local.outlooks[key] = outlook_after_submit(
            claimed=assignment is not None,
            live_machines=submitted.live_machines,
            idle_machines=submitted.idle_machines,
            queued_jobs=submitted.queued_jobs,
            max_workers=machine_type.max_workers,
            limits=self.limits,
        )
        if assignment is None and placement_may_act(
            live_machines=submitted.live_machines,
            idle_machines=submitted.idle_machines,
            max_workers=machine_type.max_workers,
        ):
            self.wants_placement()
        return Accepted(job=submitted.job, claim=assignment, driver=driver)

    async def _submit_batched(
        self, key: SubmitKey, options: SubmitOptions, payload: bytes, trace: dict[str, str], waiting: bool
    ) -> JobView:
        """Join the key's batch and answer with its statement. A caller gone (cancelled, its deadline) before
        the batch's statement is written (the window, or a wait for a connection) leaves it, and nothing of it is
        queued; once the statement is written its job is queued, as a single submit's whose statement was sent."""
        job = QueuedSubmit(
            job_id=new_job_id(),
            priority=options.priority,
            session_id=options.session_id,
            timeout_seconds=options.timeout_seconds,
            payload=payload,
            trace=trace,
            done_channel=self.channel if waiting else None,
        )
        answer: asyncio.Future[JobView] = asyncio.get_running_loop().create_future()
        batch = self.gathering.get(key)
        if batch is None:
            batch = self.gathering[key] = Batch(key=key)
            batch.window = asyncio.get_running_loop().call_later(self.limits.max_delay_seconds, self.send_batch, batch)
        batch.members.append((job, answer))
        batch.payload_bytes += len(payload)
        if goes_out_now(members=len(batch.members), payload_bytes=batch.payload_bytes, limits=self.limits):
            self.send_batch(batch)
        return await answer

    def send_batch(self, batch: Batch) -> None:
        """The batch goes out: its members still waiting are written by one statement, in arrival order."""
        if batch.sent:
            return
        batch.sent = True
        if batch.window is not None:
            batch.window.cancel()
        if self.gathering.get(batch.key) is batch:
            del self.gathering[batch.key]
        members = [(job, answer) for job, answer in batch.members if not answer.done()]
        if not members:
            return
        self.local.batches_sent[batch.key] = self.local.batches_sent.get(batch.key, 0) + 1
        out = self.local.batches_out.setdefault(batch.key, set())
        task = self.tasks.spawn(self._write_batch(batch.key, members), f"pool-submit-batch-{members[0][0].job_id}")
        out.add(task)

        def done(task: asyncio.Task[None]) -> None:
            out.discard(task)
            if not out and self.local.batches_out.get(batch.key) is out:
                del self.local.batches_out[batch.key]

        task.add_done_callback(done)

    async def _write_batch(self, key: SubmitKey, members: list[tuple[QueuedSubmit, asyncio.Future[JobView]]]) -> None:
        """One submit_queued statement for the batch. Each member gets its own job, or the statement's error as
        a single submit would (its job may have been queued with the answer lost: it runs, as a lost single's)."""
        tenant_id, type_name, _ = key
        jobs = [job for job, _ in members]
        answers = {job.job_id: answer for job, answer in members}
        try:
            machine_type = self.catalogue.get(type_name)
            max_workers = machine_type.max_workers if machine_type is not None else None
            count = queued_to_count(max_workers=max_workers, limits=self.limits)
            # a caller gone before the statement (its deadline, while the batch waited for a connection) has
            # nothing queued, as a single submit cancelled before its statement
            batch = await self.repo.jobs.submit_queued(
                tenant_id, type_name, jobs, count_queued=count, wanted=lambda job_id: not answers[job_id].done()
            )
        except BaseException as error:
            # no claim to look for later (a batch claims no machine): nothing joins the unanswered set
            for answer in answers.values():
                if answer.done():
                    continue
                if isinstance(error, asyncio.CancelledError):
                    answer.cancel()
                else:
                    answer.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        if batch is None:
            return
        for view in batch.jobs:
            if not answers[view.id].done():
                answers[view.id].set_result(view)
        self.local.outlooks[key] = outlook_after_submit(
            claimed=False,
            live_machines=batch.live_machines,
            idle_machines=batch.idle_machines,
            queued_jobs=batch.queued_jobs,
            max_workers=max_workers,
            limits=self.limits,
        )
        if placement_may_act(
            live_machines=batch.live_machines, idle_machines=batch.idle_machines, max_workers=max_workers
        ):
            self.wants_placement()  # a machine went idle, or one may start, since the last answer here

    async def _batches_answered(self, key: SubmitKey) -> None:
        """Before a single submit of the key: its batch still gathering goes out now, and every batch of the
        key answers first, so the single statement sees their jobs ahead of it (priority, then arrival)."""
        gathering = self.gathering.get(key)
        if gathering is not None:
            self.send_batch(gathering)
        out = self.local.batches_out.get(key)
        if out:
            await asyncio.wait(list(out))

    def batches_seen(self, key: SubmitKey) -> tuple[int, bool]:
        """How many batches of the key went out, and whether one is out now (a completion compares before and
        after its statement: a batch out meanwhile may be one it could not see, nor the batch the machine idle)."""
        return self.local.batches_sent.get(key, 0), bool(self.local.batches_out.get(key))

    async def place_after_batches(self, key: SubmitKey) -> None:
        out = self.local.batches_out.get(key)
        if out:
            await asyncio.wait(list(out))
        self.wants_placement()

    def close(self) -> list[asyncio.Task[None]]:
        """Every batch gathering goes out (its callers get their jobs, not a cancelled write); the batches out."""
        for batch in list(self.gathering.values()):
            self.send_batch(batch)
        return [task for out in self.local.batches_out.values() for task in out]

    def may_take(self, key: SubmitKey) -> None:
        """A machine of the key went idle here: its next submit has its own statement, which can claim it."""
        self.local.outlooks.pop(key, None)
        gathering = self.gathering.get(key)
        if gathering is not None:  # its answer sees the machine idle and pokes placement: no wait for the window
            self.send_batch(gathering)
