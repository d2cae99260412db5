"""Rotation at the fleet cap: a waiting tenant is never behind a holder's whole backlog (issue 35 item 1).

Fair share (fair_share.py) rounds the share up, so whenever the tenants with demand outnumber the fleet's slots
(a cap of 1 with two tenants, a cap of 2 with three) every holder is at its share, nobody is over it, and no
machine is ever given up: a waiting tenant waited for a holder's whole backlog. Seen at `POOL_MAX_WORKERS_TOTAL=1`:
tenant heavy queued fifteen 1-second jobs, tenant light submitted one sync job and waited 16.1 s.

Theory of operation. Only while a tenant below its share waits at the fleet cap and no tenant holds more than its
share (otherwise fair share's donors give the slot):

- The slot is taken from the holder that has held its slot longest: the machine of a tenant at its share whose
  boot ended longest ago (`held_seconds`), once it has held it for its type's minimum tenure. A machine still
  booting is never chosen (a boot already paid for), nor one of a tenant below its share (it waits itself).
- A pass that finds a tenant waiting and every holder within its tenure says when the first tenure ends
  (`next_turn_in`), and the service places again then: nothing else may run a pass at that moment.
- The minimum tenure is the type's `min_tenure_seconds`, or when unset the type's measured boot time: the mean
  boot (placement to health answer) of the type's machines in the fleet, the holder's own among them. A rotation
  costs one boot, so a holder that kept its slot at least that long did at least half a rotation of useful work.
- One slot per waiting tenant (less what is on its way: a stopping machine, a marked one), one a holder per pass.
  It is retired after its current job as fair share retires a donor (a warm one now, a busy one marked), and a
  machine already marked is chosen first, so two passes (two processes) rotate one machine per waiting tenant.
- The freed slot goes to the waiting tenant that has waited longest (among those of its first job's priority):
  the one whose wait began first, where a wait begins at the tenant's first queued job or, if later, at the
  tenant's last rotation out (its `turn`, a point in the jobs' submission order: placement.wait_places). So the
  tenant rotated out queues behind those already waiting, and tenants take the slots in turn.

A tenant's wait is then bounded by its place in that line × (tenure + the longest job + one boot): each tenant
ahead of it holds a slot for at most its tenure plus the job it is running when its tenure ends, and each hand-over
is one boot. The cost is one boot per rotation, which today's rule never paid (bench/pool_fairness.py prints both).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from thermostat.policy.pool.machine_type import Catalogue
from thermostat.policy.pool.machines import Machine, MachineState


def measured_boots(machines: Iterable[Machine]) -> dict[str, float]:
    """Each type's measured boot: the mean of its fleet machines' boots (those that answered their boot)."""
    boots: dict[str, list[float]] = {}
    for machine in machines:
        if machine.boot_seconds is not None:
            boots.setdefault(machine.machine_type, []).append(machine.boot_seconds)
    return {name: sum(seconds) / len(seconds) for name, seconds in boots.items()}


def min_tenure(machine_type: str, catalogue: Catalogue, measured: Mapping[str, float]) -> float:
    """The type's `min_tenure_seconds`, else its measured boot (0 when none was measured: nothing to amortize)."""
    kind = catalogue.get(machine_type)
    if kind is not None and kind.min_tenure_seconds is not None:
        return kind.min_tenure_seconds
    return measured.get(machine_type, 0.0)


def wait_line(waiting: Iterable[str], places: Mapping[str, tuple[int, int]]) -> list[str]:
    """The waiting tenants in line for a slot (`places`: placement.wait_places, priority then where each one's wait
    began; a tenant not in it, first), then by name."""
    return sorted(waiting, key=lambda tenant: (places.get(tenant, (0, 0)), tenant))


def _holders(
    machines: Sequence[Machine], held: Mapping[str, int], share: int, with_demand: frozenset[str]
) -> list[Machine]:
    """Machines of tenants with demand at their share, starting ones included (as busy: a job handed at placement)."""
    return [
        m
        for m in machines
        if m.tenant_id in with_demand
        and held.get(m.tenant_id, 0) >= share
        and m.state in (MachineState.WARM, MachineState.BUSY, MachineState.STARTING)
    ]


def rotated(
    machines: Sequence[Machine],
    held: Mapping[str, int],
    share: int,
    with_demand: frozenset[str],
    slots: int,
    catalogue: Catalogue,
) -> list[Machine]:
    """Up to `slots` machines of tenants at their share, past their type's minimum tenure, the one held longest
    first and one a tenant per pass (a holder gives up one slot at a time); a machine already marked before any
    other (never a booting one)."""
    if slots <= 0:
        return []
    measured = measured_boots(machines)
    candidates = [
        m
        for m in _holders(machines, held, share, with_demand)
        if m.state is not MachineState.STARTING
        and m.held_seconds is not None
        and (m.yield_to is not None or m.held_seconds >= min_tenure(m.machine_type, catalogue, measured))
    ]
    candidates.sort(key=lambda m: (m.yield_to is None, -(m.held_seconds or 0.0), m.id))
    chosen: list[Machine] = []
    for machine in candidates:
        if all(m.tenant_id != machine.tenant_id for m in chosen):
            chosen.append(machine)
    return chosen[:slots]


RECHECK_FLOOR_SECONDS = 0.05
"""The soonest a pass asks to be run again: a tenure ending now is not a reason to spin."""


def next_turn_in(
    machines: Sequence[Machine],
    held: Mapping[str, int],
    share: int,
    with_demand: frozenset[str],
    catalogue: Catalogue,
) -> float | None:
    """When a waiting tenant found no holder past its tenure: in how many seconds the first tenure ends, so the
    service places again then rather than at the scaler's next pass (a holder still booting: its whole tenure, at
    the least). None: no holder to wait for. A holder already past its tenure is no reason to come back: it was
    taken, or this pass could not take it (one a tenant), and a pass every floor's worth of seconds would not."""
    measured = measured_boots(machines)
    ends = [
        min_tenure(m.machine_type, catalogue, measured) - (m.held_seconds or 0.0)
        for m in _holders(machines, held, share, with_demand)
        if m.yield_to is None
    ]
    ends = [end for end in ends if end > 0]
    return max(min(ends), RECHECK_FLOOR_SECONDS) if ends else None
