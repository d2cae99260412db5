"""When the controller wakes a pod for its warm hours: one named test per row (policy/wake/scheduled_wake.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from thermostat.policy.common.warm_hours import parse_warm_hours
from thermostat.policy.wake.scheduled_wake import CATCH_UP, DEFAULT_LEAD, scheduled_wake_due, wake_lead

HOURS = parse_warm_hours("Mon-Fri 08:00-18:00 UTC", "RUNPOD_WARM_HOURS")
OPENS = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)  # a Wednesday
LEAD = timedelta(minutes=6)


@pytest.mark.parametrize(
    ("now", "woken_for", "due"),
    [
        pytest.param(OPENS - LEAD - timedelta(seconds=1), None, False, id="before-start-minus-lead-waits"),
        pytest.param(OPENS - LEAD, None, True, id="at-start-minus-lead-wakes"),
        pytest.param(OPENS + CATCH_UP - timedelta(seconds=1), None, True, id="a-late-controller-catches-up"),
        pytest.param(OPENS - LEAD, OPENS, False, id="once-per-window"),
        pytest.param(OPENS + CATCH_UP, None, False, id="past-catch-up-left-to-the-first-user"),
        pytest.param(datetime(2026, 12, 5, 7, 55, tzinfo=UTC), None, False, id="no-window-on-saturday"),
    ],
)
def test_each_row_of_the_schedule(now: datetime, woken_for: datetime | None, due: bool) -> None:
    assert HOURS is not None
    decision = scheduled_wake_due(HOURS, now, lead=LEAD, woken_for=woken_for)
    assert (decision is not None) is due
    if decision is not None:
        assert decision.window.start == OPENS


def test_the_next_window_is_woken_for_even_after_the_last_one() -> None:
    assert HOURS is not None
    decision = scheduled_wake_due(HOURS, OPENS + timedelta(days=1) - LEAD, lead=LEAD, woken_for=OPENS)
    assert decision is not None and decision.window.start == OPENS + timedelta(days=1)


@pytest.mark.parametrize(
    ("boots", "lead"),
    [
        pytest.param((), DEFAULT_LEAD + timedelta(seconds=30), id="no-measured-boot-uses-the-default"),
        pytest.param((172.0, 300.0, 540.0), timedelta(seconds=300 + 30), id="the-median-boot-plus-one-pass"),
    ],
)
def test_the_lead_is_the_measured_wake_eta_plus_one_pass(boots: tuple[float, ...], lead: timedelta) -> None:
    assert wake_lead(boots, margin=timedelta(seconds=30)) == lead
