"""Runner: starts one machine's run (machine_run.py) under its driver, and carries out what follows its end.

A run starts when a machine of this process is handed a job: a submit's warm claim (the facade starts it with the
claim's driver token), placement handing an idle warm machine its next job, a booted machine's first (`boot`: the
fleet boots it, then its run goes on under the boot's driver). The run returns how it ended (`RunEnded`); what
follows is thermostat.policy.pool.run_end's (`after_run`), carried out here while the run's driver still holds the
machine: offered to the key's next submit, placed after a racing batch, handed its next job, stopped.

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

import logging
from collections.abc import Awaitable
from dataclasses import dataclass

from thermostat.policy.pool.run_end import after_run

from ..repository import Assignment
from .fleet import BootPlan, Fleet
from .local import SubmitKey, WantsPlacement
from .machine_run import MachineRun, RunEnded, RunParts, Seams, Step
from .tasks import Tasks

log = logging.getLogger("thermostat.pool_dispatcher")


@dataclass(eq=False, kw_only=True)
class Runner:
    """Runs jobs on this process's machines. `before_send`, `before_execute` and `before_complete` are the ordering
    tests' seams (production passes none), handed to each run as it starts: each is awaited with the job id right
    before a step no injected call marks: the lease's trust check that gates mark_sent; the run's `sent` mark
    (reconcile's view) and the worker call; the trust check that decides whether the completion hands the machine
    its next job running, and the read of the batches seen. A wrapper on the repository call after each would hold
    past those steps."""

    parts: RunParts
    fleet: Fleet
    tasks: Tasks
    wants_placement: WantsPlacement
    capped: bool  # a fleet cap: a machine freed may be the slot a tenant waiting at it needs
    before_send: Step | None = None
    before_execute: Step | None = None
    before_complete: Step | None = None

    def start(self, assignment: Assignment, key: SubmitKey, driver: object | None = None) -> None:
        """Run a machine this process just claimed, registered as its driver before the run starts."""
        driver = self.parts.drivers.drive(assignment.machine_id, driver)
        self.tasks.spawn(self._run(assignment, key, driver), f"pool-run-{assignment.job_id}")

    def boot(self, plan: BootPlan) -> Awaitable[None]:
        """The boot of the plan's machine, then its first job's run, registered as its driver before it starts."""
        return self._boot(plan, self.parts.drivers.drive(plan.machine_id))

    async def take_next(self, machine_id: str, image: str, driver: object) -> Assignment | None:
        """take_next, written until the store answers; a lost answer is read back from the machine."""
        parts = self.parts
        parts.drivers.keep(machine_id, driver)
        assignment, retried = await parts.writes.durably(
            f"machine {machine_id}: take_next",
            lambda: parts.repo.jobs.take_next(machine_id, image, parts.ownership.owner),
        )
        if assignment is None and retried:
            assignment = (await parts.writes.read_back(machine_id, driver))[1]
        if assignment is None:
            parts.drivers.release(machine_id, driver)
        return assignment

    async def _boot(self, plan: BootPlan, driver: object) -> None:
        try:
            first = await self.fleet.boot(plan, driver)
            if first is not None:
                await self._run(
                    first, SubmitKey(plan.tenant_id, plan.machine_type.name, plan.machine_type.image), driver
                )
        except Exception:
            self.parts.local.boot_died.add(plan.machine_id)  # perhaps after the provider's create: released unbooted
            raise
        finally:
            self.parts.drivers.release(plan.machine_id, driver)

    async def _run(self, assignment: Assignment, key: SubmitKey, driver: object) -> None:
        """The machine's run under its driver, then what follows each end, until nothing does (a next job taken runs
        on)."""
        seams = Seams(
            before_send=self.before_send, before_execute=self.before_execute, before_complete=self.before_complete
        )
        run = MachineRun(self.parts, seams, key, assignment, self.parts.drivers.drive(assignment.machine_id, driver))
        try:
            ended = await run.jobs(assignment, resumed=assignment.sent)
            while (taken := await self._follow(ended, run)) is not None:
                ended = await run.jobs(taken, resumed=True)
        finally:
            self.parts.drivers.release(run.machine_id, run.driver)

    async def _follow(self, ended: RunEnded, run: MachineRun) -> Assignment | None:
        """Carry out what follows the run's end; the next job it was handed, if it runs on."""
        current = self.parts.catalogue.get(run.key.machine_type)
        follows = after_run(
            ended.how,
            unsent=ended.unsent,
            batch_raced=ended.batch_raced,
            yielded=ended.yielded,
            image_current=current is not None and current.image == run.key.image,
            capped=self.capped,
        )
        if follows.place_after_batches:
            self.tasks.spawn(self.parts.intake.place_after_batches(run.key), f"pool-place-after-{run.machine_id}")
        if follows.offer:  # a batch still gathering goes out: it sees the machine
            self.parts.intake.may_take(run.key)
        if follows.place_now:  # a slot free now: the tenant's (a stopping machine is not its), or one at the fleet cap
            self.wants_placement()
        if follows.take_next:
            return await self.take_next(run.machine_id, run.key.image, run.driver)
        if follows.stop:
            await self.fleet.finish_stop(run.machine_id, ended.provider_id)
        if follows.place_after_stop:  # and the fleet's, once the row is gone
            self.wants_placement()
        return None
