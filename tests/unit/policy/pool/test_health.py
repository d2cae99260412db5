"""Health retirement: N consecutive misses retire a warm machine; a pass where all fail is local."""

from __future__ import annotations

import pytest

from tests.unit.policy.pool.conftest import catalogue, cpu, machine
from thermostat.policy.pool.health import HealthVerdict, judge_health, machines_to_probe
from thermostat.policy.pool.machines import Machine, MachineState

S = MachineState
CATALOGUE = catalogue(cpu(), cpu(name="off", health_check_failures=0), cpu(name="one", health_check_failures=1))


def judge(machines: list[Machine], probes: dict[str, bool]) -> HealthVerdict:
    return judge_health(machines=machines, probes=probes, catalogue=CATALOGUE)


@pytest.mark.parametrize(
    ("m", "probed"),
    [
        pytest.param(machine("m", S.WARM), True, id="warm-machine-probed"),
        pytest.param(machine("m", S.BUSY), False, id="busy-machine-never-probed"),
        pytest.param(machine("m", S.STARTING), False, id="starting-machine-left-to-boot-polling"),
        pytest.param(machine("m", S.STOPPING), False, id="stopping-machine-not-probed"),
        pytest.param(machine("m", S.WARM, machine_type="off"), False, id="zero-failures-turns-probing-off"),
        pytest.param(machine("m", S.WARM, machine_type="gone"), True, id="removed-type-still-probed-until-retired"),
    ],
)
def test_which_machines_are_probed(m: Machine, probed: bool) -> None:
    """Only warm machines of probing types are probed."""
    assert (machines_to_probe([m], CATALOGUE) == (m,)) is probed


@pytest.mark.parametrize(
    ("misses_before", "answered", "misses_after", "retired"),
    [
        pytest.param(0, False, 1, False, id="first-miss-counted"),
        pytest.param(1, False, 2, False, id="second-miss-counted"),
        pytest.param(2, False, 3, True, id="third-consecutive-miss-retires"),
        pytest.param(2, True, 0, False, id="answer-resets-the-count"),
    ],
)
def test_consecutive_misses_retire_after_health_check_failures(
    misses_before: int, answered: bool, misses_after: int, retired: bool
) -> None:
    """A machine is retired after health_check_failures consecutive misses (default 3); an answer resets."""
    machines = [machine("m", health_misses=misses_before), machine("ok")]
    verdict = judge(machines, {"m": answered, "ok": True})
    assert verdict.misses["m"] == misses_after
    assert ("m" in verdict.retire) is retired
    assert not verdict.local_fault


def test_type_threshold_applies() -> None:
    """health_check_failures 1 retires on the first miss."""
    verdict = judge([machine("m", machine_type="one"), machine("ok")], {"m": False, "ok": True})
    assert verdict.retire == ("m",)


def test_pass_where_every_probed_machine_fails_is_local() -> None:
    """Every probe failing is this process's network: nobody retired, no miss counted."""
    machines = [machine("a", health_misses=2), machine("b", health_misses=2), machine("c")]
    verdict = judge(machines, {"a": False, "b": False, "c": False})
    assert verdict == HealthVerdict(misses={}, retire=(), local_fault=True)


def test_one_answer_makes_the_failures_real() -> None:
    """If any probed machine answers, the network works and the others' misses count."""
    machines = [machine("a", health_misses=2), machine("b", health_misses=2), machine("c")]
    verdict = judge(machines, {"a": False, "b": False, "c": True})
    assert verdict.retire == ("a", "b")
    assert not verdict.local_fault


def test_lone_machine_failing_is_not_the_fleet_dying() -> None:
    """With one probed machine its misses count, so a one-machine pool still retires a dead machine."""
    verdict = judge([machine("m", health_misses=2)], {"m": False})
    assert (verdict.retire, verdict.local_fault) == (("m",), False)


def test_machine_that_turned_busy_mid_probe_is_not_judged() -> None:
    """A probe result for a machine now running a job counts nothing: busy machines are never judged."""
    verdict = judge([machine("m", S.BUSY, health_misses=2), machine("ok")], {"m": False, "ok": True})
    assert "m" not in verdict.misses
    assert verdict.retire == ()


def test_busy_machine_does_not_count_towards_all_fail() -> None:
    """Only judged probes decide the all-fail rule."""
    machines = [machine("a", S.BUSY), machine("b", health_misses=2), machine("c", health_misses=2)]
    verdict = judge(machines, {"a": True, "b": False, "c": False})
    assert verdict.local_fault
