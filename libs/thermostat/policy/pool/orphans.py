"""Orphan sweep: which machines a provider lists are the pool's and unknown to its store (issue 12).

A backend names every machine `{prefix}-{type}-{machine_id}` (RunPod pods, Fly Machines, Docker containers,
whose labels carry the same machine id), and the pool inserts a machine's row, with that id, *before* it asks
the provider to boot it. So the machine id in a listed name is what decides, not the provider id:

- a listed machine whose name does not carry `{prefix}-…-{uuid}` is not ours (another tenant of the account,
  a pod the pod controller runs, a hand-made one) and is never an orphan;
- one whose machine id is a row in the store is known, even while its row has no provider id yet (the boot
  is in flight: the create has not answered, or its answer is not recorded yet);
- one whose provider id is a row's provider id is known (a name edited in the console);
- every other one is an orphan: a crashed dispatcher's boot, a row deleted by hand, a stop that reported
  success but left the machine running.

The shell must read the store *after* listing the provider: a row inserted before its boot then shows in
the read for every machine the list could hold, so a starting machine is never judged on a stale read.

The other order cannot be closed that way: a machine the pool is stopping is listed, then its row is deleted
once the provider accepted the stop, and the store read misses it. So an orphan is only *terminated* once two
consecutive passes found it (`to_terminate`): by the second the provider has ended the machine the pool
stopped and lists it no more, while a real orphan is still there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from thermostat.policy.common.orphan_sweep import OrphanSweep

__all__ = ["ListedMachine", "Orphan", "OrphanSweep", "find_orphans", "machine_id_in_name", "to_terminate"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedMachine:
    """ListedMachine is one machine as its provider lists it."""

    provider_id: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Orphan:
    """Orphan is a listed machine carrying the pool's name and unknown to the store."""

    provider_id: str
    name: str
    machine_id: str
    machine_type: str  # the type in its name (the type may have left the catalogue since)


def machine_id_in_name(name: str, *, prefix: str) -> str | None:
    """The machine id in `{prefix}-{type}-{machine_id}`, or None when the name is not the pool's."""
    if not prefix or not name.startswith(f"{prefix}-"):
        return None
    rest = name.removeprefix(f"{prefix}-")
    # a uuid holds dashes: the id is the last 36 characters, after a non-empty type and a dash
    if len(rest) < 38 or rest[-37] != "-":
        return None
    candidate = rest[-36:]
    machine_type = rest[:-37]
    try:
        parsed = uuid.UUID(candidate)
    except ValueError:
        return None
    if not machine_type or str(parsed) != candidate.lower():
        return None
    return str(parsed)


def find_orphans(
    *,
    listed: Iterable[ListedMachine],
    known_machine_ids: Iterable[str],
    known_provider_ids: Iterable[str],
    prefix: str,
) -> tuple[Orphan, ...]:
    """The listed machines named as the pool's whose machine id and provider id the store does not hold."""
    machine_ids = {machine_id.lower() for machine_id in known_machine_ids}
    provider_ids = set(known_provider_ids)
    orphans: list[Orphan] = []
    for machine in listed:
        machine_id = machine_id_in_name(machine.name, prefix=prefix)
        if machine_id is None or machine_id in machine_ids or machine.provider_id in provider_ids:
            continue
        machine_type = machine.name.removeprefix(f"{prefix}-")[:-37]
        orphans.append(
            Orphan(provider_id=machine.provider_id, name=machine.name, machine_id=machine_id, machine_type=machine_type)
        )
    return tuple(orphans)


def to_terminate(*, current: Iterable[Orphan], previous: Iterable[Orphan]) -> tuple[Orphan, ...]:
    """The orphans of this pass that the previous pass found too (same provider id): only these are ended."""
    seen = {orphan.provider_id for orphan in previous}
    return tuple(orphan for orphan in current if orphan.provider_id in seen)
