"""The job state machine (policy/pool/jobs.py), row by row: one named test per transition, and its totality."""

from __future__ import annotations

import itertools

import pytest

from thermostat.policy.pool.jobs import (
    JOB_TRANSITIONS,
    TERMINAL_STATES,
    JobEvent,
    JobState,
    RefusedJobTransition,
    job_after,
)

J, E = JobState, JobEvent
STATES: list[JobState | None] = [None, *JobState]


ROWS = [
    pytest.param(None, E.SUBMIT, J.QUEUED, id="a-submit-no-warm-machine-takes-queues"),
    pytest.param(None, E.SUBMIT_TO_WARM, J.DISPATCHED, id="a-submit-a-warm-machine-takes-is-dispatched"),
    pytest.param(None, E.SUBMIT_AND_SEND, J.RUNNING, id="a-submit-claimed-and-sent-in-one-statement-runs"),
    pytest.param(None, E.REFUSE, J.FAILED, id="a-submit-over-budget-is-on-record-as-failed"),
    pytest.param(J.QUEUED, E.CLAIM, J.DISPATCHED, id="a-claimed-queued-job-is-dispatched"),
    pytest.param(J.QUEUED, E.CLAIM_AND_SEND, J.RUNNING, id="a-completion-hands-its-machine-the-next-job-running"),
    pytest.param(J.QUEUED, E.CANCEL, J.CANCELLED, id="a-queued-job-is-cancelled-at-once"),
    pytest.param(J.QUEUED, E.TYPE_REMOVED, J.FAILED, id="a-queued-job-of-a-removed-type-fails"),
    pytest.param(J.DISPATCHED, E.MARK_SENT, J.RUNNING, id="a-dispatched-job-runs-when-marked-sent"),
    pytest.param(J.DISPATCHED, E.REQUEUE, J.QUEUED, id="an-unsent-dispatched-job-queues-again"),
    pytest.param(J.DISPATCHED, E.CANCEL, J.CANCELLED, id="a-dispatched-job-cancelled-never-reaches-its-machine"),
    pytest.param(J.DISPATCHED, E.TYPE_REMOVED, J.FAILED, id="a-booting-job-whose-type-was-removed-fails"),
    pytest.param(J.DISPATCHED, E.OWNER_LOST, J.FAILED, id="a-dispatched-job-of-a-lost-process-fails"),
    pytest.param(J.RUNNING, E.REPORTED_COMPLETED, J.COMPLETED, id="a-running-job-the-worker-answered-completes"),
    pytest.param(J.RUNNING, E.REPORTED_FAILED, J.FAILED, id="a-running-job-whose-worker-failed-fails"),
    pytest.param(J.RUNNING, E.REPORTED_TIMED_OUT, J.TIMED_OUT, id="a-running-job-past-its-deadline-times-out"),
    pytest.param(J.RUNNING, E.REQUEUE, J.QUEUED, id="a-running-job-marked-here-and-never-sent-queues-again"),
    pytest.param(J.RUNNING, E.HAND_BACK, J.QUEUED, id="a-running-job-its-machine-refused-queues-again-in-its-place"),
    pytest.param(J.RUNNING, E.CANCEL, J.CANCELLED, id="a-running-job-is-cancelled-and-its-result-dropped"),
    pytest.param(J.RUNNING, E.ABANDON, J.FAILED, id="a-running-job-no-task-drives-fails"),
    pytest.param(J.RUNNING, E.OWNER_LOST, J.FAILED, id="a-running-job-of-a-lost-process-fails"),
]


@pytest.mark.parametrize(("state", "event", "after"), ROWS)
def test_each_transition(state: JobState | None, event: JobEvent, after: JobState) -> None:
    """The event moves a job in that state to the row's state."""
    assert job_after(state, event) is after


def test_the_named_transitions_are_the_whole_table() -> None:
    """Every row of the table has its named test above (a row added without one fails here)."""
    named = {(row.values[0], row.values[1]) for row in ROWS}
    assert named == set(JOB_TRANSITIONS)


@pytest.mark.parametrize(
    ("state", "event"),
    [
        pytest.param(J.COMPLETED, E.CANCEL, id="a-finished-job-is-never-cancelled"),
        pytest.param(J.CANCELLED, E.REPORTED_COMPLETED, id="a-cancelled-job-stays-cancelled-whatever-the-reply"),
        pytest.param(J.QUEUED, E.MARK_SENT, id="a-queued-job-is-never-sent-without-a-claim"),
        pytest.param(J.QUEUED, E.OWNER_LOST, id="a-queued-job-has-no-owner-to-lose"),
        pytest.param(J.DISPATCHED, E.REPORTED_COMPLETED, id="an-unsent-job-has-no-reply"),
        pytest.param(None, E.CLAIM, id="no-row-is-claimed"),
    ],
)
def test_a_pair_the_table_lacks_is_refused_naming_both(state: JobState | None, event: JobEvent) -> None:
    with pytest.raises(RefusedJobTransition, match=f"{state or 'no row'}.*{event}"):
        job_after(state, event)


def test_the_table_is_total() -> None:
    """Every (state, event) pair is either a row or refused; every event has a row; every state is reachable from
    no row; every state but the terminal ones has a way out, and each of those leads to a terminal state."""
    for state, event in itertools.product(STATES, JobEvent):
        try:
            assert job_after(state, event) in JobState
        except RefusedJobTransition:
            assert (state, event) not in JOB_TRANSITIONS
    assert {event for _, event in JOB_TRANSITIONS} == set(JobEvent)
    reachable = _closure({None})
    assert reachable == set(STATES)
    assert {state for state, _ in JOB_TRANSITIONS} == {None, J.QUEUED, J.DISPATCHED, J.RUNNING}
    assert {J.COMPLETED, J.FAILED, J.TIMED_OUT, J.CANCELLED} == TERMINAL_STATES
    for state in set(JobState) - TERMINAL_STATES:
        assert _closure({state}) & TERMINAL_STATES, f"{state} cannot finish"


def _closure(start: set[JobState | None]) -> set[JobState | None]:
    seen = set(start)
    while True:
        more = {after for (state, _), after in JOB_TRANSITIONS.items() if state in seen} - seen
        if not more:
            return seen
        seen |= more
