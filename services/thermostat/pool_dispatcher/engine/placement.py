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
each a `BootPlan`). A pass asked for while one runs runs again after it (`poke`, which the parts below call).
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
from dataclasses import replace
from typing import TypeVar

from thermostat.chassis.clock import Clock
from thermostat.policy.pool.hint import HintDecision, HintReason, decide_hint
from thermostat.policy.pool.machines import Machine, MachineState, is_stale
from thermostat.policy.pool.placement import Demand, PlacementPlan, plan_placement
from thermostat.policy.pool.submit_options import SubmitError
from thermostat.policy.pool.unbooted import PlacedMachine, Recovery, plan_unbooted
from thermostat.store.connections import borrow

from ..metrics import PoolMetrics
from ..repository import PoolRepository
from ..repository.machines import Conn
from .catalogue import CatalogueCache
from .drivers import Drivers
from .fair_share import FairShare
from .fleet import BootPlan, Fleet
from .local import Local, SubmitKey
from .ownership import Ownership
from .runner import Runner
from .tasks import Tasks

log = logging.getLogger("thermostat.pool_dispatcher")

ROOM_ATTEMPTS = 3
"""Decisions one placement transaction makes at most when a retirement for room it counted on did not land."""

STALE_FOR_ROOM = "old image, retired to make room under the tenant cap"

D = TypeVar("D", PlacementPlan, HintDecision | SubmitError)


