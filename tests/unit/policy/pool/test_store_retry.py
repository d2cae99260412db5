"""Store retries: the backoff between attempts, and resuming the job a machine holds after a lost answer."""

from __future__ import annotations

import pytest

from thermostat.policy.pool.jobs import JobState
from thermostat.policy.pool.store_retry import (
    LONGEST_RETRY_SECONDS,
    HeldAction,
    resume_held,
    retry_delay,
)


@pytest.mark.parametrize(
    ("attempt", "delay"),
    [
        pytest.param(1, 0.05, id="first-retry-is-quick"),
        pytest.param(2, 0.1, id="second-doubles"),
        pytest.param(5, 0.8, id="fifth-doubles-again"),
        pytest.param(7, LONGEST_RETRY_SECONDS, id="capped"),
        pytest.param(100, LONGEST_RETRY_SECONDS, id="stays-capped-through-a-long-outage"),
    ],
)
def test_retry_delay_doubles_up_to_a_cap(attempt: int, delay: float) -> None:
    assert retry_delay(attempt) == pytest.approx(delay)


def test_retry_delay_refuses_an_attempt_below_one_naming_it() -> None:
    with pytest.raises(ValueError, match="attempt"):
        retry_delay(0)


@pytest.mark.parametrize(
    ("state", "action"),
    [
        pytest.param(JobState.RUNNING, HeldAction.SEND, id="running-by-a-lost-hand-off-is-sent"),
        pytest.param(JobState.DISPATCHED, HeldAction.MARK_AND_SEND, id="dispatched-is-marked-then-sent"),
        pytest.param(None, HeldAction.NOTHING, id="no-job-held-nothing-to-do"),
        pytest.param(JobState.COMPLETED, HeldAction.NOTHING, id="finished-is-not-resumed"),
        pytest.param(JobState.CANCELLED, HeldAction.NOTHING, id="cancelled-is-not-resumed"),
        pytest.param(JobState.QUEUED, HeldAction.NOTHING, id="queued-is-placement's"),
    ],
)
def test_resume_held_per_state(state: JobState | None, action: HeldAction) -> None:
    assert resume_held(state) is action
