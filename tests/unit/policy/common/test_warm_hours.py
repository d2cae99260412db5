"""RUNPOD_WARM_HOURS read and placed in time: one named test per rule (policy/common/warm_hours.py)."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest

from thermostat.policy.common.warm_hours import (
    Occurrence,
    WarmHoursError,
    inside_warm_hours,
    parse_warm_hours,
    warm_hours_of,
)

BERLIN = parse_warm_hours("Mon-Fri 08:00-18:00 Europe/Berlin", "RUNPOD_WARM_HOURS")


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param("Mon-Fri 08:00-18:00", "no time zone", id="no-zone"),
        pytest.param("Mon-Fri 08:00-18:00 Mars/Olympus", "unknown time zone 'Mars/Olympus'", id="unknown-zone"),
        pytest.param("Mon-Fry 08:00-18:00 UTC", "'Mon-Fry' is not a day or a day range", id="bad-day"),
        pytest.param("Mon-Fri 8-18 UTC", "8-18 is not HH:MM-HH:MM in 24-hour time", id="bad-time"),
        pytest.param("Mon-Fri 08:00-25:00 UTC", "is not HH:MM-HH:MM", id="hour-out-of-range"),
        pytest.param("Mon-Fri 18:00-08:00 UTC", "an overnight window is two windows", id="overnight"),
        pytest.param("Mon-Fri 08:00-08:00 UTC", "ends before it starts", id="empty-window"),
        pytest.param("Mon-Fri UTC", "is not 'DAYS HH:MM-HH:MM'", id="no-times"),
    ],
)
def test_a_malformed_value_is_an_error_naming_the_variable(raw: str, message: str) -> None:
    with pytest.raises(WarmHoursError, match="RUNPOD_QWEN_WARM_HOURS=") as error:
        parse_warm_hours(raw, "RUNPOD_QWEN_WARM_HOURS")
    assert message in str(error.value)


@pytest.mark.parametrize(
    "raw", [pytest.param("", id="empty"), pytest.param("  ", id="blank"), pytest.param("none", id="none")]
)
def test_blank_or_none_means_no_warm_hours(raw: str) -> None:
    assert parse_warm_hours(raw, "RUNPOD_WARM_HOURS") is None


@pytest.mark.parametrize(
    ("now", "inside"),
    [
        pytest.param(utc("2026-12-02T06:59:59"), False, id="winter-just-before-08-berlin"),
        pytest.param(utc("2026-12-02T07:00:00"), True, id="winter-08-berlin-is-07-utc"),
        pytest.param(utc("2026-12-02T16:59:59"), True, id="winter-last-second"),
        pytest.param(utc("2026-12-02T17:00:00"), False, id="winter-end-is-exclusive"),
        pytest.param(utc("2026-07-01T06:00:00"), True, id="summer-08-berlin-is-06-utc"),
        pytest.param(utc("2026-12-05T10:00:00"), False, id="saturday"),
    ],
)
def test_local_wall_clock_windows_follow_the_zone(now: datetime, inside: bool) -> None:
    assert inside_warm_hours(BERLIN, now) is inside


def test_a_lead_counts_the_time_just_before_a_window_as_inside() -> None:
    assert inside_warm_hours(BERLIN, utc("2026-12-02T06:50:00"), lead=timedelta(minutes=15))
    assert not inside_warm_hours(BERLIN, utc("2026-12-02T06:40:00"), lead=timedelta(minutes=15))


def test_no_warm_hours_is_never_inside() -> None:
    assert not inside_warm_hours(None, utc("2026-12-02T10:00:00"))


def test_the_spring_forward_day_starts_at_the_first_valid_instant() -> None:
    """2026-03-29 Berlin skips 02:00-03:00: a 02:30 start happens at 03:30 CEST (01:30 UTC), fold=0's reading."""
    hours = parse_warm_hours("Sun 02:30-04:00 Europe/Berlin", "RUNPOD_WARM_HOURS")
    assert hours is not None
    window = hours.upcoming(utc("2026-03-29T00:00:00"))
    assert window == Occurrence(start=utc("2026-03-29T01:30:00"), end=utc("2026-03-29T02:00:00"))


def test_day_ranges_wrap_and_windows_combine() -> None:
    hours = parse_warm_hours("Fri-Mon 10:00-12:00; Wed 14:00-24:00 UTC", "RUNPOD_WARM_HOURS")
    assert hours is not None
    assert {w.days for w in hours.windows} == {frozenset({4, 5, 6, 0}), frozenset({2})}
    assert hours.upcoming(utc("2026-12-02T15:00:00")) == Occurrence(
        start=utc("2026-12-02T14:00:00"), end=utc("2026-12-03T00:00:00")
    )


def test_the_per_pod_variable_wins_over_the_shared_one() -> None:
    env = {"RUNPOD_WARM_HOURS": "Mon-Fri 08:00-18:00 UTC", "RUNPOD_LLAMA_3_WARM_HOURS": "Sat 09:00-10:00 UTC"}
    own = warm_hours_of(env, "llama-3")
    assert own is not None and own.text == "Sat 09:00-10:00 UTC"
    shared = warm_hours_of(env, "qwen")
    assert shared is not None and shared.text == "Mon-Fri 08:00-18:00 UTC"


def test_a_pod_opts_out_of_the_shared_hours_with_none() -> None:
    env = {"RUNPOD_WARM_HOURS": "Mon-Fri 08:00-18:00 UTC", "RUNPOD_QWEN_WARM_HOURS": "none"}
    assert warm_hours_of(env, "qwen") is None


def test_a_malformed_per_pod_value_names_the_per_pod_variable() -> None:
    with pytest.raises(WarmHoursError, match="RUNPOD_QWEN_WARM_HOURS="):
        warm_hours_of({"RUNPOD_QWEN_WARM_HOURS": "weekdays"}, "qwen")


def test_the_zone_database_ships_with_the_code() -> None:
    """tzdata is pinned: with no system zoneinfo (a slim container), Europe/Berlin still reads."""
    zoneinfo.reset_tzpath(to=[])
    try:
        assert zoneinfo.ZoneInfo.no_cache("Europe/Berlin").utcoffset(datetime(2026, 7, 1)) == timedelta(hours=2)
    finally:
        zoneinfo.reset_tzpath()
