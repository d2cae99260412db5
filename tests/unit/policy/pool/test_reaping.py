"""Cool-down reaping: warm machines idle past their type's cool-down, by a monotonic clock."""

from __future__ import annotations

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu, machine
from thermostat.policy.pool.machine_type import Catalogue
from thermostat.policy.pool.machines import Machine, MachineState
from thermostat.policy.pool.reaping import Retirement, RetireReason, plan_reaping

S = MachineState
START = 1_000_000.0  # the worker-pool seed's scaler tests start the clock here and step it
CATALOGUE = catalogue(cpu(cool_down_seconds=60), cpu(name="gpu", image="gpu:v1", cool_down_seconds=10))


def reaped(machines: list[Machine], now: float, cat: Catalogue = CATALOGUE) -> tuple[Retirement, ...]:
    return plan_reaping(machines=machines, catalogue=cat, now=now)


@pytest.mark.parametrize(
    ("state", "elapsed", "reaped_"),
    [
        pytest.param(S.WARM, 59.9, False, id="warm-within-cool-down-kept"),
        pytest.param(S.WARM, 60.0, True, id="warm-at-cool-down-reaped"),
        pytest.param(S.BUSY, 10_000.0, False, id="busy-machine-never-reaped"),
        pytest.param(S.STARTING, 10_000.0, False, id="starting-machine-never-reaped"),
        pytest.param(S.STOPPING, 10_000.0, False, id="stopping-machine-left-to-its-stop"),
    ],
)
def test_only_warm_machines_idle_past_the_cool_down_are_reaped(
    state: MachineState, elapsed: float, reaped_: bool
) -> None:
    """A warm machine idle for its type's cool_down_seconds is stopped; a busy one never is."""
    result = reaped([machine("m", state, idle_since=START)], START + elapsed)
    assert result == ((Retirement(machine_id="m", reason=RetireReason.COOL_DOWN),) if reaped_ else ())


def test_cool_down_is_per_type() -> None:
    """Each machine waits out its own type's cool-down."""
    machines = [machine("c", idle_since=START), machine("g", machine_type="gpu", image="gpu:v1", idle_since=START)]
    assert [r.machine_id for r in reaped(machines, START + 30)] == ["g"]


def test_zero_cool_down_reaps_as_soon_as_idle() -> None:
    """cool_down_seconds 0 stops a machine as soon as it finishes."""
    assert len(reaped([machine("m", idle_since=START)], START, catalogue(cpu(cool_down_seconds=0)))) == 1


def test_clock_reading_before_idle_since_is_not_idle_time() -> None:
    """A reading earlier than idle_since (another clock's) counts as not idle yet, never as idle forever."""
    assert reaped([machine("m", idle_since=START)], START - 3600, catalogue(cpu(cool_down_seconds=0))) == ()


@pytest.mark.parametrize(
    "offset", [pytest.param(-START, id="clock-at-zero"), pytest.param(86_400.0 * 365, id="a-year-on")]
)
def test_only_elapsed_monotonic_time_matters(offset: float) -> None:
    """The decision reads `now - idle_since` only: the same elapsed time at any clock origin decides the same."""
    machines = [machine("young", idle_since=START + 30), machine("old", idle_since=START)]
    shifted = [machine("young", idle_since=START + 30 + offset), machine("old", idle_since=START + offset)]
    assert (
        reaped(machines, START + 60)
        == reaped(shifted, START + 60 + offset)
        == (Retirement(machine_id="old", reason=RetireReason.COOL_DOWN),)
    )


@pytest.mark.parametrize(
    ("fields", "elapsed", "reason"),
    [
        pytest.param({"image": "worker:v0"}, 60.0, RetireReason.IMAGE_CHANGED, id="stale-image-retires-at-cool-down"),
        pytest.param(
            {"machine_type": "gone", "cool_down_seconds": 5.0},
            5.0,
            RetireReason.TYPE_REMOVED,
            id="removed-type-retires-at-its-own-cool-down",
        ),
    ],
)
def test_stale_machines_retire_at_cool_down(fields: dict[str, object], elapsed: float, reason: RetireReason) -> None:
    """Old-image and removed-type machines get no new work and retire once idle past the cool-down."""
    stale = machine("m", idle_since=START, **fields)
    assert reaped([stale], START + elapsed - 0.1) == ()
    assert reaped([stale], START + elapsed) == (Retirement(machine_id="m", reason=reason),)


def test_stale_busy_machine_finishes_its_job() -> None:
    """A removed type's busy machine is not reaped while it runs."""
    assert reaped([machine("m", S.BUSY, machine_type="gone", idle_since=START)], START + 10_000) == ()


@pytest.mark.parametrize(
    ("state", "reaped_"),
    [
        pytest.param(S.WARM, True, id="idle-marked-machine-retires-at-once"),
        pytest.param(S.BUSY, False, id="busy-marked-machine-finishes-its-job"),
    ],
)
def test_a_machine_marked_to_give_its_slot_up_retires_once_idle_whatever_its_cool_down(
    state: MachineState, reaped_: bool
) -> None:
    """Fair share marked it and its job was cancelled before it was sent: no completion retires it, the reaper does."""
    marked = machine("m1", state, idle_since=START, yield_to="globex")
    expected = (Retirement(machine_id="m1", reason=RetireReason.FAIR_SHARE),) if reaped_ else ()
    assert reaped([marked], START + 1) == expected
