"""Unbooted machines: a placement's rows whose commit answer was lost are booted, or released when stale."""

from __future__ import annotations

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu, machine
from thermostat.policy.pool.machine_type import Catalogue
from thermostat.policy.pool.machines import MachineState
from thermostat.policy.pool.unbooted import PlacedMachine, Recovery, plan_unbooted

S = MachineState
CATALOGUE = catalogue(cpu())


def recoveries(
    placed: list[PlacedMachine], driven: frozenset[str] = frozenset(), cat: Catalogue = CATALOGUE
) -> list[tuple[str, Recovery]]:
    return [(a.machine_id, a.recovery) for a in plan_unbooted(machines=placed, driven=driven, catalogue=cat)]


def row(id: str, state: MachineState = S.STARTING, *, started: bool = False, **fields: object) -> PlacedMachine:
    return PlacedMachine(machine=machine(id, state, **fields), started=started)


@pytest.mark.parametrize(
    ("placed", "driven", "recovered"),
    [
        pytest.param(row("m"), frozenset(), [("m", Recovery.BOOT)], id="starting-undriven-never-started-is-booted"),
        pytest.param(row("m"), frozenset({"m"}), [], id="a-boot-in-flight-is-left-to-it"),
        pytest.param(row("m", started=True), frozenset(), [], id="a-machine-a-provider-started-is-not-unbooted"),
        pytest.param(row("m", S.WARM), frozenset(), [], id="warm-machine-is-not-unbooted"),
        pytest.param(row("m", S.BUSY), frozenset(), [], id="busy-machine-is-left-to-reconcile"),
        pytest.param(row("m", S.STOPPING), frozenset(), [], id="stopping-machine-is-left-to-its-stop"),
    ],
)
def test_only_starting_machines_nothing_drives_and_no_provider_started_are_unbooted(
    placed: PlacedMachine, driven: frozenset[str], recovered: list[tuple[str, Recovery]]
) -> None:
    """A row counts as unbooted only while starting, undriven and without a provider start."""
    assert recoveries([placed], driven) == recovered


def test_a_machine_whose_type_was_removed_is_released() -> None:
    """Its type takes no work: booting it would start a machine nothing uses."""
    (action,) = plan_unbooted(machines=[row("m", machine_type="gpu")], driven=frozenset(), catalogue=CATALOGUE)
    assert (action.recovery, action.reason) == (Recovery.RELEASE, "machine type gpu was removed")


def test_a_machine_whose_type_changed_image_is_released() -> None:
    """An old-image machine takes no new work: its job waits for one on the current image."""
    (action,) = plan_unbooted(machines=[row("m", image="worker:v0")], driven=frozenset(), catalogue=CATALOGUE)
    assert action.recovery is Recovery.RELEASE
    assert "worker:v1" in action.reason


def test_each_unbooted_machine_is_decided_on_its_own() -> None:
    """Driven and undriven rows side by side: only the undriven ones are acted on, in the order read."""
    placed = [row("a"), row("b"), row("c", image="worker:v0"), row("d", started=True)]
    assert recoveries(placed, frozenset({"b"})) == [("a", Recovery.BOOT), ("c", Recovery.RELEASE)]


def test_a_machine_whose_boot_began_here_and_ended_abnormally_is_released_never_booted_twice() -> None:
    """No provider id does not mean no create when this process's boot of it died between the two."""
    (action,) = plan_unbooted(machines=[row("m")], driven=frozenset(), catalogue=CATALOGUE, boot_began={"m"})
    assert action.recovery is Recovery.RELEASE and "not started twice" in action.reason
