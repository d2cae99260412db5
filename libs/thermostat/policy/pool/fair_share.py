"""Fair share at the fleet cap: no tenant starves behind another's backlog (issue 23 item 2).

Warm reuse keeps a tenant with a deep backlog on its machines for as long as the backlog lasts (each completion
hands the machine the tenant's next job), so once `POOL_MAX_WORKERS_TOTAL` is reached another tenant's job would
wait for the whole backlog to drain: the starvation users of shared queues report most (river#1060, awa#340).

Theory of operation. Only while a tenant waits at the fleet cap (placement held some of its queued jobs back for
the fleet cap, `Deferred` with `fleet_cap`), each pass:

- A tenant has demand when it has queued jobs or busy machines (jobs it is running). Its share is the cap over
  the tenants with demand, rounded up: `ceil(cap / n)`. Rounded up so that tenants at their share do not trade
  machines back and forth job by job. When the tenants with demand outnumber the slots (a cap of 2 with 3
  tenants: share 1, two hold one each), nobody is over its share and the third would wait for a holder's whole
  backlog: then the holders take turns instead, each keeping its slot for a minimum tenure (rotation.py, issue 35).
- A waiting tenant below its share needs `min(held back, share - holding)` slots. `holding` is its live machines
  (starting, warm, busy).
- Slots already on their way count against that need: every stopping machine frees one when its stop lands.
- The slots still needed come from donors: a tenant holding more than its share gives at most `holding - share`;
  a tenant without demand gives every warm or busy machine it holds (an idle machine of a tenant with nothing
  queued is not kept for its cool-down while another tenant waits at the cap). With no donor, from rotation
  (rotation.py): one slot per waiting tenant, from the holder that has held its slot longest past its tenure.
- A donor's machine is retired after its current job, never mid-job: a warm one now (it has no job), a busy one
  is marked (`yield_to`, the waiting tenant) and its completion retires it instead of handing it the next job.
  A starting machine is never chosen: it is a boot already paid for, about to serve its tenant.
- The choice is recomputed every pass from what the store says, under placement's lock, and a machine already
  marked is chosen first: two processes deciding one after the other mark one machine per needed slot, not two.
  A mark the pass no longer needs (the waiting job was cancelled, or another slot came free) is cleared, and
  the machine goes on with its tenant's backlog.

Which tenant the freed slot goes to is placement's (thermostat.policy.pool.placement): at the fleet cap a tenant
below its share is served before one at or above it, so the retired machine's slot is not taken straight back by
the backlog it came from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from thermostat.policy.pool.machine_type import Catalogue
from thermostat.policy.pool.machines import LIVE_STATES, Machine, MachineState
from thermostat.policy.pool.rotation import next_turn_in, rotated, wait_line


def tenants_with_demand(*, queued: Mapping[str, int], machines: Iterable[Machine]) -> frozenset[str]:
    """Tenants with a queued job or a busy machine."""
    busy = {m.tenant_id for m in machines if m.state is MachineState.BUSY}
    return frozenset(busy | {tenant for tenant, count in queued.items() if count > 0})


def fair_share(*, max_workers_total: int, tenants: int) -> int:
    """The cap over the tenants with demand, rounded up (the whole cap for one tenant, or none)."""
    return math.ceil(max_workers_total / max(tenants, 1))


def holdings(machines: Iterable[Machine]) -> dict[str, int]:
    """Each tenant's live machines (starting, warm, busy), every type: a stopping one is no longer the tenant's."""
    held: dict[str, int] = {}
    for machine in machines:
        if machine.state in LIVE_STATES:
            held[machine.tenant_id] = held.get(machine.tenant_id, 0) + 1
    return held


@dataclass(frozen=True, slots=True, kw_only=True)
class Yield:
    """Yield is one machine giving its fleet slot to a waiting tenant: now (`warm`) or after its current job."""

    machine_id: str
    tenant_id: str  # the machine's tenant, over its share (or at it, rotated)
    to_tenant: str  # the tenant waiting at the fleet cap
    now: bool  # warm: retired at once; busy: marked, retired by its completion
    rotation: bool = False  # nobody was over its share: the holder's turn ends (rotation.py), its wait begins


@dataclass(frozen=True, slots=True, kw_only=True)
class FairShareDecision:
    """FairShareDecision is this pass's retirements for fairness and the marks it no longer needs."""

    share: int | None = None  # None: nobody waits at the fleet cap
    retire_now: tuple[Yield, ...] = ()  # warm machines: stopping now
    mark: tuple[Yield, ...] = ()  # busy machines not yet marked: retired after their current job
    keep: tuple[Yield, ...] = ()  # busy machines already marked: still needed, nothing to write
    clear: tuple[str, ...] = ()  # marked machines no longer needed: they go on with their tenant's backlog
    recheck_seconds: float | None = None  # a tenant waits for a holder's tenure: place again in this many seconds


