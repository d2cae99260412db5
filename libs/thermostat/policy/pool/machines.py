"""What the pool's decisions see of a machine: one frozen observation per row, in one monotonic clock.

A machine belongs to one tenant for its life and runs one machine type's image. Its states:

    starting ──boot health ok──▶ warm ◀──job done── busy
        │                         │  └──job handed──▶ ┘
        └──boot failed──▶ stopping ◀──retired (cool-down, health, stale image, job outcome)
                              │
                              └──stop succeeded──▶ stopped (a stop that fails stays `stopping`)

`warm` means idle and trusted with work; `busy` means running exactly one job. A `stopping` machine still
exists at the provider, so it still counts against the fleet cap until its stop succeeds.

`idle_since` and the `now` the policies take are readings of one monotonic clock, never wall time, so a
clock step cannot reap a machine early or keep one forever (the service supplies both).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.pool.machine_type import Catalogue


class MachineState(StrEnum):
    STARTING = "starting"
    WARM = "warm"
    BUSY = "busy"
    STOPPING = "stopping"
    STOPPED = "stopped"


LIVE_STATES = frozenset({MachineState.STARTING, MachineState.WARM, MachineState.BUSY})
"""A tenant's machines for its `max_workers` cap: a stopping machine no longer serves the tenant."""

FLEET_STATES = LIVE_STATES | {MachineState.STOPPING}
"""The fleet cap counts what exists at a provider, stopping machines included (a failed stop still bills)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Machine:
    """Machine is one machine as the decisions see it (no endpoint, no token)."""

    id: str
    tenant_id: str
    machine_type: str
    image: str
    state: MachineState
    idle_since: float = 0.0  # monotonic seconds: when it last became warm
    last_session_id: str | None = None  # the session of the last job it ran, for affinity
    health_misses: int = 0  # consecutive failed probes
    cool_down_seconds: float = 0.0  # its type's cool-down when it started, for a type since removed


def is_stale(machine: Machine, catalogue: Catalogue) -> bool:
    """A machine whose type was removed or whose type's image changed takes no new work."""
    current = catalogue.get(machine.machine_type)
    return current is None or current.image != machine.image


def of_tenant(machines: Iterable[Machine], tenant_id: str, machine_type: str) -> list[Machine]:
    return [m for m in machines if m.tenant_id == tenant_id and m.machine_type == machine_type]