def _plan_of(decision: PlacementPlan | HintDecision | SubmitError) -> PlacementPlan:
    if isinstance(decision, PlacementPlan):
        return decision
    return decision.plan if isinstance(decision, HintDecision) else PlacementPlan()


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
        metrics: PoolMetrics,
        max_workers_total: int | None,
        before_place: Callable[[], Awaitable[None]] | None = None,
        local: Local,
        clock: Clock,
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
        self.fair = FairShare(
            repo=repo, ownership=ownership, metrics=metrics, max_workers_total=max_workers_total, catalogue=catalogue
        )
        self.clock = clock
        self.recheck: asyncio.Task[None] | None = None  # a pass due when a holder's tenure ends (rotation)
        self.lock = asyncio.Lock()
        self.again = False
        self.local = local

    def poke(self, *, at_cap: bool = False) -> None:
        """Place now, or again after the pass in flight (local.py's `WantsPlacement`). `at_cap`: a machine gone idle,
        or one just booted (fair share never takes a booting one), may be the slot a tenant waiting at the fleet
        cap needs: place now, not at the scaler's next pass, which nothing else brings forward while every machine
        goes from job to job; with no fleet cap nobody waits for it."""
        if self.local.draining or (at_cap and self.max_workers_total is None):
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
                    self.tasks.spawn(self.runner.boot(start), f"pool-boot-{start.machine_id}")
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
                self.runner.start(assignment, SubmitKey(machine.tenant_id, machine.machine_type, machine.image), driver)

    async def _plan_and_insert(self) -> tuple[list[BootPlan], int | None]:
        """One transaction under the placement lock: count the queue and the fleet, carry out the plan's retirements
        (a stale machine for room under the tenant cap, fair share's at the fleet cap), insert the starts. Also the
        queued jobs the fleet cap holds back (None: the cap was not hit)."""
        starts: list[BootPlan] = []
        held: int | None = None
        recheck: float | None = None
        machines = self.repo.machines
        stops: list[tuple[str, str | None]] = []
        async with borrow(self.repo.pool) as c, c.transaction():
            await machines.lock_placement(c)
            demand = await machines.demand(c)
            if not demand:
                await machines.unyield(c, None)  # nobody waits: a mark left would retire a machine for no one
                return [], None
            wanted = [
                Demand(tenant_id=d.tenant_id, machine_type=d.machine_type, queued=d.queued, head=d.head, turn=d.turn)
                for d in demand
            ]
            plan, seen, freed = await self._plan_room(c, stops, lambda seen: self._placement(wanted, seen))
            if not freed:  # every attempt's retirement was overtaken: nothing starts on room not made (next pass)
                plan = PlacementPlan(deferred=plan.deferred)
            if plan.fleet_cap_hit:
                held = sum(d.count for d in plan.deferred if d.reason == "fleet_cap")
            recheck = (await self.fair.carry_out(c, wanted, plan, seen, stops)).recheck_seconds
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
        self._stop_after_commit(stops)
        if recheck is not None:
            self._place_in(recheck)
        return starts, held

    def _place_in(self, seconds: float) -> None:
        """Place again once a holder's tenure ends (fair share's rotation): no other pass may come at that moment.
        The latest pass's view is the freshest, so its time replaces any pending one."""
        if self.recheck is not None and not self.recheck.done():
            self.recheck.cancel()
        self.recheck = self.tasks.spawn(self._place_after(seconds), "pool-place-at-tenure")

    async def _place_after(self, seconds: float) -> None:
        await self.clock.sleep(seconds)
        self.poke()

    def _placement(self, wanted: list[Demand], seen: list[Machine]) -> PlacementPlan:
        return plan_placement(
            demand=wanted, machines=seen, catalogue=self.catalogue.catalogue, max_workers_total=self.max_workers_total
        )

    async def _plan_room(
        self, c: Conn, stops: list[tuple[str, str | None]], decide: Callable[[list[Machine]], D]
    ) -> tuple[D, list[Machine], bool]:
        """Decide on the fleet as the store has it, retiring the idle stale-image machines the decision counts on
        for room under the tenant cap (`plan.retire`) before its starts are inserted; a retirement that did not land
        (the machine is no longer idle) is decided again on a fresh read, so no start leans on a slot that was not
        freed. The decision, the fleet it saw, and whether its retirements all landed (False: start nothing)."""
        decision, seen = None, []
        for _ in range(ROOM_ATTEMPTS):
            seen = [as_seen(m.machine, m.job_id) for m in await self.repo.machines.fleet(c)]
            decision = decide(seen)
            retire = _plan_of(decision).retire
            if not retire:
                return decision, seen, True
            for machine_id in retire:
                state, provider_id = await self.repo.machines.yield_machine(
                    c, machine_id, self.ownership.owner, to_tenant=None, mark_busy=False, reason=STALE_FOR_ROOM
                )
                if state == MachineState.STOPPING:
                    stops.append((machine_id, provider_id))
                    log.info("machine %s retired: %s", machine_id, STALE_FOR_ROOM)
        assert decision is not None
        return decision, seen, False

    def _stop_after_commit(self, stops: list[tuple[str, str | None]]) -> None:
        """Stop the machines this transaction retired (now this process's), then place again: each frees a slot."""
        for machine_id, provider_id in stops:
            self.tasks.spawn(self._stop_then_place(machine_id, provider_id), f"pool-stop-{machine_id}")

    async def _stop_then_place(self, machine_id: str, provider_id: str | None) -> None:
        await self.fleet.finish_stop(machine_id, provider_id)
        self.poke()

    async def hint(self, tenant_id: str, machine_type: str) -> HintDecision | SubmitError:
        """Start one machine for the tenant unless one is warm or starting, within both caps (an idle stale-image
        machine the tenant cap counts is retired first, as placement's are)."""
        if self.catalogue.get(machine_type) is None:
            await self.catalogue.type_named(machine_type)
        machine_id, token = str(uuid.uuid4()), secrets.token_urlsafe(32)
        stops: list[tuple[str, str | None]] = []
        boot: BootPlan | None = None
        # driven from before its insert is sent: a scaler pass reading the row while the commit's answer is on
        # its way leaves it to the boot below; a commit whose answer is lost leaves it to the pass (recover_unbooted)
        reserved = self.drivers.drive(machine_id)
        try:
            async with borrow(self.repo.pool) as c, c.transaction():
                await self.repo.machines.lock_placement(c)
                decision, _, freed = await self._plan_room(
                    c,
                    stops,
                    lambda seen: decide_hint(
                        tenant_id=tenant_id,
                        machine_type=machine_type,
                        machines=seen,
                        catalogue=self.catalogue.catalogue,
                        max_workers_total=self.max_workers_total,
                    ),
                )
                if isinstance(decision, HintDecision) and decision.started and not freed:
                    decision = HintDecision(started=False, reason=HintReason.TENANT_CAP, plan=PlacementPlan())
                kind = self.catalogue.get(machine_type)
                if isinstance(decision, HintDecision) and decision.started and kind is not None:
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
                    boot = BootPlan(machine_id=machine_id, tenant_id=tenant_id, machine_type=kind, token=token)
            if boot is not None:
                self.tasks.spawn(self.runner.boot(boot), f"pool-boot-{machine_id}")
        finally:
            self.drivers.release(machine_id, reserved)  # the boot registered its own driver in its place, if it started
        self._stop_after_commit(stops)
        if isinstance(decision, HintDecision) and decision.reason is HintReason.FLEET_CAP:
            # the seed: "a capped fleet looks exactly like a slow queue from the outside"
            log.warning(
                "fleet cap of %s machines reached: a hint for tenant %s (%s) started no machine",
                self.max_workers_total, tenant_id, machine_type,
            )  # fmt: skip
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
                    boot_began=self.local.boot_died,
                )
                self.local.boot_died.intersection_update(rows)  # the others' rows are gone or moved on
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
                        self.tasks.spawn(self.runner.boot(plan), f"pool-boot-{row.machine.id}")
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
    """A starting machine that already holds a job is busy as far as placement is concerned (still booting for
    rotation: it has held no slot yet)."""
    if machine.state is MachineState.STARTING and job_id is not None:
        return replace(machine, state=MachineState.BUSY, idle_since=0.0, held_seconds=None, boot_seconds=None)
    return machine
