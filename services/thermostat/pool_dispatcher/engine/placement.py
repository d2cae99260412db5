"""Placement: which warm machine gets this job, and which machines start for the queue.

Which warm machine gets a job:
- a submitted job, at once: the submit's own statement claims one (repository/jobs.sql `submit`: the tenant's idle
  warm machine of the type and image, the one of the job's session first, then the most recently active; one rule
  written once, tested by tests/integration/pool_dispatcher/test_warm_choice.py). Intake (intake.py) sends it.
- a queued job: the machine that finishes a job takes the next in queue order with its completion's statement
  (jobs.sql `complete`; queue order: thermostat.policy.pool.queue_order), and a placement pass hands every idle
  warm machine of a kind with a queue its next job (`take_next`, below: `drain_warm`).

Which machines start: one pass counts the queue and the fleet and inserts the machine rows, in one transaction
under one advisory lock across processes (thermostat.policy.pool.placement decides, `plan_placement`); the first
queued job in line is handed to each new machine as `dispatched`. The boots run outside the lock (fleet.py,
each a `BootPlan`). A pass asked for while one runs runs again after it (`poke`, the `PlacementWanted` event).
Hitting the fleet cap logs one warning per pass, however often it places again.

A placement (or a hint) whose commit landed with its answer lost started no boot: `recover_unbooted` (the scaler's)
boots its rows, under the placement lock so a pass in flight is never mistaken for a lost one.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import uuid
from collections.abc import Awaitable, Callable

from thermostat.policy.pool.hint import HintDecision, decide_hint
from thermostat.policy.pool.machines import Machine, MachineState, is_stale
from thermostat.policy.pool.placement import Demand, plan_placement
from thermostat.policy.pool.submit_options import SubmitError
from thermostat.policy.pool.unbooted import PlacedMachine, Recovery, plan_unbooted
from thermostat.store.connections import borrow

from ..repository import PoolRepository
from .catalogue import CatalogueCache
from .drivers import Drivers
from .events import Events, PlacementWanted
from .fleet import BootPlan, Fleet
from .ownership import Ownership
from .runner import Runner
from .tasks import Tasks

log = logging.getLogger("thermostat.pool_dispatcher")


class Placement:
    """Hands queued work to idle warm machines, then starts machines for the rest. `before_place` is an ordering
    test's seam (production passes none), awaited at the start of every pass before it takes the placement lock:
    a pass held there leaves the lock free, so other pokes run their own passes, which a hold at the first store
    call (under the lock) would fold into the held one."""

    def __init__(
        self,
        *,
        repo: PoolRepository,
        ownership: Ownership,
        catalogue: CatalogueCache,
        drivers: Drivers,
        runner: Runner,
        fleet: Fleet,
        tasks: Tasks,
        events: Events,
        max_workers_total: int | None,
        before_place: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.repo = repo
        self.ownership = ownership
        self.catalogue = catalogue
        self.drivers = drivers
        self.runner = runner
        self.fleet = fleet
        self.tasks = tasks
        self.before_place = before_place
        self.max_workers_total = max_workers_total
        self.lock = asyncio.Lock()
        self.again = False
        self.closing = False
        events.on(PlacementWanted, lambda _: self.poke())

    def poke(self) -> None:
        if self.closing:
            return
        if self.lock.locked():
            self.again = True
            return
        self.tasks.spawn(self.place(), "pool-place")

    async def place(self) -> None:
        """Hand queued work to idle warm machines, then start machines for what is left (serialized)."""
        if self.before_place is not None:
            await self.before_place()
        held: int | None = None
        async with self.lock:
            self.again = True
            while self.again:
                self.again = False
                await self._drain_warm()
                starts, capped = await self._plan_and_insert()
                held = capped if capped is not None else held
                for start in starts:
                    self.tasks.spawn(self.fleet.booting(start), f"pool-boot-{start.machine_id}")
        if held is not None:
            log.warning(
                "fleet cap of %s machines reached: %d queued job(s) wait for capacity", self.max_workers_total, held
            )

    async def _drain_warm(self) -> None:
        async with borrow(self.repo.pool) as c:
            demand = await self.repo.machines.demand(c)
        if not demand:
            return
        wanted = {(d.tenant_id, d.machine_type) for d in demand}
        for fleet_machine in await self.repo.machines.fleet():
            machine = fleet_machine.machine
            if machine.state is not MachineState.WARM or (machine.tenant_id, machine.machine_type) not in wanted:
                continue
            if is_stale(machine, self.catalogue.catalogue) or self.drivers.driven(machine.id):
                continue
            driver = object()
            assignment = await self.runner.take_next(machine.id, machine.image, driver)
            if assignment is not None:
                self.tasks.spawn(
                    self.runner.run(assignment, machine.tenant_id, machine.machine_type, machine.image, driver=driver),
                    f"pool-run-{assignment.job_id}",
                )

    async def _plan_and_insert(self) -> tuple[list[BootPlan], int | None]:
        """One transaction under the placement lock: count the queue and the fleet, insert the starts.
        Also the queued jobs the fleet cap holds back (None: the cap was not hit)."""
        starts: list[BootPlan] = []
        held: int | None = None
        machines = self.repo.machines
        catalogue = self.catalogue.catalogue
        async with borrow(self.repo.pool) as c, c.transaction():
            await machines.lock_placement(c)
            demand = await machines.demand(c)
            if not demand:
                return [], None
            fleet = await machines.fleet(c)
            plan = plan_placement(
                demand=[
                    Demand(tenant_id=d.tenant_id, machine_type=d.machine_type, queued=d.queued, head=d.head)
                    for d in demand
                ],
                machines=[as_seen(m.machine, m.job_id) for m in fleet],
                catalogue=catalogue,
                max_workers_total=self.max_workers_total,
            )
            if plan.fleet_cap_hit:
                held = sum(d.count for d in plan.deferred if d.reason == "fleet_cap")
            for start in plan.starts:
                machine_type = self.catalogue.get(start.machine_type)
                if machine_type is None:
                    continue
                machine_id, token = str(uuid.uuid4()), secrets.token_urlsafe(32)
                job_id, trace = await machines.insert_machine(
                    c,
                    machine_id=machine_id,
                    tenant_id=start.tenant_id,
                    machine_type=machine_type.name,
                    image=machine_type.image,
                    backend=str(machine_type.backend),
                    token=token,
                    owner=self.ownership.owner,
                    cool_down_seconds=machine_type.cool_down_seconds,
                    assign_job=True,
                )
                starts.append(
                    BootPlan(
                        machine_id=machine_id,
                        tenant_id=start.tenant_id,
                        machine_type=machine_type,
                        token=token,
                        job_id=job_id,
                        trace=trace,
                    )
                )
        return starts, held

    async def hint(self, tenant_id: str, machine_type: str) -> HintDecision | SubmitError:
        """Start one machine for the tenant unless one is warm or starting, within both caps."""
        if self.catalogue.get(machine_type) is None:
            await self.catalogue.type_named(machine_type)
        machine_id, token = str(uuid.uuid4()), secrets.token_urlsafe(32)
        # driven from before its insert is sent: a scaler pass reading the row while the commit's answer is on
        # its way leaves it to the boot below; a commit whose answer is lost leaves it to the pass (recover_unbooted)
        reserved = self.drivers.drive(machine_id)
        try:
            async with borrow(self.repo.pool) as c, c.transaction():
                await self.repo.machines.lock_placement(c)
                fleet = await self.repo.machines.fleet(c)
                decision = decide_hint(
                    tenant_id=tenant_id,
                    machine_type=machine_type,
                    machines=[as_seen(m.machine, m.job_id) for m in fleet],
                    catalogue=self.catalogue.catalogue,
                    max_workers_total=self.max_workers_total,
                )
                if not isinstance(decision, HintDecision) or not decision.started:
                    return decision
                kind = self.catalogue.get(machine_type)
                assert kind is not None  # decide_hint refused unknown types
                await self.repo.machines.insert_machine(
                    c,
                    machine_id=machine_id,
                    tenant_id=tenant_id,
                    machine_type=kind.name,
                    image=kind.image,
                    backend=str(kind.backend),
                    token=token,
                    owner=self.ownership.owner,
                    cool_down_seconds=kind.cool_down_seconds,
                    assign_job=False,
                )
            plan = BootPlan(machine_id=machine_id, tenant_id=tenant_id, machine_type=kind, token=token)
            self.tasks.spawn(self.fleet.booting(plan), f"pool-boot-{machine_id}")
        finally:
            self.drivers.release(machine_id, reserved)  # the boot registered its own driver in its place, if it started
        return decision

    async def recover_unbooted(self) -> None:
        """Boot this process's starting machines that no task drives and no provider started: a placement
        (or hint) whose commit landed with its answer lost started no boot, and its row would hold its job and
        a cap slot under this live owner, which no reclaim touches. Booted on the normal path rather than
        released (thermostat.policy.pool.unbooted says why); a stale one is released, its job requeued.

        Read under the placement lock: a placement whose commit is in flight registers its boots right after
        its answer, before it lets go, so none of its rows is mistaken for a lost one. A hint registers its
        machine as driven before its insert is sent, so it needs no lock here."""
        try:
            async with self.lock:
                rows = {row.machine.id: row for row in await self.repo.machines.starting_machines(self.ownership.owner)}
                actions = plan_unbooted(
                    machines=[PlacedMachine(machine=r.machine, started=r.started) for r in rows.values()],
                    driven=self.drivers.machines(),
                    catalogue=self.catalogue.catalogue,
                    boot_began=self.drivers.boot_died,
                )
                self.drivers.boot_died.intersection_update(rows)  # the others' rows are gone or moved on
                for action in actions:
                    row = rows[action.machine_id]
                    machine_type = self.catalogue.get(row.machine.machine_type)
                    if action.recovery is Recovery.BOOT and machine_type is not None:
                        log.warning("machine %s: booting it (%s)", row.machine.id, action.reason)
                        plan = BootPlan(
                            machine_id=row.machine.id,
                            tenant_id=row.machine.tenant_id,
                            machine_type=machine_type,
                            token=row.token,
                            job_id=row.job_id,
                            trace=row.trace,
                        )
                        self.tasks.spawn(self.fleet.booting(plan), f"pool-boot-{row.machine.id}")
                        continue
                    log.warning("machine %s: released unbooted (%s)", row.machine.id, action.reason)
                    driver = self.drivers.drive(row.machine.id)  # held while releasing, as a boot would be
                    try:
                        await self.fleet.boot_failed(
                            row.machine.id, None, action.reason, row.backend, row.machine.machine_type
                        )
                    finally:
                        self.drivers.release(row.machine.id, driver)
                    self.poke()  # its job waits in the queue again
        finally:
            if self.again:  # a placement asked for while this held the lock (even if it failed): it runs now
                self.poke()


def as_seen(machine: Machine, job_id: str | None) -> Machine:
    """A starting machine that already holds a job is busy as far as placement is concerned."""
    if machine.state is MachineState.STARTING and job_id is not None:
        return Machine(
            id=machine.id,
            tenant_id=machine.tenant_id,
            machine_type=machine.machine_type,
            image=machine.image,
            state=MachineState.BUSY,
            last_session_id=machine.last_session_id,
            health_misses=machine.health_misses,
            cool_down_seconds=machine.cool_down_seconds,
        )
    return machine
