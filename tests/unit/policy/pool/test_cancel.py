"""Cancel: what a cancel does in each job state, and the build id rule."""

from __future__ import annotations

import pytest

from thermostat.policy.pool.cancel import (
    BuildIdError,
    CancelAction,
    decide_cancel,
    validate_build_id,
)
from thermostat.policy.pool.jobs import JobState


@pytest.mark.parametrize(
    ("state", "action", "status"),
    [
        pytest.param(JobState.QUEUED, CancelAction.CANCEL_BEFORE_MACHINE, 200, id="queued-never-reaches-a-machine"),
        pytest.param(JobState.DISPATCHED, CancelAction.CANCEL_BEFORE_MACHINE, 200, id="dispatched-not-sent-never-sent"),
        pytest.param(JobState.RUNNING, CancelAction.CANCEL_RUNNING, 200, id="running-signals-the-worker"),
        pytest.param(JobState.CANCELLED, CancelAction.ALREADY_CANCELLED, 200, id="cancelled-again-is-200"),
        pytest.param(JobState.COMPLETED, CancelAction.REFUSE, 409, id="completed-is-409"),
        pytest.param(JobState.FAILED, CancelAction.REFUSE, 409, id="failed-is-409"),
        pytest.param(JobState.TIMED_OUT, CancelAction.REFUSE, 409, id="timed-out-is-409"),
    ],
)
def test_cancel_decision_per_state(state: JobState, action: CancelAction, status: int) -> None:
    """Each job state has one cancel answer."""
    decision = decide_cancel(state)
    assert (decision.action, decision.status_code) == (action, status)
    assert decision.marks_cancelled is (action in {CancelAction.CANCEL_BEFORE_MACHINE, CancelAction.CANCEL_RUNNING})


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("build-42_a", id="letters-digits-dash-underscore"),
        pytest.param("x" * 128, id="at-the-length-bound"),
    ],
)
def test_valid_build_id(value: str) -> None:
    """Letters, digits, '-' and '_' make a build id."""
    assert validate_build_id(value) == value


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="missing"),
        pytest.param("", id="empty"),
        pytest.param("../etc", id="path-traversal"),
        pytest.param("a/b", id="slash"),
        pytest.param("a b", id="space"),
        pytest.param("a%2F", id="percent"),
        pytest.param("é", id="non-ascii"),
        pytest.param("x" * 129, id="too-long"),
        pytest.param(42, id="number"),
    ],
)
def test_invalid_build_id_is_refused(value: object) -> None:
    """Anything else is refused naming build_id (the id goes into the worker's URL path)."""
    result = validate_build_id(value)
    assert isinstance(result, BuildIdError)
    assert result.detail.startswith("build_id: ")
