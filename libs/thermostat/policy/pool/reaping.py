"""Cool-down reaping: stop machines idle past their type's cool_down_seconds (worker-pool seed: start_scaler).

Nothing else in the pool ends a machine that finished its work, so this is what stops the bill. Only warm
(idle) machines are reaped: a busy machine is running a job, a starting one is the reply to demand, a
stopping one is already on its way (the service retries its stop).

Idle time is `now - idle_since` in one monotonic clock, so a wall-clock step (NTP, a VM resumed) neither
reaps early nor keeps a machine forever. A reading from before `idle_since` (a clock that went backwards,
which a monotonic one does not) counts as not idle yet rather than as a very long idle.

A warm machine marked to give its slot to a tenant waiting at the fleet cap (thermostat.policy.pool.fair_share:
its job was cancelled before it was sent, so no completion retired it) retires at once, whatever its cool-down.

A removed type's machines and a changed image's old machines take no new work and retire the same way: at
cool-down, finishing what they run first. A removed type's cool-down is the one the machine started with.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.pool.machine_type import Catalogue
from thermostat.policy.pool.machines import Machine, MachineState


class RetireReason(StrEnum):
    COOL_DOWN = "cool_down"
    TYPE_REMOVED = "type_removed"
    IMAGE_CHANGED = "image_changed"
    FAIR_SHARE = "fair_share"


@dataclass(frozen=True, slots=True, kw_only=True)
class Retirement:
    machine_id: str
    reason: RetireReason


def plan_reaping(*, machines: Iterable[Machine], catalogue: Catalogue, now: float) -> tuple[Retirement, ...]:
    """The warm machines whose cool-down has run out at monotonic `now`."""
    retirements: list[Retirement] = []
    for machine in machines:
        if machine.state is not MachineState.WARM:
            continue
        if machine.yield_to is not None:
            retirements.append(Retirement(machine_id=machine.id, reason=RetireReason.FAIR_SHARE))
            continue
        current = catalogue.get(machine.machine_type)
        cool_down = current.cool_down_seconds if current is not None else machine.cool_down_seconds
        if now - machine.idle_since < cool_down:  # a reading before idle_since is negative: not idle yet
            continue
        if current is None:
            reason = RetireReason.TYPE_REMOVED
        elif current.image != machine.image:
            reason = RetireReason.IMAGE_CHANGED
        else:
            reason = RetireReason.COOL_DOWN
        retirements.append(Retirement(machine_id=machine.id, reason=reason))
    return tuple(retirements)
