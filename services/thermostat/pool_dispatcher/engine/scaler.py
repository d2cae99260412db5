"""Scaler: the periodic pass that keeps this process's part of the pool in order.

Every `scaler_seconds` (thermostat.chassis.periodic.Periodic, with its bounded stop), one pass: keep the instance
lease (ownership.py), re-listen if the connection dropped, reclaim lapsed instances' rows, reconcile claims that
lost their sender, apply a newer catalogue, boot machines a lost placement answer left unbooted, place (fair share
at the fleet cap included: placement's), adopt machines a deploy released (fleet.py; a notification usually brings
them at once), reap machines idle past their type's cool-down (or marked to give their slot up), probe the warm
ones (N misses retire; a pass where all fail is this process's network), and retry failed stops. A pass that
raises is logged and the next one retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from thermostat.chassis.clock import Clock
from thermostat.chassis.periodic import Periodic
from thermostat.policy.pool.health import judge_health, machines_to_probe
from thermostat.policy.pool.machines import Machine, MachineState
from thermostat.policy.pool.reaping import RetireReason, plan_reaping
from thermostat.providers.pool.backend import MachineHandle

from ..metrics import PoolMetrics
from ..repository import PoolRepository
from .catalogue import CatalogueCache
from .drivers import Drivers
from .fleet import Fleet, RetirePlan
from .local import Local
from .ownership import Ownership, lease_name
from .placement import Placement
from .tasks import Tasks
from .waits import Waits

log = logging.getLogger("thermostat.pool_dispatcher")

STOP_GRACE_SECONDS = 1.0
"""How long close waits for a scaler pass in flight before cancelling it (and again for it to unwind)."""

ABANDONED = "the pool lost track of the job while it ran (its sender here ended unexpectedly); not retried"
"""A running job's error when no task of its process drives it any more (reconcile)."""


