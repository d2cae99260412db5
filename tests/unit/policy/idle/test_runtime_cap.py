"""The wall-clock runtime cap: armed by the first up observation, held by Unknown, disarmed by NotRunning."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from thermostat.policy.idle.pod_signal import PodSignal
from thermostat.policy.idle.runtime_cap import advance_cap, cap_reached

T0 = datetime(2026, 9, 9, 9, 40, 41, tzinfo=UTC)
LATER = T0 + timedelta(minutes=5)


@pytest.mark.parametrize(
    "signal",
    [
        pytest.param(PodSignal.BUSY, id="busy"),
        pytest.param(PodSignal.IDLE, id="idle"),
        pytest.param(PodSignal.UNREACHABLE_BUT_RUNNING, id="running"),
        pytest.param(PodSignal.BOOTING, id="startup"),
    ],
)
def test_the_first_positive_up_observation_arms_the_cap(signal: PodSignal) -> None:
    """Running or startup starts the clock; a later up tick keeps the original start."""
    assert advance_cap(None, signal, T0) == T0
    assert advance_cap(T0, signal, LATER) == T0


def test_unknown_never_arms_the_cap() -> None:
    """A blip is not an up observation."""
    assert advance_cap(None, PodSignal.UNKNOWN, T0) is None


def test_unknown_never_resets_the_cap() -> None:
    """A run of Unknown ticks is exactly what the cap is the backstop for."""
    assert advance_cap(T0, PodSignal.UNKNOWN, LATER) == T0


def test_not_running_disarms_the_cap() -> None:
    """Genuinely down: the next up observation starts a new clock."""
    assert advance_cap(T0, PodSignal.NOT_RUNNING, LATER) is None


@pytest.mark.parametrize(
    ("started_at", "now", "limit", "reached"),
    [
        pytest.param(T0, T0 + timedelta(hours=6), timedelta(hours=6), True, id="at-the-limit"),
        pytest.param(T0, T0 + timedelta(hours=6, seconds=-1), timedelta(hours=6), False, id="a-second-before"),
        pytest.param(None, T0 + timedelta(days=3), timedelta(hours=6), False, id="disarmed"),
        pytest.param(T0, T0 + timedelta(days=3), None, False, id="disabled"),
    ],
)
def test_the_cap_is_reached_once_uptime_meets_max_runtime(
    started_at: datetime | None, now: datetime, limit: timedelta | None, reached: bool
) -> None:
    """now − start ≥ MAX_RUNTIME stops every up pod; 0 (None) disables."""
    assert cap_reached(started_at, now, limit) is reached
