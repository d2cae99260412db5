"""Runner: sends jobs to one machine until it has no next job, and what happens when a machine dies mid-job.

A run starts when a machine of this process is handed a job: a submit's warm claim (intake), placement handing an
idle warm machine its next job, a booted machine's first (fleet). It sends the job (the worker client's execute),
then writes the outcome with one statement that also writes the usage event and hands the machine its next queued
job (repository/jobs.sql `complete`), and loops on that job. Its store writes are written until they land
(writes.py).

Placement's claims hand a job over as `dispatched`; right before the payload goes out one conditional statement
(mark_sent) makes it `running`, so a cancel, a reclaim or a newer incarnation of this instance that landed since
the claim wins and nothing is sent or metered. A completion that hands its machine the next job is that job's
conditional send when the lease is trusted for the call before the statement (fenced by owner and term).

When a machine dies:
- before any byte of the job went out (the worker client answers UNREACHABLE: refused, no route, ...), the machine
  is retired and the job handed back to the queue in its place, at most once (hand_back.py;
  thermostat.policy.pool.hand_back; issue 29);
- mid-job (the call was sent and the answer is an error, a cut connection or the deadline), the job fails with
  what the worker said (thermostat.policy.pool.job_outcome), it is never run twice, and `retire_machine` retires
  the machine with the completion's statement: it is stopped at its provider and forgotten (fleet.finish_stop);
- a run whose task ended unexpectedly (nothing drives the machine any more) is found by the scaler's reconcile,
  which fails the job (ABANDONED) and retires the machine.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

from thermostat.chassis import tracing
from thermostat.policy.pool.job_outcome import ReplyKind, decide_job_outcome
from thermostat.policy.pool.jobs import JobState
from thermostat.policy.pool.machines import MachineState
from thermostat.providers.pool.worker_client import WorkerClient

from ..metrics import PoolMetrics
from ..repository import Assignment, CompletionWrite, Finished, PoolRepository
from .catalogue import CatalogueCache
from .drivers import Drivers
from .events import PLACEMENT_WANTED, Events, JobChanged, JobFinished, MachineFreed
from .fleet import Fleet
from .hand_back import HandBack
from .intake import Intake
from .local import Local, SubmitKey
from .ownership import Ownership
from .tasks import Tasks
from .waits import Waits
from .writes import Writes

log = logging.getLogger("thermostat.pool_dispatcher")

ENDED_BADLY = {str(JobState.FAILED): "failed", str(JobState.TIMED_OUT): "timed out"}
"""A job that ends so is logged at warning with its id, tenant, type and why: the operator's terminal said nothing."""
ERROR_CHARS = 300  # of the worker's error in that line; the job's record keeps all of it

NOTIFIED_RESULT_BYTES = 2048
"""A completion notifies its result with the job id up to this size (base64, within NOTIFY's 8,000 bytes), so
a sync wait in another process answers without reading the job back; a larger one is read."""


Step = Callable[[str], Awaitable[None]]  # a test's barrier, awaited with the job id


