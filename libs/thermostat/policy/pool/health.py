"""Health retirement: retire a warm machine after `health_check_failures` consecutive missed probes.

The worker-pool seed: "One miss is a slow machine or a dropped packet, and retiring on that trades a cold start for
every hiccup; three is a machine that is gone." A probe that answers resets the count. 0 turns probing off
for a type. Only warm machines are probed: a machine running a job is neither probed nor reaped, and one
that turned busy while its probe was in flight is not judged by it (its miss may be the job's load).

All-fail-is-local: "a pass in which every machine fails is treated as this process's own network rather
than as the fleet dying at once, since retiring everything for a local DNS blip would hand every user a
cold start for a fault that was never on the machines." Such a pass counts no miss at all (the fault was
never the machines'), and no count is reset either. The rule needs at least two probes: one machine failing
alone is not "the fleet dying at once", and treating it as local would leave a dead machine in a one-machine
pool warm forever (three consecutive misses still absorb a blip there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from thermostat.policy.pool.machine_type import DEFAULT_HEALTH_CHECK_FAILURES, Catalogue
from thermostat.policy.pool.machines import Machine, MachineState

MIN_PROBES_FOR_LOCAL_FAULT = 2


def failures_allowed(machine: Machine, catalogue: Catalogue) -> int:
    """The type's `health_check_failures`; a removed type's machines keep the default until they retire."""
    current = catalogue.get(machine.machine_type)
    return current.health_check_failures if current is not None else DEFAULT_HEALTH_CHECK_FAILURES


def machines_to_probe(machines: Iterable[Machine], catalogue: Catalogue) -> tuple[Machine, ...]:
    """Warm machines of types that probe (health_check_failures > 0); never busy, starting or stopping ones."""
    return tuple(m for m in machines if m.state is MachineState.WARM and failures_allowed(m, catalogue) > 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthVerdict:
    """HealthVerdict is a probe pass judged: new miss counts, machines to retire, and the local-fault flag."""

    misses: Mapping[str, int]  # machine id -> consecutive misses after this pass (only machines judged)
    retire: tuple[str, ...]
    local_fault: bool


def judge_health(*, machines: Sequence[Machine], probes: Mapping[str, bool], catalogue: Catalogue) -> HealthVerdict:
    """Judge one pass: `probes` maps a probed machine's id to whether it answered; `machines` is read after."""
    by_id = {m.id: m for m in machines}
    judged = {
        machine_id: answered
        for machine_id, answered in probes.items()
        if machine_id in by_id and by_id[machine_id].state is MachineState.WARM
    }
    if len(judged) >= MIN_PROBES_FOR_LOCAL_FAULT and not any(judged.values()):
        return HealthVerdict(misses={}, retire=(), local_fault=True)
    misses: dict[str, int] = {}
    retire: list[str] = []
    for machine_id, answered in judged.items():
        machine = by_id[machine_id]
        misses[machine_id] = 0 if answered else machine.health_misses + 1
        allowed = failures_allowed(machine, catalogue)
        if allowed > 0 and misses[machine_id] >= allowed:
            retire.append(machine_id)
    return HealthVerdict(misses=misses, retire=tuple(retire), local_fault=False)
