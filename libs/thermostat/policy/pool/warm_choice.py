"""Warm-machine choice: which idle machine takes a job, if any.

Only a machine of the job's own tenant (one tenant per machine for its life, seed: Isolation), of the job's
type, on the type's current image (an old-image machine takes no new work), and warm: a busy machine runs
one job at a time and a starting one is not yet trusted with anything.

Among those: the machine that last ran the job's session first (its caches and loaded state are that
session's), then the most recently active one (the least recently used ones are the first to cool down and
go, so concentrating work keeps the fleet small), then the id, so every process picks the same machine.
"""

from __future__ import annotations

from collections.abc import Iterable

from thermostat.policy.pool.machine_type import Catalogue
from thermostat.policy.pool.machines import Machine, MachineState, is_stale


def eligible(machine: Machine, *, tenant_id: str, machine_type: str, catalogue: Catalogue) -> bool:
    return (
        machine.state is MachineState.WARM
        and machine.tenant_id == tenant_id
        and machine.machine_type == machine_type
        and not is_stale(machine, catalogue)
    )


def choose_warm_machine(
    *,
    machines: Iterable[Machine],
    tenant_id: str,
    machine_type: str,
    session_id: str | None,
    catalogue: Catalogue,
) -> Machine | None:
    """The warm machine this job should go to, or None (then placement may start one)."""
    candidates = [
        m for m in machines if eligible(m, tenant_id=tenant_id, machine_type=machine_type, catalogue=catalogue)
    ]
    if not candidates:
        return None

    def preference(machine: Machine) -> tuple[bool, float, str]:
        affine = session_id is not None and machine.last_session_id == session_id
        return (not affine, -machine.idle_since, machine.id)

    return min(candidates, key=preference)
