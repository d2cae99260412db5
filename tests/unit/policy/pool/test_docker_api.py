"""Docker Engine API negotiation: the highest version both sides speak, or one line naming both ranges."""

from __future__ import annotations

import pytest

from thermostat.policy.pool.docker_api import (
    SUPPORTED,
    ApiRange,
    ApiVersion,
    Negotiated,
    NoCommonVersion,
    negotiate,
)


def v(text: str) -> ApiVersion:
    version = ApiVersion.parse(text)
    assert version is not None
    return version


@pytest.mark.parametrize(
    ("daemon_api", "daemon_min", "spoken"),
    [
        pytest.param("1.41", "1.12", "1.41", id="engine-20.10-at-our-lowest"),
        pytest.param("1.47", "1.24", "1.47", id="older-daemon-its-highest"),
        pytest.param("1.52", "1.44", "1.52", id="engine-29.0-raised-minimum"),
        pytest.param("1.54", "1.40", "1.52", id="engine-29.3-lowered-minimum-our-highest"),
        pytest.param("1.56", "1.52", "1.52", id="newer-daemon-whose-minimum-is-our-highest"),
        pytest.param("1.44", None, "1.44", id="no-minimum-bounded-by-its-api-version"),
        pytest.param("1.44", "garbage", "1.44", id="unreadable-minimum-as-none"),
        pytest.param("v1.45", "1.24", "1.45", id="leading-v-read"),
    ],
)
def test_speaks_the_highest_version_both_support(daemon_api: str, daemon_min: str | None, spoken: str) -> None:
    """min(our highest, the daemon's ApiVersion), when at least both minimums."""
    assert negotiate(daemon_api=daemon_api, daemon_min=daemon_min) == Negotiated(version=v(spoken))


@pytest.mark.parametrize(
    ("daemon_api", "daemon_min", "named"),
    [
        pytest.param("1.40", "1.12", "Engine API 1.12–1.40 and this pool speaks 1.41–1.52", id="too-old-daemon"),
        pytest.param("1.58", "1.53", "Engine API 1.53–1.58 and this pool speaks 1.41–1.52", id="too-new-daemon"),
        pytest.param("1.39", None, "Engine API up to 1.39 and this pool speaks 1.41–1.52", id="too-old-no-minimum"),
    ],
)
def test_ranges_that_do_not_meet_refuse_naming_both(daemon_api: str, daemon_min: str | None, named: str) -> None:
    """No version in common is one line naming the daemon's range and ours."""
    outcome = negotiate(daemon_api=daemon_api, daemon_min=daemon_min)
    assert isinstance(outcome, NoCommonVersion)
    assert named in outcome.reason
    assert "\n" not in outcome.reason


@pytest.mark.parametrize("daemon_api", [None, "", "one.forty", 1.44, "1.44.1"])
def test_an_unreadable_api_version_is_refused_and_said(daemon_api: object) -> None:
    """A daemon whose ApiVersion cannot be read is not guessed at."""
    outcome = negotiate(daemon_api=daemon_api, daemon_min="1.24")
    assert isinstance(outcome, NoCommonVersion)
    assert "no readable ApiVersion" in outcome.reason


def test_versions_order_as_numbers_not_text() -> None:
    """1.9 is older than 1.41."""
    assert v("1.9") < v("1.41") < v("1.52") < v("2.0")


def test_our_range_starts_at_engine_20_10_and_ends_at_engine_29() -> None:
    """The backend speaks 1.41 (the former pin) through 1.52 (Engine 29.0)."""
    assert ApiRange(lowest=v("1.41"), highest=v("1.52")) == SUPPORTED
    assert v("1.44").prefix == "/v1.44"
