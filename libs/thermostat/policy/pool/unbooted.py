"""Unbooted machines: a placement whose commit landed but whose answer was lost.

Placement inserts its machine rows (`starting`, owned by this process, the queue's head job handed to each
`dispatched`) in one transaction and starts a boot for each once the commit answers. When the store goes away
as the COMMIT lands, the rows exist but no boot was started: the machine would count against `max_workers`
and the fleet cap for as long as this process lives (no reclaim touches a live owner's rows) and its job
would never run. A hint's start has the same window.

Such a row is this process's own `starting` machine that no task of the process drives and that was never
started (no provider id). The scaler pass reads the rows while no placement is in flight (a placement's boots
register before it lets go), so a row that looks unbooted then is one — unless a boot of it began in this
process and ended abnormally (an unexpected error between the provider's create and the write recording it):
no provider id then does not mean no create, so such a row is released, never booted twice, and a machine
its create may have made is left to the orphan sweep (its row gone, it matches nothing).

It is booted, on the normal path, rather than released: the row holds everything a boot needs (the token
the worker is started with, the job handed to it), a boot is fenced by owner and term at each write exactly
as a fresh one is, and a cancel of its job meanwhile leaves the booted machine warm, as for any boot.
Releasing would ask placement to insert the same row again. Only a machine whose type was removed or whose
image changed since is released (its job back in the queue in its place, or failed with the reason if the
type is gone): booting it would start a machine that takes no work.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.pool.machine_type import Catalogue
from thermostat.policy.pool.machines import Machine, MachineState, is_stale


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacedMachine:
    """One of this process's machine rows: the machine, and whether a provider start was recorded for it."""

    machine: Machine
    started: bool


class Recovery(StrEnum):
    BOOT = "boot"
    RELEASE = "release"


@dataclass(frozen=True, slots=True, kw_only=True)
class UnbootedAction:
    machine_id: str
    recovery: Recovery
    reason: str


def is_unbooted(placed: PlacedMachine, driven: Collection[str]) -> bool:
    """Starting, never started at a provider, and driven by no task of this process."""
    return placed.machine.state is MachineState.STARTING and not placed.started and placed.machine.id not in driven


def plan_unbooted(
    *,
    machines: Iterable[PlacedMachine],
    driven: Collection[str],
    catalogue: Catalogue,
    boot_began: Collection[str] = (),
) -> tuple[UnbootedAction, ...]:
    """What to do with each unbooted machine: boot it, or release it when its type no longer takes work or a
    boot of it already began here (`boot_began`: boots of this process that ended abnormally)."""
    actions = []
    for placed in machines:
        if not is_unbooted(placed, driven):
            continue
        machine = placed.machine
        if machine.id in boot_began:
            reason = "its boot ended abnormally, perhaps after the provider's create: not started twice"
            actions.append(UnbootedAction(machine_id=machine.id, recovery=Recovery.RELEASE, reason=reason))
        elif is_stale(machine, catalogue):
            current = catalogue.get(machine.machine_type)
            reason = (
                f"machine type {machine.machine_type} was removed"
                if current is None
                else f"machine type {machine.machine_type} now runs {current.image}, not {machine.image}"
            )
            actions.append(UnbootedAction(machine_id=machine.id, recovery=Recovery.RELEASE, reason=reason))
        else:
            reason = "its placement's answer was lost before its boot started"
            actions.append(UnbootedAction(machine_id=machine.id, recovery=Recovery.BOOT, reason=reason))
    return tuple(actions)
