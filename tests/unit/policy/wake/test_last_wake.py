"""Last wake outcome: how a finished wake is recorded in the wake history (pod-control seed: Last wake outcome,
#2541)."""

from __future__ import annotations

import pytest

from thermostat.policy.wake.create_walk import CreateFailurePhase
from thermostat.policy.wake.last_wake import (
    EXCEPTION_WAKE_OUTCOME,
    LastWakeOutcome,
    classify_wake,
    last_wake_of,
    last_wake_of_exception,
)
from thermostat.policy.wake.wake_result import WakeFailureKind, WakeOutcome, WakeResult, failure_kind_of


@pytest.mark.parametrize(
    "outcome",
    [
        pytest.param(WakeOutcome.ALREADY_RUNNING, id="already-running"),
        pytest.param(WakeOutcome.STARTED, id="started"),
        pytest.param(WakeOutcome.CREATED, id="created"),
    ],
)
def test_a_wake_that_left_a_serving_pod_succeeded(outcome: WakeOutcome) -> None:
    """AlreadyRunning, Started and Created are all Succeeded."""
    assert classify_wake(outcome) is LastWakeOutcome.SUCCEEDED


def test_a_waiting_wake_timed_out() -> None:
    """Not RUNNING within the poll budget is TimedOut (a start or create may have billed)."""
    assert classify_wake(WakeOutcome.WAITING) is LastWakeOutcome.TIMED_OUT


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(WakeFailureKind.UNCONFIGURED, id="unconfigured"),
        pytest.param(WakeFailureKind.LOOKUP_UNREADABLE, id="unreadable-lookup"),
        pytest.param(WakeFailureKind.TEMPLATE_UNSET, id="template-unset"),
        pytest.param(WakeFailureKind.NO_ELIGIBLE_GPU, id="no-eligible-gpu"),
    ],
)
def test_a_fail_closed_guard_that_declined_is_refused(kind: WakeFailureKind) -> None:
    """Refused means a guard said no and nothing was billed."""
    assert classify_wake(WakeOutcome.FAILED, kind) is LastWakeOutcome.REFUSED


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param(WakeFailureKind.CREATE_EXHAUSTED, id="exhausted"),
        pytest.param(WakeFailureKind.CREATE_RETRIES_EXHAUSTED, id="retries-exhausted"),
        pytest.param(WakeFailureKind.CREATE_ABORTED, id="aborted"),
        pytest.param(WakeFailureKind.CREATED_WITHOUT_ID, id="created-without-id"),
        pytest.param(WakeFailureKind.RECHECK_UNREADABLE, id="recheck-unreadable"),
        pytest.param(WakeFailureKind.NEW_POD_FAILED, id="new-pod-failed"),
        pytest.param(WakeFailureKind.EXCEPTION, id="exception"),
        pytest.param(None, id="no-kind-given"),
    ],
)
def test_runpod_rejecting_or_breaking_the_attempt_is_failed(kind: WakeFailureKind | None) -> None:
    """A failure with no proven refusal is Failed: Refused would claim nothing was billed."""
    assert classify_wake(WakeOutcome.FAILED, kind) is LastWakeOutcome.FAILED


def test_a_wake_that_threw_is_failed_with_wake_outcome_exception() -> None:
    """A crash still leaves a record (the 2026-10-01 wakes left nothing to diagnose)."""
    record = last_wake_of_exception("RuntimeError: boom")
    assert (record.outcome, record.wake_outcome, record.reason) == (
        LastWakeOutcome.FAILED,
        EXCEPTION_WAKE_OUTCOME,
        "RuntimeError: boom",
    )
    assert classify_wake(None) is LastWakeOutcome.FAILED


def test_the_record_of_a_refused_wake_keeps_every_exclusion_in_its_reason() -> None:
    """The history carries the result's message, so the price-cap refusal is diagnosable later (#2093)."""
    result = WakeResult(
        outcome=WakeOutcome.FAILED,
        failure_kind=WakeFailureKind.NO_ELIGIBLE_GPU,
        message="no eligible GPU:\nAMD Instinct MI300X OAM: PriceAboveMaximum",
    )
    record = last_wake_of(result)
    assert (record.outcome, record.wake_outcome) == (LastWakeOutcome.REFUSED, "Failed")
    assert "AMD Instinct MI300X OAM: PriceAboveMaximum" in record.reason


@pytest.mark.parametrize(
    ("phase", "kind"),
    [
        pytest.param(CreateFailurePhase.NO_CANDIDATES, WakeFailureKind.NO_ELIGIBLE_GPU, id="no-candidates"),
        pytest.param(CreateFailurePhase.EXHAUSTED, WakeFailureKind.CREATE_EXHAUSTED, id="exhausted"),
        pytest.param(
            CreateFailurePhase.RETRIES_EXHAUSTED, WakeFailureKind.CREATE_RETRIES_EXHAUSTED, id="retries-exhausted"
        ),
        pytest.param(CreateFailurePhase.ABORTED, WakeFailureKind.CREATE_ABORTED, id="aborted"),
        pytest.param(CreateFailurePhase.CREATED_WITHOUT_ID, WakeFailureKind.CREATED_WITHOUT_ID, id="without-id"),
    ],
)
def test_each_create_walk_failure_maps_to_a_wake_failure_kind(phase: CreateFailurePhase, kind: WakeFailureKind) -> None:
    """Only "no candidates" is a refusal; every phase that posted is a failure."""
    assert failure_kind_of(phase) is kind


@pytest.mark.parametrize(
    ("outcome", "http_status"),
    [
        pytest.param(WakeOutcome.ALREADY_RUNNING, 200, id="already-running-200"),
        pytest.param(WakeOutcome.STARTED, 200, id="started-200"),
        pytest.param(WakeOutcome.CREATED, 200, id="created-200"),
        pytest.param(WakeOutcome.WAITING, 202, id="waiting-202"),
        pytest.param(WakeOutcome.FAILED, 409, id="failed-409"),
    ],
)
def test_each_wake_outcome_has_the_seed_http_status(outcome: WakeOutcome, http_status: int) -> None:
    """200 done · 202 in flight, poll again · 409 nothing in flight."""
    assert outcome.http_status == http_status


def test_a_refusal_after_a_billable_call_is_failed_not_refused() -> None:
    """Refused ⇔ no action-log row: a start that did not take, then no eligible GPU, is Failed."""
    from thermostat.policy.wake.last_wake import LastWakeOutcome, classify_wake
    from thermostat.policy.wake.wake_result import WakeFailureKind, WakeOutcome

    assert classify_wake(WakeOutcome.FAILED, WakeFailureKind.NO_ELIGIBLE_GPU) is LastWakeOutcome.REFUSED
    assert classify_wake(WakeOutcome.FAILED, WakeFailureKind.NO_ELIGIBLE_GPU, billed=True) is LastWakeOutcome.FAILED