def plan_fair_share(
    *,
    queued: Mapping[str, int],
    held_back: Mapping[str, int],
    machines: Sequence[Machine],
    max_workers_total: int | None,
    waits: Mapping[str, tuple[int, int]] | None = None,
    catalogue: Catalogue | None = None,
) -> FairShareDecision:
    """Which machines give their slot to the tenants the fleet cap holds back, from this pass's view.

    `queued`: each tenant's queued jobs (every type); `held_back`: each tenant's queued jobs the fleet cap held
    back this pass (placement's deferrals with reason `fleet_cap`); `waits`: each tenant's place in line
    (placement.wait_places), the order waiting tenants are given slots in; `catalogue`: the types' minimum
    tenures for rotation (rotation.py), when no tenant is over its share."""
    marked = [m.id for m in machines if m.yield_to is not None and m.state in LIVE_STATES]
    waiting = {tenant: count for tenant, count in held_back.items() if count > 0}
    if max_workers_total is None or not waiting:
        return FairShareDecision(clear=tuple(marked))
    with_demand = tenants_with_demand(queued=queued, machines=machines)
    share = fair_share(max_workers_total=max_workers_total, tenants=len(with_demand))
    held = holdings(machines)
    line = wait_line(waiting, waits or {})
    needs = {t: min(waiting[t], share - held.get(t, 0)) for t in line}
    needs = {t: n for t, n in needs.items() if n > 0}
    rotation = not any(n > (share if t in with_demand else 0) for t, n in held.items())
    if rotation:  # one slot a waiting tenant: each takes its turn
        needs = dict.fromkeys(needs, 1)
    on_the_way = sum(1 for m in machines if m.state is MachineState.STOPPING)
    slots = max(sum(needs.values()) - on_the_way, 0)
    if rotation:
        chosen = rotated(machines, held, share, with_demand, slots, catalogue or Catalogue())
    else:
        chosen = _donated(machines, held, share, with_demand, slots)
    recipients = [t for t, n in needs.items() for _ in range(n)][on_the_way:]
    retire_now: list[Yield] = []
    mark: list[Yield] = []
    keep: list[Yield] = []
    for machine, to_tenant in zip(chosen, recipients, strict=False):
        given = Yield(
            machine_id=machine.id, tenant_id=machine.tenant_id, to_tenant=to_tenant, now=False, rotation=rotation
        )
        if machine.state is MachineState.WARM:
            retire_now.append(replace(given, now=True))
        elif machine.yield_to is not None:
            keep.append(given)
        else:
            mark.append(given)
    taken = {m.id for m in chosen}
    recheck = None
    if rotation and len(chosen) < slots:
        recheck = next_turn_in(machines, held, share, with_demand, catalogue or Catalogue())
    return FairShareDecision(
        share=share,
        retire_now=tuple(retire_now),
        mark=tuple(mark),
        keep=tuple(keep),
        clear=tuple(m for m in marked if m not in taken),
        recheck_seconds=recheck,
    )


def _donated(
    machines: Sequence[Machine], held: Mapping[str, int], share: int, with_demand: frozenset[str], slots: int
) -> list[Machine]:
    """Up to `slots` machines of tenants over their share: the most over first, a marked machine before an idle
    one before a busy one of the same tenant (never a starting one)."""
    if slots <= 0:
        return []
    over = {t: n - (share if t in with_demand else 0) for t, n in held.items()}
    donors = sorted((t for t, n in over.items() if n > 0), key=lambda t: (-over[t], t))
    chosen: list[Machine] = []
    for tenant in donors:
        candidates = sorted(
            (m for m in machines if m.tenant_id == tenant and m.state in (MachineState.WARM, MachineState.BUSY)),
            key=lambda m: (m.yield_to is None, m.state is not MachineState.WARM, m.id),
        )
        chosen.extend(candidates[: over[tenant]])
    return chosen[:slots]
