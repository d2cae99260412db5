"""Placement: which machines to start for the queued demand, within the tenant and fleet caps.

Theory of operation. Demand is counted per (tenant, machine type): the number of queued jobs no machine has
taken yet. Each warm (idle) or starting machine of that tenant and type on the type's current image will
take one of them, so only the rest needs a new machine. Busy machines are not counted: the worker-pool seed starts a
machine when none is warm rather than queue behind a running job.

Caps, in this order:
- The tenant cap (`max_workers`, per tenant per type) counts the tenant's starting, warm and busy machines
  of the type, old image included: they still run (and bill). A stopping machine is no longer the tenant's.
- The fleet cap (`POOL_MAX_WORKERS_TOTAL`) counts every machine that exists at a provider, stopping ones
  included: a machine whose stop failed still bills, and the next pass retries the stop (seed).
- Stale-image machines (type image changed) take no new work. When one sits idle and is the reason the
  tenant cap blocks a start, it is retired now instead of at cool-down: it would take no job anyway, and
  otherwise an image change under `max_workers: 1` would hold the tenant's queue for a whole cool-down.
  Its stop frees the tenant's slot at once but the fleet's only when it is gone.

When the fleet cap binds, each tenant below its fair share (thermostat.policy.pool.fair_share: the cap over the
tenants with demand) is served first, up to its share, in line (`wait_places`): by its first job's priority, then
the tenant that has waited longest first (its wait began at its first queued job, or at its last rotation out if
later, so a tenant rotated out queues behind those already waiting); what room is left goes in queue order. So
the fleet's last slot goes to the tenant waiting longest among those below their share, and never straight back
to a backlog a fair-share retirement took it from. A plan
whose demand the fleet cap cut says so, for the warning the worker-pool seed asks for ("a capped fleet looks
exactly like a slow queue from the outside").
A type missing from the catalogue gets no machine: its queued jobs fail with the reason (the service).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.pool.fair_share import fair_share, holdings, tenants_with_demand
from thermostat.policy.pool.machine_type import Catalogue
from thermostat.policy.pool.machines import FLEET_STATES, LIVE_STATES, Machine, MachineState, is_stale, of_tenant
from thermostat.policy.pool.queue_order import QueuedJob, queue_key


@dataclass(frozen=True, slots=True, kw_only=True)
class Demand:
    """Demand is one tenant's queued, unassigned jobs of one machine type; `head` is the first in line."""

    tenant_id: str
    machine_type: str
    queued: int
    head: QueuedJob
    turn: int = 0  # the jobs' sequence when the tenant was last rotated out at the fleet cap (rotation.py); 0: never


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineStart:
    """MachineStart asks for one new machine for a tenant, on the type's current image."""

    tenant_id: str
    machine_type: str
    image: str


class DeferReason(StrEnum):
    TENANT_CAP = "tenant_cap"
    FLEET_CAP = "fleet_cap"


@dataclass(frozen=True, slots=True, kw_only=True)
class Deferred:
    """Deferred is demand left waiting for capacity this pass; the next pass places it."""

    tenant_id: str
    machine_type: str
    count: int
    reason: DeferReason


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementPlan:
    starts: tuple[MachineStart, ...] = ()
    retire: tuple[str, ...] = ()  # idle stale-image machines stopped to make room under the tenant cap
    deferred: tuple[Deferred, ...] = ()

    @property
    def fleet_cap_hit(self) -> bool:
        """The fleet cap held back some demand: the service logs a warning."""
        return any(item.reason is DeferReason.FLEET_CAP for item in self.deferred)


def plan_placement(
    *,
    demand: Iterable[Demand],
    machines: Sequence[Machine],
    catalogue: Catalogue,
    max_workers_total: int | None,
) -> PlacementPlan:
    """Starts, early retirements and deferrals for this pass's demand."""
    fleet = sum(1 for machine in machines if machine.state in FLEET_STATES)
    wanted_counts: list[tuple[Demand, int, str]] = []
    retire: list[str] = []
    deferred: list[Deferred] = []
    ordered = sorted(demand, key=lambda item: queue_key(item.head))
    for wanted in ordered:
        machine_type = catalogue.get(wanted.machine_type)
        if machine_type is None or wanted.queued <= 0:
            continue
        mine = [m for m in of_tenant(machines, wanted.tenant_id, wanted.machine_type) if m.id not in retire]
        need = wanted.queued - ready_count(mine, catalogue)
        if need <= 0:
            continue
        count = need
        if machine_type.max_workers is not None:
            live = sum(1 for m in mine if m.state in LIVE_STATES)
            room = machine_type.max_workers - live
            if room < need:
                idle_stale = [m.id for m in mine if m.state is MachineState.WARM and is_stale(m, catalogue)]
                freed = idle_stale[: need - max(room, 0)]
                retire.extend(freed)
                room += len(freed)
            if room < count:
                deferred.append(_deferred(wanted, count - max(room, 0), DeferReason.TENANT_CAP))
                count = max(room, 0)
        if count > 0:
            wanted_counts.append((wanted, count, machine_type.image))
    queued = queued_by_tenant(ordered)
    granted = _fleet_room([(w, n) for w, n, _ in wanted_counts], queued, machines, max_workers_total, fleet)
    starts: list[MachineStart] = []
    for (wanted, count, image), got in zip(wanted_counts, granted, strict=True):
        if got < count:
            deferred.append(_deferred(wanted, count - got, DeferReason.FLEET_CAP))
        starts.extend(
            MachineStart(tenant_id=wanted.tenant_id, machine_type=wanted.machine_type, image=image) for _ in range(got)
        )
    return PlacementPlan(starts=tuple(starts), retire=tuple(retire), deferred=tuple(deferred))