class Scaler:
    def __init__(
        self,
        *,
        repo: PoolRepository,
        ownership: Ownership,
        catalogue: CatalogueCache,
        drivers: Drivers,
        fleet: Fleet,
        placement: Placement,
        tasks: Tasks,
        waits: Waits,
        metrics: PoolMetrics,
        listen: Callable[[], Awaitable[None]],
        every_seconds: float,
        clock: Clock,
        local: Local,
    ) -> None:
        self.repo = repo
        self.ownership = ownership
        self.catalogue = catalogue
        self.drivers = drivers
        self.fleet = fleet
        self.placement = placement
        self.tasks = tasks
        self.waits = waits
        self.metrics = metrics
        self.local = local
        self._listen = listen
        # a pass in flight at close gets a second to end cleanly (a stop and its forget not cut apart), then it is
        # cancelled: close stops every machine of the process itself, within the service's termination grace
        self.clock = clock
        self.loop = Periodic(
            f"pool-scaler-{ownership.instance_id}", every_seconds, self.scaler_pass, log=log, what="scaler pass",
            clock=clock, stop_grace=STOP_GRACE_SECONDS,
        )  # fmt: skip

    async def scaler_pass(self) -> None:
        """Reclaim lapsed instances, apply the catalogue, place, reap, probe, retry failed stops."""
        await self.ownership.keep()
        await self._listen()
        await self.reclaim()
        await self.reconcile()
        await self.catalogue.refresh()
        await self.placement.recover_unbooted()
        await self.placement.place()
        await self.fleet.adopt_released()  # a deploy's release whose notification this process missed
        await self.reap()
        await self.probe()
        for machine_id, provider_id in await self.repo.machines.stopping(self.ownership.owner):
            await self.fleet.finish_stop(machine_id, provider_id)

    async def reclaim(self) -> None:
        owner = self.ownership.owner
        for lapsed in await self.repo.ownership.lapsed_owners(owner):
            jobs, machines = await self.repo.ownership.reclaim(lapsed, owner)
            self.metrics.takeover(lease_name(lapsed.instance))
            log.warning(
                "reclaimed instance %s (term %d): %d in-flight job(s) failed, %d machine(s) to stop",
                lapsed.instance,
                lapsed.term,
                jobs,
                machines,
            )

    async def reconcile(self) -> None:
        """Requeue the unsent jobs on this process's busy machines that no task of it drives: a claim whose
        answer was lost (a submit's, when the store went away as it landed) would otherwise hold the machine
        under this live owner, which no reclaim touches. Dispatched means never sent; running means never sent
        only for a submit that did not answer (its sender never started), so only those are requeued running. Any
        other running job no task drives (its sender ended on an unexpected error) fails, and its machine retires."""
        owner = self.ownership.owner
        own = [r for r in await self.repo.machines.own_machines(owner) if r.machine.state is MachineState.BUSY]
        await self.drivers.claims_answered()  # claims the read may have seen
        for row in own:
            if row.job_id is None or self.drivers.driven(row.machine.id):
                continue
            unanswered = self.drivers.was_unanswered(row.job_id)
            driver = self.drivers.drive(row.machine.id)  # held while requeueing: no step resumes the job meanwhile
            try:
                requeued = await self.repo.jobs.requeue_unsent(row.job_id, row.machine.id, owner, marked=unanswered)
            finally:
                self.drivers.release(row.machine.id, driver)
            self.drivers.sent(row.job_id)
            if requeued:
                log.warning("job %s: its claim of machine %s had no sender; requeued", row.job_id, row.machine.id)
                self.placement.poke()
                continue
            # running with no sender here that may be requeued: nobody will report it, and the machine would stay
            # busy (billed, holding a cap slot) until this process's rows are reclaimed
            failed, retired, provider_id = await self.repo.jobs.abandon_running(
                row.job_id, row.machine.id, owner, ABANDONED
            )
            if failed:
                log.warning("job %s on machine %s: %s; failed, machine retired", row.job_id, row.machine.id, ABANDONED)
                self.waits.changed(row.job_id)
            if retired:
                self.tasks.spawn(self.fleet.finish_stop(row.machine.id, provider_id), f"pool-stop-{row.machine.id}")

    async def reap(self) -> None:
        """Stop this process's machines idle past their type's cool-down (monotonic: immune to clock steps)."""
        now = self.clock.monotonic()
        own = await self.repo.machines.own_machines(self.ownership.owner)
        seen = []
        for row in own:
            machine = row.machine
            if machine.state is MachineState.WARM:
                # first seen here (claimed from another process, or adopted): its row's clock says since when
                idle = self.local.idle.setdefault(machine.id, now - (row.idle_seconds or 0.0))
                seen.append(replace(machine, idle_since=idle))
        for retirement in plan_reaping(machines=seen, catalogue=self.catalogue.catalogue, now=now):
            provider = next((r.provider_id for r in own if r.machine.id == retirement.machine_id), None)
            plan = RetirePlan(machine_id=retirement.machine_id, provider_id=provider, reason=str(retirement.reason))
            if await self.fleet.retire(plan):
                log.info("machine %s retired: %s", retirement.machine_id, retirement.reason)
                if retirement.reason is RetireReason.FAIR_SHARE:
                    self.placement.poke()  # its slot was kept for a tenant waiting at the fleet cap: it boots now

    async def probe(self) -> None:
        """Probe this process's warm machines at once; N misses retire, a pass where all fail is ours."""
        owner = self.ownership.owner
        catalogue = self.catalogue.catalogue
        own = [r for r in await self.repo.machines.own_machines(owner) if r.machine.state is MachineState.WARM]
        probed = machines_to_probe([r.machine for r in own], catalogue)
        if not probed:
            return
        by_id = {r.machine.id: r for r in own}
        backends = self.fleet.backends

        async def one(machine: Machine) -> bool:
            row = by_id[machine.id]
            if row.provider_id is None or row.endpoint is None or row.backend not in backends.by_kind:
                return False
            return await backends.get(row.backend).health(
                MachineHandle(provider_id=row.provider_id, endpoint=row.endpoint, region=row.region)
            )

        answers = await asyncio.gather(*(one(m) for m in probed))
        verdict = judge_health(
            machines=probed, probes={m.id: ok for m, ok in zip(probed, answers, strict=True)}, catalogue=catalogue
        )
        if verdict.local_fault:
            log.warning("every probed machine missed its health check: treated as this process's network")
        # only counts that changed: a pass over a healthy fleet writes nothing (bench/pool_scaler.py)
        changed = {m: n for m, n in verdict.misses.items() if n != by_id[m].machine.health_misses}
        await self.repo.machines.record_misses(changed, self.ownership.owner)

        async def retire(machine_id: str) -> None:
            plan = RetirePlan(
                machine_id=machine_id, provider_id=by_id[machine_id].provider_id, reason="health checks missed"
            )
            if await self.fleet.retire(plan):
                log.warning("machine %s retired: stopped answering health checks", machine_id)

        await asyncio.gather(*(retire(machine_id) for machine_id in verdict.retire))
