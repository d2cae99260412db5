"""The runner's hand-back (issue 29): a job whose machine could not be reached before any byte was sent.

thermostat.policy.pool.hand_back decides; this carries it out for the runner (runner.py), right after
the worker client answered UNREACHABLE and before any completion is written:
- HAND_BACK: one statement (repository/jobs.sql `hand_back`) retires the machine and queues the job again in its place,
  with no usage event; the run ends `handed back`, and the runner stops the machine between two placement passes
  (thermostat.policy.pool.run_end). The job's caller keeps waiting: a sync wait here re-reads it, one in another
  process is notified by whichever process completes it.
- GIVE_UP, or a HAND_BACK that a cancel or a reclaim beat (the job is no longer running here): the runner records
  the end with its ordinary completion statement, which keeps a cancel, writes the one usage event and retires
  the machine; a GIVE_UP's error names each machine that refused the job and why.
Each refusal counts in `thermostat_pool_jobs_refused_total` and logs a line naming the machine, its type and the
reason, so a flapping backend shows.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from thermostat.policy.pool.hand_back import HandBackAction, decide_hand_back
from thermostat.policy.pool.job_outcome import JobOutcome, WorkerReply

from ..metrics import PoolMetrics
from ..repository import Assignment, PoolRepository
from .catalogue import CatalogueCache
from .ownership import Ownership
from .writes import Writes

log = logging.getLogger("thermostat.pool_dispatcher")


@dataclass(frozen=True, slots=True, kw_only=True)
class Refused:
    """What the runner does after a refusal: end the run (`handed_back`: the machine to stop is `provider_id`), or
    complete the job with `outcome` (None: the ordinary outcome of the reply, as before issue 29: a cancel or a
    reclaim beat the hand-back)."""

    handed_back: bool
    outcome: JobOutcome | None = None
    provider_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HandBack:
    repo: PoolRepository
    ownership: Ownership
    catalogue: CatalogueCache
    writes: Writes
    metrics: PoolMetrics

    async def refused(self, assignment: Assignment, reply: WorkerReply, machine_type: str) -> Refused:
        """Carry out the hand-back policy for an UNREACHABLE reply to the job on its machine."""
        job_id, machine_id = assignment.job_id, assignment.machine_id
        prior, _ = await self.writes.durably(
            f"job {job_id}: refused_by", functools.partial(self.repo.jobs.refused_by, job_id)
        )
        decision = decide_hand_back(reply, machine_id=machine_id, refused_before=prior)
        refusal = decision.refusal
        if decision.action is HandBackAction.NOT_REFUSED or refusal is None:
            return Refused(handed_back=False)
        kind = self.catalogue.get(machine_type)
        backend = str(kind.backend) if kind is not None else "unknown"
        self.metrics.refusal(machine_type, backend, reply.cause or "network", str(decision.action))
        if decision.action is HandBackAction.GIVE_UP:
            log.warning(
                "job %s failed: machine %s (%s, %s) could not be reached before it was sent (%s), after %d "
                "machine(s) refused it before",
                job_id,
                machine_id,
                machine_type,
                backend,
                refusal.reason,
                len(prior),
            )
            return Refused(handed_back=False, outcome=decision.outcome)
        handed, _ = await self.writes.durably(
            f"job {job_id}: hand_back",
            functools.partial(self.repo.jobs.hand_back, job_id, machine_id, self.ownership.owner, refusal),
        )
        if not handed.handed_back:
            log.info("job %s: a cancel or a reclaim landed before its hand-back; recorded as it stands", job_id)
            return Refused(handed_back=False)
        log.warning(
            "job %s handed back: machine %s (%s, %s) could not be reached before it was sent (%s); machine retired, "
            "job queued again in its place",
            job_id,
            machine_id,
            machine_type,
            backend,
            refusal.reason,
        )
        return Refused(handed_back=True, provider_id=handed.provider_id)