class Runner:
    """Runs jobs on this process's machines. `before_send`, `before_execute` and `before_complete` are the ordering
    tests' seams (production passes none): each is awaited with the job id right before a step no injected call
    marks, so a test holds a run there while another actor lands. before_send precedes the lease's trust check
    that gates mark_sent (a test lets the trust lapse inside it); before_execute precedes the run's `sent` mark
    (reconcile's view) and the worker call; before_complete precedes the trust check that decides whether the
    completion hands the machine its next job running, and the read of the batches seen (whether it must poke
    placement). A wrapper on the repository call after each (mark_sent, complete) would hold past those steps."""

    def __init__(
        self,
        *,
        repo: PoolRepository,
        ownership: Ownership,
        client: WorkerClient,
        catalogue: CatalogueCache,
        drivers: Drivers,
        writes: Writes,
        waits: Waits,
        intake: Intake,
        fleet: Fleet,
        tasks: Tasks,
        events: Events,
        metrics: PoolMetrics,
        now: Callable[[], float],
        channel: str,
        local: Local,
        before_send: Step | None = None,
        before_execute: Step | None = None,
        before_complete: Step | None = None,
    ) -> None:
        self.repo = repo
        self.ownership = ownership
        self.client = client
        self.catalogue = catalogue
        self.drivers = drivers
        self.writes = writes
        self.waits = waits
        self.intake = intake
        self.fleet = fleet
        self.tasks = tasks
        self.events = events
        self.before_send = before_send
        self.before_execute = before_execute
        self.before_complete = before_complete
        self.metrics = metrics
        self.now = now
        self.channel = channel
        self.local = local
        self.hand_back = HandBack(
            repo=repo, ownership=ownership, catalogue=catalogue, writes=writes, fleet=fleet, events=events,
            metrics=metrics,
        )  # fmt: skip

    def start(self, assignment: Assignment, tenant_id: str, machine_type: str, image: str) -> None:
        """Run a machine this process just claimed, registered as its driver before the run starts."""
        driver = self.drivers.drive(assignment.machine_id)
        self.tasks.spawn(
            self.run(assignment, tenant_id, machine_type, image, driver=driver), f"pool-run-{assignment.job_id}"
        )

    async def take_next(self, machine_id: str, image: str, driver: object) -> Assignment | None:
        """take_next, written until the store answers; a lost answer is read back from the machine."""
        self.drivers.keep(machine_id, driver)
        assignment, retried = await self.writes.durably(
            f"machine {machine_id}: take_next",
            lambda: self.repo.jobs.take_next(machine_id, image, self.ownership.owner),
        )
        if assignment is None and retried:
            assignment = (await self.writes.read_back(machine_id, driver))[1]
        if assignment is None:
            self.drivers.release(machine_id, driver)
        return assignment

    async def run(
        self,
        assignment: Assignment | None,
        tenant_id: str,
        machine_type: str,
        image: str,
        *,
        driver: object | None = None,
    ) -> None:
        """Send jobs to one machine until it has no next job: each completion hands it the next in line."""
        if assignment is None:
            return
        machine_id = assignment.machine_id
        driver = self.drivers.drive(machine_id, driver)
        try:
            await self._run_jobs(assignment, tenant_id, machine_type, image, driver)
        finally:
            self.drivers.release(machine_id, driver)

    def run_booted(
        self, assignment: Assignment, tenant_id: str, machine_type: str, image: str, driver: object
    ) -> Awaitable[None]:
        """A booted machine's first job (fleet.py), inside the boot's task and under its driver."""
        return self.run(assignment, tenant_id, machine_type, image, driver=driver)

    async def _run_jobs(
        self, assignment: Assignment | None, tenant_id: str, machine_type: str, image: str, driver: object
    ) -> None:
        endpoint, token = (assignment.endpoint, assignment.token) if assignment else (None, None)
        # marked running before this task (a submit's claim, or a boot resuming a job a lost answer marked): the
        # lease was checked before that statement, and is again now that it answered, before anything goes out
        resumed = assignment is not None and assignment.sent
        trusted = self.ownership.trusted_for_call
        while assignment is not None:
            if resumed and assignment.sent and not trusted():
                # marked running by a statement that outlasted the lease's trust (a slow store), never sent
                log.warning("job %s not sent: the lease is no longer trusted for the call; requeued", assignment.job_id)
                await self._requeue(assignment, marked=True)
                return
            resumed = False
            if endpoint is None or token is None:
                address = await self.repo.machines.machine_address(assignment.machine_id)
                if address is None:
                    return
                endpoint, token = address
            if endpoint is None:
                return
            if not assignment.sent:  # claimed dispatched: the conditional send comes now
                if self.before_send is not None:
                    await self.before_send(assignment.job_id)
                if not trusted():
                    log.warning(
                        "job %s not sent: the instance lease is not trusted for the call; it waits in the queue again",
                        assignment.job_id,
                    )
                    await self._requeue(assignment, marked=False)
                    return
                job_id, machine_id = assignment.job_id, assignment.machine_id
                (sent, freed), retried = await self.writes.durably(
                    f"job {job_id}: mark_sent",
                    functools.partial(self.repo.jobs.mark_sent, job_id, machine_id, self.ownership.owner),
                )
                if sent and retried and not trusted():  # the outage outlasted the lease's trust
                    log.warning("job %s not sent: the lease lapsed while the store was away; requeued", job_id)
                    await self._requeue(assignment, marked=True)
                    return
                if not sent:
                    log.info("job %s was cancelled or taken over before it was sent: not sent", assignment.job_id)
                    self.events.emit(JobChanged(assignment.job_id))
                    if not freed:
                        return
                    self.local.idle[assignment.machine_id] = self.now()
                    self.events.emit(MachineFreed(tenant_id, machine_type, image))
                    current = self.catalogue.get(machine_type)
                    if current is None or current.image != image:
                        return
                    assignment = await self.take_next(assignment.machine_id, image, driver)
                    resumed = True
                    continue
            if self.before_execute is not None:
                await self.before_execute(assignment.job_id)
            attributes = {"pool.job_id": assignment.job_id, "pool.machine_id": assignment.machine_id}
            # pool.queue: from the submit (the database's clock) to now, recorded after the fact
            self.metrics.sent(machine_type, assignment.submitted_at)
            tracing.end_span(
                tracing.start_span("pool.queue", assignment.trace, attributes, start_time=assignment.submitted_at)
            )
            span = tracing.start_span("pool.execute", assignment.trace, attributes)
            started = self.now()
            self.drivers.sent(assignment.job_id)  # sent from here: reconcile must never requeue it
            with tracing.activated(span):  # the worker hop's span, and the machine's work, sit under it
                reply = await self.client.execute(
                    endpoint,
                    token,
                    assignment.payload,
                    deadline_seconds=assignment.timeout_seconds,
                    trace=tracing.current_headers(assignment.trace),
                )
            refused = None
            if reply.kind is ReplyKind.UNREACHABLE:  # no byte went out: the job may go to another machine
                refused = await self.hand_back.refused(assignment, reply, machine_type)
                if refused.handed_back:
                    tracing.end_span(span, f"handed back: {reply.error or 'worker unreachable'}")
                    return
            ended = self.now()  # idle from here: a reap racing the completion below reads the same instant
            duration = max(0.0, ended - started)
            outcome = (refused and refused.outcome) or decide_job_outcome(
                reply, timeout_seconds=assignment.timeout_seconds
            )
            tracing.end_span(span, None if outcome.state == JobState.COMPLETED else outcome.error or str(outcome.state))
            if self.before_complete is not None:
                await self.before_complete(assignment.job_id)
            current = self.catalogue.get(machine_type)
            keep_feeding = current is not None and current.image == image and not self.local.draining
            # the next job goes out right after this statement, which is then its conditional send (no
            # mark_sent): only while the lease is trusted for that call, as mark_sent is preceded by the check
            send_next = keep_feeding and trusted()
            # a batch of the key out during the statement may be one it could not see, nor the batch the machine
            # idle: both committed unseen by the other (the batch's answer pokes placement in every other order)
            key = SubmitKey(tenant_id, machine_type, image)
            batches_before = self.intake.batches_seen(key)
            with self.waits.completing(assignment.job_id):
                completion, retried = await self.writes.durably(
                    f"job {assignment.job_id}: completion",
                    functools.partial(
                        self.repo.jobs.complete,
                        CompletionWrite(
                            job_id=assignment.job_id,
                            machine_id=assignment.machine_id,
                            state=str(outcome.state),
                            result=outcome.result,
                            error=outcome.error,
                            duration_seconds=duration,
                            owner=self.ownership.owner,
                            retire=outcome.retire_machine,
                            take_next=keep_feeding,
                            send_next=send_next,
                            tenant_id=tenant_id,
                            machine_type=machine_type,
                            notified_result_bytes=NOTIFIED_RESULT_BYTES,
                            channel=self.channel,
                        ),
                    ),
                )
                if completion.job is not None:
                    result = outcome.result if completion.job.has_result else None
                    self.events.emit(JobFinished(assignment.job_id, Finished(job=completion.job, result=result)))
            if completion.job_state is not None:
                self.metrics.finished(machine_type, str(completion.job_state), self.now() - started)
                if str(completion.job_state) in ENDED_BADLY:  # the operator's one line on it (issue 35)
                    log.warning(
                        "job %s of tenant %s (type %s) %s: %s",
                        assignment.job_id, tenant_id, machine_type, ENDED_BADLY[str(completion.job_state)],
                        (outcome.error or "no reason given")[:ERROR_CHARS],
                    )  # fmt: skip
            if completion.job_state is None and retried:
                # an earlier attempt may have landed (result, usage and hand-off written) with its answer lost
                machine_state, held, provider_id = await self.writes.read_back(assignment.machine_id, driver)
                if machine_state == MachineState.STOPPING:
                    await self.fleet.finish_stop(assignment.machine_id, provider_id)
                    self.events.emit(PLACEMENT_WANTED)  # it may have yielded its slot (fair share): place again
                    return
                if machine_state is not None:
                    log.info("job %s: its completion had landed before the store went away", assignment.job_id)
                    assignment, resumed = held, True
                    continue
            if completion.job_state is None:
                log.warning(
                    "job %s finished on machine %s after this process lost it", assignment.job_id, assignment.machine_id
                )
                return
            if completion.machine_state == MachineState.STOPPING:
                if completion.yielded_to is not None and not outcome.retire_machine:
                    self.metrics.fair_share_retired("after_job")
                    log.warning(
                        "machine %s of tenant %s retired after its job for fair share: tenant %s waits at the "
                        "fleet cap",
                        assignment.machine_id, tenant_id, completion.yielded_to,
                    )  # fmt: skip
                else:
                    log.info("machine %s retired: %s", assignment.machine_id, outcome.error)
                await self.fleet.finish_stop(assignment.machine_id, completion.provider_id)
                if completion.yielded_to is not None:
                    self.events.emit(PLACEMENT_WANTED)  # the slot is free once the row is gone: the waiting tenant
                return
            if completion.machine_state == MachineState.WARM:
                self.local.idle[assignment.machine_id] = ended
                if batches_before != (self.intake.batches_seen(key)[0], False):
                    self.tasks.spawn(self.intake.place_after_batches(key), f"pool-place-after-{assignment.machine_id}")
                # a batch still gathering goes out: it sees the machine
                self.events.emit(MachineFreed(tenant_id, machine_type, image))
            assignment, resumed = completion.next_job, retried

    async def _requeue(self, assignment: Assignment, *, marked: bool) -> None:
        await self.writes.durably(
            f"job {assignment.job_id}: requeue",
            lambda: self.repo.jobs.requeue_unsent(
                assignment.job_id, assignment.machine_id, self.ownership.owner, marked=marked
            ),
        )
