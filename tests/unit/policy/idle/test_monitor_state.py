"""The monitor's persisted memory: a JSON-safe dict that a restarted replica continues from exactly."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from thermostat.policy.idle.idle_phase import Phase, PhaseCounters
from thermostat.policy.idle.monitor_state import MonitorState, PodMemory

T0 = datetime(2026, 9, 9, 9, 40, 41, 123456, tzinfo=UTC)

FULL = MonitorState(
    counters=PhaseCounters(phase=Phase.READY, idle_streak=7, booting_ticks=0),
    cap_started_at=T0,
    boot_started_at=T0 + timedelta(seconds=1),
    pods={
        "stale": PodMemory(baseline=None, ready_since=None),
        "p2": PodMemory(baseline=18422.0 + 27453.0, ready_since=T0 + timedelta(minutes=6), incarnation=41),
    },
)


def test_the_state_survives_a_json_round_trip_exactly() -> None:
    """Phase, counters, cap start, boot start, baselines and readiness, in pod order."""
    restored = MonitorState.from_dict(json.loads(json.dumps(FULL.to_dict())))
    assert restored == FULL
    assert list(restored.pods) == ["stale", "p2"]


def test_the_dict_is_plain_json_with_iso_timestamps() -> None:
    """What lands in Postgres is readable by a human with psql."""
    data = FULL.to_dict()
    assert data["phase"] == "READY"
    assert data["cap_started_at"] == "2026-09-09T09:40:41.123456+00:00"
    assert data["pods"]["p2"] == {
        "baseline": 45875.0,
        "ready_since": "2026-09-09T09:46:41.123456+00:00",
        "incarnation": 41,
        "stall_ticks": 0,
    }
    assert data["version"] == 1


def test_a_state_written_before_incarnations_reads_them_as_unknown() -> None:
    """A row persisted by an older monitor has no incarnation per pod: unknown, never a reason to forget."""
    data = FULL.to_dict()
    del data["pods"]["p2"]["incarnation"]
    assert MonitorState.from_dict(data).pods["p2"].incarnation is None


def test_an_incarnation_that_is_not_an_integer_is_refused_naming_the_pod() -> None:
    data = FULL.to_dict()
    data["pods"]["p2"]["incarnation"] = "41"
    with pytest.raises(ValueError, match="pod p2 incarnation must be an integer"):
        MonitorState.from_dict(data)


def test_an_empty_state_is_down_with_nothing_remembered() -> None:
    """The state a volume starts with."""
    assert MonitorState.from_dict(MonitorState().to_dict()) == MonitorState()
    assert MonitorState().phase is Phase.DOWN


def test_non_utc_offsets_survive() -> None:
    """An aware timestamp keeps its instant whatever its offset."""
    tz = timezone(timedelta(hours=2))
    state = MonitorState(cap_started_at=datetime(2026, 9, 9, 11, 40, tzinfo=tz))
    assert MonitorState.from_dict(state.to_dict()).cap_started_at == datetime(2026, 9, 9, 9, 40, tzinfo=UTC)


def test_the_pod_map_cannot_be_mutated_behind_the_states_back() -> None:
    """A frozen state is frozen all the way down."""
    with pytest.raises(TypeError):
        FULL.pods["new"] = PodMemory()  # type: ignore[index]


def corrupt(**changes: Any) -> dict[str, Any]:
    data = FULL.to_dict()
    data.update(changes)
    return data


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(corrupt(version=2), id="future-version"),
        pytest.param(corrupt(phase="IDLE"), id="unknown-phase"),
        pytest.param(corrupt(idle_streak=-1), id="negative-streak"),
        pytest.param(corrupt(idle_streak="3"), id="string-streak"),
        pytest.param(corrupt(booting_ticks=True), id="bool-ticks"),
        pytest.param(corrupt(cap_started_at="yesterday"), id="bad-timestamp"),
        pytest.param(corrupt(cap_started_at="2026-09-09T09:40:41"), id="naive-timestamp"),
        pytest.param(corrupt(boot_started_at=1757410841), id="epoch-number"),
        pytest.param(corrupt(pods=[]), id="pods-not-an-object"),
        pytest.param(corrupt(pods={"p": {"baseline": "10"}}), id="string-baseline"),
        pytest.param(corrupt(pods={"p": {"baseline": float("nan")}}), id="nan-baseline"),
        pytest.param(corrupt(pods={"p": 5}), id="pod-not-an-object"),
    ],
)
def test_a_malformed_state_is_refused_not_guessed(data: dict[str, Any]) -> None:
    """A silently reset state would re-bill a model load as idle or forget the cap."""
    with pytest.raises(ValueError, match=r"version|phase|must be|ISO-8601|timezone"):
        MonitorState.from_dict(data)


def test_a_state_written_before_the_stall_guard_reads_no_stall_counted() -> None:
    """A row persisted by an older monitor has no stall count per pod: none counted yet."""
    data = FULL.to_dict()
    del data["pods"]["p2"]["stall_ticks"]
    assert MonitorState.from_dict(data).pods["p2"].stall_ticks == 0


@pytest.mark.parametrize(
    "bad", [pytest.param(-1, id="negative"), pytest.param("3", id="text"), pytest.param(True, id="bool")]
)
def test_a_stall_count_that_is_not_a_count_is_refused_naming_the_pod(bad: object) -> None:
    data = FULL.to_dict()
    data["pods"]["p2"]["stall_ticks"] = bad
    with pytest.raises(ValueError, match="pod p2 stall_ticks must be a non-negative integer"):
        MonitorState.from_dict(data)


def test_the_stall_count_survives_a_round_trip() -> None:
    state = MonitorState(pods={"p1": PodMemory(baseline=3.0, stall_ticks=7)})
    assert MonitorState.from_dict(state.to_dict()) == state
