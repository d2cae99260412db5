"""The readiness fence: a publish observed before a newer accepted start/create/stop/terminate of the pod is refused."""

from __future__ import annotations

import pytest

from thermostat.policy.wake.readiness_fence import readiness_report_stands


def test_a_report_about_the_current_process_stands() -> None:
    assert readiness_report_stands(reported=7, on_record=7)


def test_a_report_observed_before_a_newer_accepted_action_of_the_pod_is_refused() -> None:
    """A stop (or a stop and a re-wake) accepted after the monitor's observe ended the process it saw."""
    assert not readiness_report_stands(reported=7, on_record=8)


def test_a_pod_with_no_action_on_record_takes_a_report_observed_with_none() -> None:
    assert readiness_report_stands(reported=0, on_record=0)


def test_a_report_newer_than_the_record_stands() -> None:
    """The record never moves backwards; a report ahead of it names no action the record has, so nothing ended."""
    assert readiness_report_stands(reported=9, on_record=8)


@pytest.mark.parametrize("on_record", [0, 8, 10**12])
def test_a_report_without_an_incarnation_stands_unchecked(on_record: int) -> None:
    """An older monitor (or an observe made while the records were unreadable) is taken as before the fence."""
    assert readiness_report_stands(reported=None, on_record=on_record)
