"""How a pool dispatcher leaves and what the next process keeps (thermostat.policy.pool.departure), rule by rule."""

from __future__ import annotations

import pytest

from thermostat.policy.pool.departure import (
    DEPARTURE_BY_SIGNAL,
    Adoption,
    AtGrace,
    Departure,
    adopt,
    departure_for,
    fate_at_grace,
    grace_error,
)
from thermostat.policy.pool.jobs import JobState
from thermostat.policy.pool.machines import MachineState


@pytest.mark.parametrize(
    ("signal_name", "departure"),
    [
        pytest.param("SIGTERM", Departure.RELEASE, id="sigterm-is-a-deploy-the-fleet-stays"),
        pytest.param("SIGINT", Departure.STOP_FLEET, id="sigint-is-the-pool-going-away"),
        pytest.param(None, Departure.STOP_FLEET, id="a-direct-close-stops-the-fleet"),
        pytest.param("SIGHUP", Departure.STOP_FLEET, id="any-other-signal-stops-the-fleet"),
    ],
)
def test_the_signal_says_which_departure(signal_name: str | None, departure: Departure) -> None:
    assert departure_for(signal_name) is departure


def test_only_sigterm_releases() -> None:
    """A deploy is the one way out that leaves machines running: everything else stops what it owns."""
    assert [s for s, d in DEPARTURE_BY_SIGNAL.items() if d is Departure.RELEASE] == ["SIGTERM"]


@pytest.mark.parametrize(
    ("state", "fate"),
    [
        pytest.param(JobState.DISPATCHED, AtGrace.REQUEUE, id="never-sent-goes-back-to-the-queue"),
        pytest.param(JobState.RUNNING, AtGrace.FAIL, id="running-past-the-grace-fails-never-run-twice"),
        pytest.param(JobState.QUEUED, None, id="queued-is-untouched"),
        pytest.param(JobState.COMPLETED, None, id="finished-is-untouched"),
    ],
)
def test_what_a_job_in_flight_becomes_when_the_grace_runs_out(state: JobState, fate: AtGrace | None) -> None:
    assert fate_at_grace(state) is fate


def test_the_grace_error_names_the_instance_the_grace_and_what_to_do() -> None:
    error = grace_error("pool-dispatcher-7d9f-abc", 300)
    assert "pool-dispatcher-7d9f-abc" in error and "300 s grace" in error and "submit it again" in error


@pytest.mark.parametrize(
    ("state", "healthy", "idle", "verdict", "kept_idle"),
    [
        pytest.param(
            MachineState.WARM, True, 500.0, Adoption.KEEP, 500.0, id="warm-and-answering-is-kept-its-clock-too"
        ),
        pytest.param(MachineState.WARM, False, 500.0, Adoption.STOP, 500.0, id="no-answer-is-stopped-not-reused"),
        pytest.param(MachineState.STOPPING, True, None, Adoption.STOP, 0.0, id="stopping-is-stopped-again"),
        pytest.param(MachineState.BUSY, True, None, Adoption.STOP, 0.0, id="busy-after-a-crash-is-stopped"),
        pytest.param(MachineState.WARM, True, None, Adoption.KEEP, 0.0, id="no-clock-on-the-row-counts-from-now"),
        pytest.param(MachineState.WARM, True, -3.0, Adoption.KEEP, 0.0, id="a-clock-ahead-counts-as-not-idle-yet"),
    ],
)
def test_what_a_process_keeps_of_a_machine_it_takes_over(
    state: MachineState, healthy: bool, idle: float | None, verdict: Adoption, kept_idle: float
) -> None:
    adopted = adopt(state=state, healthy=healthy, idle_seconds=idle)
    assert adopted.verdict is verdict and adopted.idle_seconds == kept_idle
