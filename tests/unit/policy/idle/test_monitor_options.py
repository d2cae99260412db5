"""Monitor timings from the environment: defaults, fractions, thresholds, and one warning per bad value."""

from __future__ import annotations

from datetime import timedelta

import pytest

from thermostat.policy.idle.monitor_options import MonitorOptions, parse_monitor_options


def test_an_empty_environment_gives_the_seed_defaults_and_no_warning() -> None:
    """IDLE_MINUTES 15, CHECK_SECONDS 60, MAX_RUNTIME_MINUTES 360, RUNPOD_BOOT_GRACE_MINUTES 20."""
    options, warnings = parse_monitor_options({})
    assert options == MonitorOptions(idle_minutes=15, check_seconds=60, max_runtime_minutes=360, boot_grace_minutes=20)
    assert warnings == ()


def test_the_default_thresholds_are_fifteen_idle_and_twenty_booting_ticks() -> None:
    """Thresholds are ceil(window / CHECK_SECONDS)."""
    options = MonitorOptions()
    assert (options.idle_threshold, options.boot_grace_threshold) == (15, 20)
    assert (options.max_runtime, options.check_interval) == (timedelta(hours=6), timedelta(seconds=60))


@pytest.mark.parametrize(
    ("env", "idle", "boot"),
    [
        pytest.param({"IDLE_MINUTES": "0.1", "CHECK_SECONDS": "1"}, 6, 20 * 60, id="tenth-of-a-minute-is-6-not-7"),
        pytest.param({"IDLE_MINUTES": "15", "CHECK_SECONDS": "7"}, 129, 172, id="uneven-rounds-up"),
        pytest.param({"IDLE_MINUTES": "0.05", "CHECK_SECONDS": "0.5"}, 6, 2400, id="seconds-scale-demo"),
        pytest.param({"IDLE_MINUTES": "0", "CHECK_SECONDS": "60"}, 1, 20, id="zero-idle-stops-on-first-idle"),
        pytest.param({"RUNPOD_BOOT_GRACE_MINUTES": "0"}, 15, 0, id="zero-grace-disables"),
        pytest.param({"RUNPOD_BOOT_GRACE_MINUTES": "0.3", "CHECK_SECONDS": "6"}, 150, 3, id="fractional-grace"),
    ],
)
def test_fractional_values_give_exact_ceiling_thresholds(env: dict[str, str], idle: int, boot: int) -> None:
    """Decimal arithmetic: 0.1 minute at 1 s is 6 ticks (binary floats would say 7)."""
    options, warnings = parse_monitor_options(env)
    assert (options.idle_threshold, options.boot_grace_threshold) == (idle, boot)
    assert warnings == ()


def test_zero_max_runtime_disables_the_cap() -> None:
    """MAX_RUNTIME_MINUTES=0 turns the wall-clock backstop off."""
    options, _ = parse_monitor_options({"MAX_RUNTIME_MINUTES": "0"})
    assert options.max_runtime is None


def test_zero_boot_grace_disables_the_dead_model_guard() -> None:
    """RUNPOD_BOOT_GRACE_MINUTES=0: only the cap stops a pod that never comes up."""
    options, _ = parse_monitor_options({"RUNPOD_BOOT_GRACE_MINUTES": "0"})
    assert (options.boot_grace, options.boot_grace_threshold) == (None, 0)


