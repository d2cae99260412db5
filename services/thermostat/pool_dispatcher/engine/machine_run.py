"""One machine's run: it sends the machine jobs until it has no next one, and returns how it ended (`RunEnded`).

The run holds what is the machine's while it runs (its driver token, its address, its key, the idle stamp it writes
when the machine goes warm) and never decides what follows its end: the runner does (runner.py). A job claimed
`dispatched` is made `running` by one conditional statement (mark_sent) right before its payload goes out, so a
cancel, a reclaim or a newer incarnation that landed since the claim wins and nothing is sent or metered.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from thermostat.chassis import tracing
from thermostat.chassis.clock import Clock
from thermostat.policy.pool.job_outcome import ReplyKind, decide_job_outcome
from thermostat.policy.pool.jobs import JobState
from thermostat.policy.pool.machines import MachineState
from thermostat.policy.pool.run_end import Ended
from thermostat.providers.pool.worker_client import WorkerClient

from ..metrics import PoolMetrics
from ..repository import Assignment, CompletionWrite, Finished, PoolRepository
from .catalogue import CatalogueCache
from .drivers import Drivers
from .hand_back import HandBack
from .intake import Intake
from .local import Local, SubmitKey
from .ownership import Ownership
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


@dataclass(frozen=True, slots=True, kw_only=True)
class RunParts:
    """What every run works with, the runner's."""

    repo: PoolRepository
    ownership: Ownership
    client: WorkerClient
    catalogue: CatalogueCache
    drivers: Drivers
    writes: Writes
    waits: Waits
    intake: Intake
    hand_back: HandBack
    metrics: PoolMetrics
    clock: Clock
    local: Local
    channel: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Seams:
    """The ordering tests' holds (Runner says where each stands); production has none."""

    before_send: Step | None = None
    before_execute: Step | None = None
    before_complete: Step | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEnded:
    """How a run ended (thermostat.policy.pool.run_end), and what the runner needs to carry out what follows."""

    how: Ended
    provider_id: str | None = None  # retired, handed back: what to stop
    unsent: bool = False  # freed before its job went out
    batch_raced: bool = False  # freed after a completion a batch of the key was out during
    yielded: bool = False  # retired: its slot may have gone to a tenant waiting at the fleet cap


LOST = RunEnded(how=Ended.LOST)
REQUEUED = RunEnded(how=Ended.REQUEUED)


