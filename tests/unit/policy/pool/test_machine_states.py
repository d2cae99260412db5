"""The machine state machine (policy/pool/machines.py), row by row: one named test per transition, and its
totality."""

from __future__ import annotations

import itertools

import pytest

from thermostat.policy.pool.machines import (
    MACHINE_TRANSITIONS,
    MachineEvent,
    MachineState,
    RefusedMachineTransition,
    machine_after,
)

M, E = MachineState, MachineEvent
STATES: list[MachineState | None] = [None, *MachineState]

ROWS = [
    pytest.param(None, E.PLACE, M.STARTING, id="a-placed-machine-starts"),
    pytest.param(M.STARTING, E.BOOTED, M.WARM, id="a-booted-machine-with-no-job-is-warm"),
    pytest.param(M.STARTING, E.BOOTED_WITH_JOB, M.BUSY, id="a-booted-machine-takes-the-job-handed-at-placement"),
    pytest.param(M.STARTING, E.RETIRE, M.STOPPING, id="a-starting-machine-is-retired-on-shutdown-or-takeover"),
    pytest.param(M.STARTING, E.BOOT_FAILED, M.STOPPED, id="a-machine-that-failed-to-boot-goes"),
    pytest.param(M.WARM, E.CLAIM, M.BUSY, id="a-warm-machine-claimed-is-busy"),
    pytest.param(M.WARM, E.RETIRE, M.STOPPING, id="a-warm-machine-is-retired-at-cool-down-health-or-image"),
    pytest.param(M.BUSY, E.FREE, M.WARM, id="a-busy-machine-whose-job-ended-or-was-not-sent-is-warm"),
    pytest.param(M.BUSY, E.RETIRE, M.STOPPING, id="a-busy-machine-that-died-mid-job-is-retired"),
    pytest.param(M.STOPPING, E.STOPPED, M.STOPPED, id="a-stopping-machine-the-provider-stopped-goes"),
]


@pytest.mark.parametrize(("state", "event", "after"), ROWS)
def test_each_transition(state: MachineState | None, event: MachineEvent, after: MachineState) -> None:
    """The event moves a machine in that state to the row's state."""
    assert machine_after(state, event) is after


def test_the_named_transitions_are_the_whole_table() -> None:
    """Every row of the table has its named test above (a row added without one fails here)."""
    assert {(row.values[0], row.values[1]) for row in ROWS} == set(MACHINE_TRANSITIONS)


@pytest.mark.parametrize(
    ("state", "event"),
    [
        pytest.param(M.BUSY, E.CLAIM, id="a-busy-machine-runs-one-job-at-a-time"),
        pytest.param(M.STARTING, E.CLAIM, id="a-starting-machine-is-not-trusted-with-work-yet"),
        pytest.param(M.STOPPING, E.FREE, id="a-stopping-machine-never-comes-back"),
        pytest.param(M.WARM, E.STOPPED, id="a-warm-machine-is-retired-before-it-goes"),
        pytest.param(M.STOPPED, E.PLACE, id="a-stopped-machine-is-never-placed-again"),
    ],
)
def test_a_pair_the_table_lacks_is_refused_naming_both(state: MachineState | None, event: MachineEvent) -> None:
    with pytest.raises(RefusedMachineTransition, match=f"{state or 'no row'}.*{event}"):
        machine_after(state, event)


def test_the_table_is_total() -> None:
    """Every (state, event) pair is either a row or refused; every event has a row; every state is reachable from
    no row; every state but stopped has a way out, and each leads to stopped (every machine's bill ends)."""
    for state, event in itertools.product(STATES, MachineEvent):
        try:
            assert machine_after(state, event) in MachineState
        except RefusedMachineTransition:
            assert (state, event) not in MACHINE_TRANSITIONS
    assert {event for _, event in MACHINE_TRANSITIONS} == set(MachineEvent)
    assert _closure({None}) == set(STATES)
    assert not any(state is M.STOPPED for state, _ in MACHINE_TRANSITIONS)
    for state in set(MachineState) - {M.STOPPED}:
        assert M.STOPPED in _closure({state}), f"{state} is never stopped"


def _closure(start: set[MachineState | None]) -> set[MachineState | None]:
    seen = set(start)
    while True:
        more = {after for (state, _), after in MACHINE_TRANSITIONS.items() if state in seen} - seen
        if not more:
            return seen
        seen |= more
