"""Fleet: this process's machines at their provider. It carries out what placement and the scaler decide, given as
values: a `BootPlan` (start the machine a placement inserted, poll its health, hand it its job) and a `RetirePlan`
(set it stopping, stop it at its provider, forget its row).

A boot runs outside the placement lock, traced as pool.boot under its job's caller. The provider's start is made
only while the instance lease is trusted for the call; its answer is recorded (written until the store takes it),
then the machine's health is polled until it answers or the type's boot timeout passes, or (a backend that
`ReportsEnd`) its process or container is seen to have exited: that boot fails at once with the exit code and the
machine's last lines of output. A machine that answered is warm, or busy with its dispatched job, which the boot
returns to the runner, whose run sends it at once. A failed boot stops what the provider started, forgets the row
and puts its job back in the queue (or fails it: its type is gone).
A stop that fails at the provider keeps the row (counted) for the next pass. Idle times are kept in `Local`
(local.py), on the monotonic clock, for the reaper, seeded from the row's own idle clock (idle_since, migration
0019) when a machine comes to this process from another (a deploy's release, adopted after a probe) or from this
id's last incarnation (recover), so it keeps what is left of its cool-down.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from thermostat.chassis import tracing
from thermostat.chassis.clock import Clock
from thermostat.policy.pool.departure import Adoption, adopt
from thermostat.policy.pool.jobs import JobState
from thermostat.policy.pool.machine_type import BackendKind, MachineType
from thermostat.policy.pool.machines import MachineState
from thermostat.providers.pool.backend import BackendError, MachineHandle, MachineSpec, ReportsEnd

from ..metrics import PoolMetrics
from ..repository import Assignment, OwnMachine, PoolRepository
from .catalogue import Backends
from .drivers import Drivers
from .intake import Intake
from .local import Local, SubmitKey, WantsPlacement
from .ownership import Ownership
from .waits import Waits
from .writes import Writes

log = logging.getLogger("thermostat.pool_dispatcher")


@dataclass(frozen=True, slots=True, kw_only=True)
class BootPlan:
    """A machine row placement (or a hint, or a recovery) inserted, to boot: its job, if any, and that job's trace."""

    machine_id: str
    tenant_id: str
    machine_type: MachineType
    token: str
    job_id: str | None = None
    trace: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetirePlan:
    """A machine to retire (if it is in one of `states`) and stop: the reaper's, the prober's, the shutdown's."""

    machine_id: str
    provider_id: str | None
    reason: str
    states: tuple[str, ...] = ("warm",)


class BootFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Fleet:
    def __init__(
        self,
        *,
        repo: PoolRepository,
        ownership: Ownership,
        backends: Backends,
        drivers: Drivers,
        writes: Writes,
        intake: Intake,
        waits: Waits,
        wants_placement: WantsPlacement,
        metrics: PoolMetrics,
        clock: Clock,
        health_poll_seconds: float,
        local: Local,
    ) -> None:
        self.repo = repo
        self.ownership = ownership
        self.backends = backends
        self.drivers = drivers
        self.writes = writes
        self.intake = intake
        self.waits = waits
        self.wants_placement = wants_placement
        self.metrics = metrics
        self.clock = clock  # its monotonic reading stamps idle times and times boots
        self.health_poll_seconds = health_poll_seconds
        self.local = local

    # boot

    async def boot(self, plan: BootPlan, driver: object) -> Assignment | None:
        """Boot the plan's machine under the caller's driver token; the job it was handed, to send now (None: warm,
        or its boot failed)."""
        span = tracing.start_span(
            "pool.boot", plan.trace, {"pool.machine_id": plan.machine_id, "pool.machine_type": plan.machine_type.name}
        )
        try:
            with tracing.activated(span):  # the provider's calls and the health polls sit under the boot
                handle = await self._start_and_poll(plan)
        except BootFailed as failed:
            tracing.end_span(span, failed.reason)
            return None
        except BaseException:  # cancelled mid-boot (shutdown)
            tracing.end_span(span, "the boot was interrupted")
            raise
        tracing.end_span(span)
        return await self._ready(plan, handle, driver)

    async def _start_and_poll(self, plan: BootPlan) -> MachineHandle:
        """Start the machine and poll its health until it answers; BootFailed with the reason otherwise."""
        machine_id, machine_type = plan.machine_id, plan.machine_type
        kind, name = str(machine_type.backend), machine_type.name
        if not self.ownership.trusted_for_call():
            reason = "not started: the instance lease is not trusted for the call"
            await self.boot_failed(machine_id, None, reason, kind, name)
            raise BootFailed(reason)
        spec = MachineSpec(
            machine_id=machine_id, tenant_id=plan.tenant_id, machine_type=machine_type, worker_token=plan.token
        )
        try:
            backend = self.backends.get(kind)
            handle = await backend.start(spec)
        except BackendError as error:
            await self.boot_failed(machine_id, None, f"start failed: {error}", kind, name)
            raise BootFailed(f"start failed: {error}") from None
        recorded, _ = await self.writes.durably(  # idempotent: the same values again while the machine is starting
            f"machine {machine_id}: record_started",
            lambda: self.repo.machines.record_started(
                machine_id,
                provider_id=handle.provider_id,
                endpoint=handle.endpoint,
                region=handle.region,
                owner=self.ownership.owner,
            ),
        )
        if not recorded:
            log.warning("machine %s could not be recorded (reclaimed or cancelled): stopping it", machine_id)
            await self.stop_quietly(handle.provider_id, kind)
            raise BootFailed("the machine's row could not be recorded")
        booted_at = self.clock.monotonic()
        while not await backend.health(handle):
            # a machine whose process has exited fails at once, saying why (issue 35: not at the boot timeout)
            ended = await backend.ended(handle, spec) if isinstance(backend, ReportsEnd) else None
            if ended is not None:
                await self.boot_failed(machine_id, handle.provider_id, ended, kind, name)
                raise BootFailed(ended)
            if self.clock.monotonic() - booted_at >= machine_type.boot_timeout_seconds:
                reason = f"no health answer within {machine_type.boot_timeout_seconds:g} s"
                await self.boot_failed(machine_id, handle.provider_id, reason, kind, name)
                raise BootFailed(reason)
            await self.clock.sleep(self.health_poll_seconds)
        return handle

    async def _ready(self, plan: BootPlan, handle: MachineHandle, driver: object) -> Assignment | None:
        """The machine answered: warm, or busy with its dispatched job, which it returns to be sent at once."""
        machine_id, machine_type, tenant_id = plan.machine_id, plan.machine_type, plan.tenant_id
        (state, assignment), retried = await self.writes.durably(
            f"machine {machine_id}: ready", lambda: self.repo.machines.machine_ready(machine_id, self.ownership.owner)
        )
        if state is None and retried:  # an earlier attempt may have landed: read the machine back
            state, assignment, _ = await self.writes.read_back(machine_id, driver)
            if assignment is not None and assignment.job_id != plan.job_id:
                assignment = None  # not the job placement gave this boot
        if state is None:
            log.warning("machine %s booted after this process lost it: stopping it", machine_id)
            await self.stop_quietly(handle.provider_id, str(machine_type.backend))
            return None
        self.local.idle[machine_id] = self.clock.monotonic()
        log.info("machine %s (%s, tenant %s) answered its health check", machine_id, machine_type.name, tenant_id)
        self.wants_placement(at_cap=True)  # fair share never takes a booting machine: this one may be the slot
        if assignment is not None:
            return replace(assignment, machine_id=machine_id, endpoint=handle.endpoint, token=plan.token)
        self.freed(SubmitKey(tenant_id, machine_type.name, machine_type.image))
        self.wants_placement()  # queued work of the tenant may be waiting for exactly this machine
        return None

    def freed(self, key: SubmitKey) -> None:
        """A machine of the key is warm here with no job: the key's next submit may claim it (its gathering batch goes
        out at once), and under a fleet cap placement runs (its slot may be a waiting tenant's)."""
        self.intake.may_take(key)
        self.wants_placement(at_cap=True)

    async def boot_failed(
        self, machine_id: str, provider_id: str | None, reason: str, kind: str, machine_type: str
    ) -> None:
        log.warning("machine %s failed to boot: %s", machine_id, reason)
        self.metrics.boot_failed(machine_type, kind)
        self.local.outlooks.clear()  # a slot under a tenant cap is free: placement may act on the next submit
        if provider_id is not None:
            await self.stop_quietly(provider_id, kind)
        failed, _ = await self.writes.durably(
            f"machine {machine_id}: boot_failed",
            lambda: self.repo.machines.boot_failed(
                machine_id, self.ownership.owner, f"machine {machine_id} failed to boot: {reason}"
            ),
        )
        for job_id, state in failed.items():
            if state == JobState.FAILED:
                self.waits.changed(job_id)
                log.info("job %s failed: its machine type was removed while the machine booted", job_id)
            else:
                log.info("job %s waits for capacity again", job_id)

    # stop

    async def retire(self, plan: RetirePlan) -> bool:
        """Set the machine stopping (if it is in one of the plan's states), then stop it; whether it was retired."""
        retired, recorded_provider = await self.repo.machines.retire(
            plan.machine_id, self.ownership.owner, reason=plan.reason, states=plan.states
        )
        if not retired:
            return False
        await self.finish_stop(plan.machine_id, recorded_provider or plan.provider_id)
        return True

    async def finish_stop(self, machine_id: str, provider_id: str | None) -> None:
        """Stop at the provider, then forget the row; a failed stop keeps it (counted) for the next pass."""
        self.local.idle.pop(machine_id, None)
        self.local.outlooks.clear()  # a slot under a tenant cap is free: placement may act on the next submit
        if provider_id is not None:
            if not self.ownership.trusted_for_call():
                log.warning(
                    "machine %s: not stopped now (the instance lease is not trusted); the next pass retries it",
                    machine_id,
                )
                return
            try:
                kind = await self.repo.machines.machine_backend(machine_id) or BackendKind.LOCAL
                await self.backends.get(kind).stop(provider_id)
            except (BackendError, OSError) as error:
                log.warning("machine %s: stop failed (%s); the next pass retries it", machine_id, error)
                return
        await self.repo.machines.forget_machine(machine_id, self.ownership.owner)

    async def stop_quietly(self, provider_id: str, kind: str) -> None:
        try:
            await self.backends.get(kind).stop(provider_id)
        except (BackendError, OSError) as error:
            log.error("provider machine %s: stop failed: %s", provider_id, error)

    async def recover(self) -> None:
        """After a restart under the same id: keep the warm machines that answer, with the cool-down left on their
        row's idle clock; stop the rest (thermostat.policy.pool.departure.adopt)."""
        for row in await self.repo.machines.own_machines(self.ownership.owner):
            healthy = row.machine.state is MachineState.WARM and await self._answers(row)
            kept = adopt(state=row.machine.state, healthy=healthy, idle_seconds=row.idle_seconds)
            if kept.verdict is Adoption.KEEP:
                self.local.idle[row.machine.id] = self.clock.monotonic() - kept.idle_seconds
            else:
                await self.retire(
                    RetirePlan(
                        machine_id=row.machine.id,
                        provider_id=row.provider_id,
                        reason="not found after restart",
                        states=("warm", "stopping"),
                    )
                )

    async def adopt_released(self) -> int:
        """Adopt the machines a deploy released (any instance's, this id's included): each is probed first, then
        taken warm with the cool-down left on its row's idle clock, or taken stopping and stopped (no answer: never
        reused). Another process adopting the same machine first is fine: one adoption wins. How many were kept."""
        kept = 0
        for row in await self.repo.ownership.released_machines():
            healthy = await self._answers(row)
            verdict = adopt(state=row.machine.state, healthy=healthy, idle_seconds=row.idle_seconds)
            taken = await self.repo.ownership.adopt_released(
                row.machine.id, self.ownership.owner, healthy=verdict.verdict is Adoption.KEEP
            )
            if taken is None:
                continue  # another process adopted it first
            state, idle_seconds = taken
            if state == MachineState.WARM:
                kept += 1
                self.local.idle[row.machine.id] = self.clock.monotonic() - max(0.0, idle_seconds or 0.0)
                log.info("machine %s adopted after a deploy (idle %.1f s)", row.machine.id, idle_seconds or 0.0)
                self.freed(SubmitKey(row.machine.tenant_id, row.machine.machine_type, row.machine.image))
            else:
                log.warning("machine %s released by a deploy did not answer its probe: stopping it", row.machine.id)
                await self.finish_stop(row.machine.id, row.provider_id)
        if kept:
            self.wants_placement()  # queued work may be waiting for exactly these machines
        return kept

    async def _answers(self, row: OwnMachine) -> bool:
        if not (row.provider_id and row.endpoint and row.backend in self.backends.by_kind):
            return False
        try:
            return await self.backends.get(row.backend).health(
                MachineHandle(provider_id=row.provider_id, endpoint=row.endpoint, region=row.region)
            )
        except (BackendError, OSError):
            return False
