"""Activity classification: one scrape against the previous one's work counter (#2075)."""

from __future__ import annotations

import pytest

from thermostat.policy.idle.activity import ActivityReason, ActivityVerdict, classify_activity
from thermostat.policy.idle.vllm_metrics import PodActivity


@pytest.mark.parametrize(
    ("active", "completed", "baseline", "busy", "reason"),
    [
        pytest.param(1, 10.0, 10.0, True, ActivityReason.IN_FLIGHT, id="in-flight-is-busy"),
        pytest.param(2, None, None, True, ActivityReason.IN_FLIGHT, id="in-flight-without-counter-is-busy"),
        pytest.param(0, 11.0, 10.0, True, ActivityReason.COUNTER_ADVANCED, id="counter-advanced-is-busy"),
        pytest.param(0, 3.0, 10.0, True, ActivityReason.COUNTER_WENT_BACKWARDS, id="counter-backwards-is-busy"),
        pytest.param(0, 10.0, None, True, ActivityReason.NO_BASELINE, id="counter-without-baseline-is-busy"),
        pytest.param(0, 0.0, None, True, ActivityReason.NO_BASELINE, id="zero-counter-without-baseline-is-busy"),
        pytest.param(0, 10.0, 10.0, False, ActivityReason.COUNTER_UNCHANGED, id="counter-unchanged-is-idle"),
        pytest.param(0, None, None, False, ActivityReason.GAUGE_ONLY, id="no-counter-falls-back-to-the-gauge"),
        pytest.param(0, None, 10.0, False, ActivityReason.GAUGE_ONLY, id="counter-vanished-falls-back-to-gauge"),
        pytest.param(None, 11.0, 10.0, True, ActivityReason.COUNTER_ADVANCED, id="counter-without-gauge-advances"),
        pytest.param(None, 10.0, 10.0, False, ActivityReason.COUNTER_UNCHANGED, id="counter-without-gauge-steady"),
    ],
)
def test_a_scrape_is_busy_or_idle_by_gauge_then_counter_direction(
    active: int | None, completed: float | None, baseline: float | None, busy: bool, reason: ActivityReason
) -> None:
    """In flight → busy; advanced, backwards or unseeded counter → busy; steady counter or gauge alone → idle."""
    verdict = classify_activity(PodActivity(active=active, completed=completed), baseline)
    assert (verdict.busy, verdict.reason) == (busy, reason)


def test_the_counter_advance_between_ticks_is_busy() -> None:
    """A turn that began and ended between two scrapes shows only in the counter (#2075)."""
    assert classify_activity(PodActivity(active=0, completed=131.0), 130.0).busy


def test_every_scrape_with_a_counter_becomes_the_next_baseline() -> None:
    """The new baseline is this scrape's counter, whatever the verdict."""
    assert classify_activity(PodActivity(active=3, completed=42.0), 7.0) == ActivityVerdict(
        busy=True, reason=ActivityReason.IN_FLIGHT, baseline=42.0
    )


def test_a_scrape_without_a_counter_leaves_no_baseline() -> None:
    """Without a counter there is nothing to compare the next scrape with."""
    assert classify_activity(PodActivity(active=0, completed=None), 5.0).baseline is None


def test_only_the_direction_of_the_counter_matters() -> None:
    """A one-token advance is as busy as a thousand-token one."""
    small = classify_activity(PodActivity(active=0, completed=1000.5), 1000.0)
    large = classify_activity(PodActivity(active=0, completed=9000.0), 1000.0)
    assert small.busy
    assert large.busy