class MachineRun:
    def __init__(self, parts: RunParts, seams: Seams, key: SubmitKey, assignment: Assignment, driver: object) -> None:
        self.parts = parts
        self.seams = seams
        self.key = key
        self.machine_id = assignment.machine_id
        self.driver = driver
        self.endpoint, self.token = assignment.endpoint, assignment.token

    async def jobs(self, assignment: Assignment | None, *, resumed: bool) -> RunEnded:
        """Send jobs until the machine has no next one. `resumed`: marked running before this step (a submit's
        claim, a boot resuming a job a lost answer marked, a next job taken): the lease was checked before that
        statement, and is again now that it answered, before anything goes out."""
        parts, trusted = self.parts, self.parts.ownership.trusted_for_call
        while assignment is not None:
            if resumed and assignment.sent and not trusted():
                # marked running by a statement that outlasted the lease's trust (a slow store), never sent
                log.warning("job %s not sent: the lease is no longer trusted for the call; requeued", assignment.job_id)
                return await self._requeue(assignment, marked=True)
            if self.endpoint is None or self.token is None:
                address = await parts.repo.machines.machine_address(self.machine_id)
                if address is None:
                    return LOST
                self.endpoint, self.token = address
            endpoint, token = self.endpoint, self.token
            if endpoint is None:
                return LOST
            if not assignment.sent:  # claimed dispatched: the conditional send comes now
                unsent = await self._mark_sent(assignment)
                if unsent is not None:
                    return unsent
            ended = await self._send(assignment, endpoint, token)
            if isinstance(ended, RunEnded):
                return ended
            assignment, resumed = ended
        return LOST

    async def _mark_sent(self, assignment: Assignment) -> RunEnded | None:
        """The claim's conditional send; how the run ended if it was not sent (None: sent)."""
        parts, trusted, job_id = self.parts, self.parts.ownership.trusted_for_call, assignment.job_id
        if self.seams.before_send is not None:
            await self.seams.before_send(job_id)
        if not trusted():
            log.warning(
                "job %s not sent: the instance lease is not trusted for the call; it waits in the queue again", job_id
            )
            return await self._requeue(assignment, marked=False)
        (sent, freed), retried = await parts.writes.durably(
            f"job {job_id}: mark_sent",
            functools.partial(parts.repo.jobs.mark_sent, job_id, self.machine_id, parts.ownership.owner),
        )
        if sent and retried and not trusted():  # the outage outlasted the lease's trust
            log.warning("job %s not sent: the lease lapsed while the store was away; requeued", job_id)
            return await self._requeue(assignment, marked=True)
        if sent:
            return None
        log.info("job %s was cancelled or taken over before it was sent: not sent", job_id)
        parts.waits.changed(job_id)
        if not freed:
            return LOST
        parts.local.idle[self.machine_id] = parts.clock.monotonic()
        return RunEnded(how=Ended.FREED, unsent=True)

    async def _send(
        self, assignment: Assignment, endpoint: str, token: str
    ) -> RunEnded | tuple[Assignment | None, bool]:
        """Send the job, write its end; how the run ended, or the next job the completion handed the machine."""
        parts, seams, (tenant_id, machine_type, image) = self.parts, self.seams, self.key
        if seams.before_execute is not None:
            await seams.before_execute(assignment.job_id)
        attributes = {"pool.job_id": assignment.job_id, "pool.machine_id": self.machine_id}
        # pool.queue: from the submit (the database's clock) to now, recorded after the fact
        parts.metrics.sent(machine_type, assignment.submitted_at)
        tracing.end_span(
            tracing.start_span("pool.queue", assignment.trace, attributes, start_time=assignment.submitted_at)
        )
        span = tracing.start_span("pool.execute", assignment.trace, attributes)
        started = parts.clock.monotonic()
        parts.drivers.sent(assignment.job_id)  # sent from here: reconcile must never requeue it
        with tracing.activated(span):  # the worker hop's span, and the machine's work, sit under it
            reply = await parts.client.execute(
                endpoint,
                token,
                assignment.payload,
                deadline_seconds=assignment.timeout_seconds,
                trace=tracing.current_headers(assignment.trace),
            )
        refused = None
        if reply.kind is ReplyKind.UNREACHABLE:  # no byte went out: the job may go to another machine
            refused = await parts.hand_back.refused(assignment, reply, machine_type)
            if refused.handed_back:
                tracing.end_span(span, f"handed back: {reply.error or 'worker unreachable'}")
                return RunEnded(how=Ended.HANDED_BACK, provider_id=refused.provider_id)
        ended = parts.clock.monotonic()  # idle from here: a reap racing the completion below reads the same instant
        outcome = (refused and refused.outcome) or decide_job_outcome(reply, timeout_seconds=assignment.timeout_seconds)
        tracing.end_span(span, None if outcome.state == JobState.COMPLETED else outcome.error or str(outcome.state))
        if seams.before_complete is not None:
            await seams.before_complete(assignment.job_id)
        current = parts.catalogue.get(machine_type)
        keep_feeding = current is not None and current.image == image and not parts.local.draining
        # the next job goes out right after this statement, which is then its conditional send (no
        # mark_sent): only while the lease is trusted for that call, as mark_sent is preceded by the check
        send_next = keep_feeding and parts.ownership.trusted_for_call()
        # a batch of the key out during the statement may be one it could not see, nor the batch the machine
        # idle: both committed unseen by the other (the batch's answer pokes placement in every other order)
        batches_before = parts.intake.batches_seen(self.key)
        with parts.waits.completing(assignment.job_id):
            completion, retried = await parts.writes.durably(
                f"job {assignment.job_id}: completion",
                functools.partial(
                    parts.repo.jobs.complete,
                    CompletionWrite(
                        job_id=assignment.job_id,
                        machine_id=self.machine_id,
                        state=str(outcome.state),
                        result=outcome.result,
                        error=outcome.error,
                        duration_seconds=max(0.0, ended - started),
                        owner=parts.ownership.owner,
                        retire=outcome.retire_machine,
                        take_next=keep_feeding,
                        send_next=send_next,
                        tenant_id=tenant_id,
                        machine_type=machine_type,
                        notified_result_bytes=NOTIFIED_RESULT_BYTES,
                        channel=parts.channel,
                    ),
                ),
            )
            if completion.job is not None:
                result = outcome.result if completion.job.has_result else None
                parts.waits.finished(assignment.job_id, Finished(job=completion.job, result=result))
        if completion.job_state is not None:
            parts.metrics.finished(machine_type, str(completion.job_state), parts.clock.monotonic() - started)
            if str(completion.job_state) in ENDED_BADLY:  # the operator's one line on it (issue 35)
                log.warning(
                    "job %s of tenant %s (type %s) %s: %s",
                    assignment.job_id, tenant_id, machine_type, ENDED_BADLY[str(completion.job_state)],
                    (outcome.error or "no reason given")[:ERROR_CHARS],
                )  # fmt: skip
        if completion.job_state is None and retried:
            # an earlier attempt may have landed (result, usage and hand-off written) with its answer lost
            machine_state, held, provider_id = await parts.writes.read_back(self.machine_id, self.driver)
            if machine_state == MachineState.STOPPING:  # it may have yielded its slot (fair share): place again
                return RunEnded(how=Ended.RETIRED, provider_id=provider_id, yielded=True)
            if machine_state is not None:
                log.info("job %s: its completion had landed before the store went away", assignment.job_id)
                return held, True
        if completion.job_state is None:
            log.warning("job %s finished on machine %s after this process lost it", assignment.job_id, self.machine_id)
            return LOST
        if completion.machine_state == MachineState.STOPPING:
            if completion.yielded_to is not None and not outcome.retire_machine:
                parts.metrics.fair_share_retired("after_job")
                log.warning(
                    "machine %s of tenant %s retired after its job for fair share: tenant %s waits at the fleet cap",
                    self.machine_id, tenant_id, completion.yielded_to,
                )  # fmt: skip
            else:
                log.info("machine %s retired: %s", self.machine_id, outcome.error)
            # the slot is free once the row is gone: the waiting tenant's
            return RunEnded(
                how=Ended.RETIRED, provider_id=completion.provider_id, yielded=completion.yielded_to is not None
            )
        if completion.machine_state == MachineState.WARM:
            parts.local.idle[self.machine_id] = ended
            raced = batches_before != (parts.intake.batches_seen(self.key)[0], False)
            return RunEnded(how=Ended.FREED, batch_raced=raced)
        return completion.next_job, retried

    async def _requeue(self, assignment: Assignment, *, marked: bool) -> RunEnded:
        parts = self.parts
        await parts.writes.durably(
            f"job {assignment.job_id}: requeue",
            lambda: parts.repo.jobs.requeue_unsent(
                assignment.job_id, self.machine_id, parts.ownership.owner, marked=marked
            ),
        )
        return REQUEUED