@pytest.mark.parametrize(
    ("env", "warning"),
    [
        pytest.param({"IDLE_MINUTES": "soon"}, 'IDLE_MINUTES="soon" is not a non-negative number; using 15', id="word"),
        pytest.param({"IDLE_MINUTES": "-1"}, 'IDLE_MINUTES="-1" is not a non-negative number; using 15', id="neg"),
        pytest.param(
            {"IDLE_MINUTES": "1,5"}, 'IDLE_MINUTES="1,5" is not a non-negative number; using 15', id="decimal-comma"
        ),
        pytest.param({"IDLE_MINUTES": "NaN"}, 'IDLE_MINUTES="NaN" is not a non-negative number; using 15', id="nan"),
        pytest.param(
            {"MAX_RUNTIME_MINUTES": "inf"},
            'MAX_RUNTIME_MINUTES="inf" is not a non-negative number; using 360',
            id="infinite-cap",
        ),
        pytest.param({"CHECK_SECONDS": "0"}, 'CHECK_SECONDS="0" is not a positive number; using 60', id="zero-check"),
        pytest.param(
            {"CHECK_SECONDS": "1e-400"},
            'CHECK_SECONDS="1e-400" is not a positive number; using 60',
            id="underflows-to-zero",
        ),
        pytest.param(
            {"IDLE_MINUTES": "1e400"}, 'IDLE_MINUTES="1e400" is not a non-negative number; using 15', id="overflows"
        ),
        pytest.param(
            {"MAX_RUNTIME_MINUTES": "1e-400"},
            'MAX_RUNTIME_MINUTES="1e-400" is not a non-negative number; using 360',
            id="positive-cap-underflowing-to-zero-does-not-disable-it",
        ),
        pytest.param(
            {"RUNPOD_BOOT_GRACE_MINUTES": "1e-400"},
            'RUNPOD_BOOT_GRACE_MINUTES="1e-400" is not a non-negative number; using 20',
            id="positive-grace-underflowing-to-zero-does-not-disable-it",
        ),
        pytest.param(
            {"IDLE_MINUTES": "sNaN"},
            'IDLE_MINUTES="sNaN" is not a non-negative number; using 15',
            id="signalling-nan-is-a-warning-not-a-crash",
        ),
        pytest.param(
            {"RUNPOD_BOOT_GRACE_MINUTES": "20m"},
            'RUNPOD_BOOT_GRACE_MINUTES="20m" is not a non-negative number; using 20',
            id="unit-suffix",
        ),
    ],
)
def test_an_invalid_value_keeps_its_default_and_warns_once(env: dict[str, str], warning: str) -> None:
    """An unparseable or out-of-range guard never widens the guard: default plus one named warning."""
    options, warnings = parse_monitor_options(env)
    assert options == MonitorOptions()
    assert warnings == (warning,)


def test_each_invalid_variable_gets_its_own_warning_and_valid_ones_still_apply() -> None:
    """Two bad values, two lines; a good value beside them is used."""
    options, warnings = parse_monitor_options({"IDLE_MINUTES": "x", "CHECK_SECONDS": "-5", "MAX_RUNTIME_MINUTES": "90"})
    assert options == MonitorOptions(max_runtime_minutes=90)
    assert len(warnings) == 2


@pytest.mark.parametrize("blank", [pytest.param("", id="empty"), pytest.param("   ", id="spaces")])
def test_a_blank_value_means_unset(blank: str) -> None:
    """A blank variable is the default without a warning (the manifest may template it empty)."""
    assert parse_monitor_options({"IDLE_MINUTES": blank}) == (MonitorOptions(), ())


def test_surrounding_whitespace_is_tolerated() -> None:
    """' 30 ' is thirty."""
    options, warnings = parse_monitor_options({"IDLE_MINUTES": " 30 "})
    assert (options.idle_minutes, warnings) == (30, ())


def test_constructing_options_with_a_non_positive_check_interval_is_refused() -> None:
    """Code that builds options directly cannot divide by zero later."""
    with pytest.raises(ValueError, match="check_seconds"):
        MonitorOptions(check_seconds=0)


@pytest.mark.parametrize(
    ("env", "window", "threshold"),
    [
        pytest.param({}, 30.0, 30, id="unset-is-twice-the-idle-window"),
        pytest.param({"IDLE_MINUTES": "5"}, 10.0, 10, id="follows-idle-minutes"),
        pytest.param({"STALL_MINUTES": "45"}, 45.0, 45, id="set-explicitly"),
        pytest.param({"STALL_MINUTES": "0"}, 0.0, 0, id="zero-turns-it-off"),
        pytest.param({"STALL_MINUTES": "0.05", "CHECK_SECONDS": "1"}, 0.05, 3, id="fractional-ceil"),
        pytest.param({"IDLE_MINUTES": "0"}, 0.0, 0, id="idle-zero-gives-zero-unless-set"),
    ],
)
def test_the_stall_window_and_its_threshold(env: dict[str, str], window: float, threshold: int) -> None:
    options, warnings = parse_monitor_options(env)
    assert (options.stall_window_minutes, options.stall_threshold, warnings) == (window, threshold, ())


def test_an_invalid_stall_minutes_keeps_the_guard_on_and_warns() -> None:
    """An invalid value never widens a guard: it does not turn the stall guard off."""
    options, warnings = parse_monitor_options({"STALL_MINUTES": "-3"})
    assert options.stall_threshold == 30
    assert warnings == ('STALL_MINUTES="-3" is not a non-negative number; using twice IDLE_MINUTES',)