def _fleet_room(
    wanted: Sequence[tuple[Demand, int]],
    queued: Mapping[str, int],
    machines: Sequence[Machine],
    cap: int | None,
    fleet: int,
) -> list[int]:
    """How many of each group's wanted starts the fleet cap lets through (`wanted` in queue order).

    Without a cap, all. With one, first each tenant below its fair share (thermostat.policy.pool.fair_share) is
    served up to its share, in its place in line (`wait_places`), then what room is left goes in queue
    order: the slot a fair-share retirement freed goes to the tenant it was freed for, not back to the backlog it
    came from (a tenant rotated out waits from its rotation, behind those already waiting)."""
    if cap is None:
        return [count for _, count in wanted]
    room = max(cap - fleet, 0)
    share = fair_share(max_workers_total=cap, tenants=len(tenants_with_demand(queued=queued, machines=machines)))
    held = holdings(machines)
    granted = [0] * len(wanted)
    places = wait_places(group for group, _ in wanted)
    for index in sorted(range(len(wanted)), key=lambda i: places[wanted[i][0].tenant_id]):
        group, count = wanted[index]
        below = max(share - held.get(group.tenant_id, 0), 0)
        got = min(count, below, room)
        granted[index], room = got, room - got
        held[group.tenant_id] = held.get(group.tenant_id, 0) + got
    for index, (_, count) in enumerate(wanted):
        got = min(count - granted[index], room)
        granted[index], room = granted[index] + got, room - got
    return granted


def wait_places(demand: Iterable[Demand]) -> dict[str, tuple[int, int]]:
    """Each tenant's place in the line for a slot at the fleet cap, lower first: its first queued job's priority
    (highest first, as in queue order), then where its wait began in the jobs' submission order: its first queued
    job, or its last rotation out at the fleet cap if that came later (thermostat.policy.pool.rotation)."""
    places: dict[str, tuple[int, int]] = {}
    turn: dict[str, int] = {}
    for group in demand:
        place = (-group.head.priority, group.head.sequence)
        places[group.tenant_id] = min(places.get(group.tenant_id, place), place)
        turn[group.tenant_id] = max(turn.get(group.tenant_id, 0), group.turn)
    return {tenant: (priority, max(began, turn[tenant])) for tenant, (priority, began) in places.items()}


def queued_by_tenant(demand: Iterable[Demand]) -> dict[str, int]:
    """Each tenant's queued jobs, every type."""
    queued: dict[str, int] = {}
    for group in demand:
        queued[group.tenant_id] = queued.get(group.tenant_id, 0) + max(group.queued, 0)
    return queued


def ready_count(mine: Iterable[Machine], catalogue: Catalogue) -> int:
    """Machines that will take a queued job without a new start: warm or starting, on the current image."""
    return sum(1 for m in mine if m.state in (MachineState.WARM, MachineState.STARTING) and not is_stale(m, catalogue))


def _deferred(wanted: Demand, count: int, reason: DeferReason) -> Deferred:
    return Deferred(tenant_id=wanted.tenant_id, machine_type=wanted.machine_type, count=count, reason=reason)


def placement_may_act(*, live_machines: int, idle_machines: int, max_workers: int | None) -> bool:
    """Whether a job that just queued is worth a placement pass, from what its submit statement saw of the
    tenant's machines of its type (starting, warm or busy: `live`; warm: `idle`).

    A pass can hand the job to an idle machine or start one under the tenant cap; when every machine the cap
    allows is busy or starting, it can do neither, and each of those machines takes the next queued job in
    the statement that completes its current one (or that marks it ready). Under a backlog that skips a
    placement pass per queued submit (bench/pool_throughput.py). A completion that raced the submit (its
    statement saw the queue empty, the submit's saw the machine busy) leaves the machine idle: the next
    submit of the tenant sees it idle and places, a sync wait's re-read places, and so does the scaler pass.
    """
    if idle_machines > 0:
        return True
    return max_workers is None or live_machines < max_workers
