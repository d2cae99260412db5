"""Hand-back: a machine that could not be reached before any byte was sent hands its job to another, at most once."""

from __future__ import annotations

import pytest

from thermostat.policy.pool.hand_back import (
    MAX_REFUSALS,
    HandBackAction,
    Refusal,
    decide_hand_back,
    handed_to_machines,
    refusals_error,
)
from thermostat.policy.pool.job_outcome import MAX_ERROR_CHARS, ReplyKind, WorkerReply
from thermostat.policy.pool.jobs import JobState

REFUSED = WorkerReply(kind=ReplyKind.UNREACHABLE, error="Connection refused", cause="refused")
FIRST = Refusal(machine_id="m-1", reason="Connection refused")


@pytest.mark.parametrize(
    ("reply", "before", "action"),
    [
        pytest.param(REFUSED, (), HandBackAction.HAND_BACK, id="refused-first-time-is-handed-back"),
        pytest.param(
            WorkerReply(kind=ReplyKind.UNREACHABLE, error="no connection within 5 s", cause="connect_timeout"),
            (),
            HandBackAction.HAND_BACK,
            id="connect-timeout-is-handed-back",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.UNREACHABLE, error="[SSL: CERTIFICATE_VERIFY_FAILED]", cause="tls"),
            (),
            HandBackAction.HAND_BACK,
            id="tls-refused-is-handed-back",
        ),
        pytest.param(REFUSED, (FIRST,), HandBackAction.GIVE_UP, id="second-machine-refusing-gives-up"),
        pytest.param(
            WorkerReply(kind=ReplyKind.BROKEN, error="connection lost: Connection reset by peer mid-answer"),
            (),
            HandBackAction.NOT_REFUSED,
            id="broken-after-send-stays-a-failure",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.BROKEN, error="connection closed before any answer"),
            (),
            HandBackAction.NOT_REFUSED,
            id="closed-before-any-answer-may-have-run",
        ),
        pytest.param(WorkerReply(kind=ReplyKind.DEADLINE), (), HandBackAction.NOT_REFUSED, id="timeout-stays"),
        pytest.param(
            WorkerReply(kind=ReplyKind.ANSWERED, status=502),
            (),
            HandBackAction.NOT_REFUSED,
            id="gateway-502-reached-the-proxy-stays",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.ANSWERED, status=500, body=b"boom"),
            (),
            HandBackAction.NOT_REFUSED,
            id="worker-error-stays",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.ANSWERED, status=200), (FIRST,), HandBackAction.NOT_REFUSED, id="answer-stays"
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.TOO_LARGE, status=200), (), HandBackAction.NOT_REFUSED, id="too-large-stays"
        ),
    ],
)
def test_decide_hand_back(reply: WorkerReply, before: tuple[Refusal, ...], action: HandBackAction) -> None:
    """Only a reply that says no byte was sent is handed back, and only until MAX_REFUSALS machines refused it."""
    decision = decide_hand_back(reply, machine_id="m-2", refused_before=before)
    assert decision.action is action
    if action is HandBackAction.NOT_REFUSED:
        assert decision.refusal is None and decision.outcome is None
    else:
        assert decision.refusal == Refusal(machine_id="m-2", reason=reply.error)


def test_the_bound_is_two_machines() -> None:
    """A broken image or network fails the job on its second machine instead of looping."""
    assert MAX_REFUSALS == 2


def test_giving_up_fails_the_job_naming_each_attempt_and_retires_the_machine() -> None:
    """The error names every machine that refused the job, in order, with its reason."""
    reply = WorkerReply(kind=ReplyKind.UNREACHABLE, error="No route to host", cause="no_route")
    decision = decide_hand_back(reply, machine_id="m-2", refused_before=(FIRST,))
    assert decision.outcome is not None
    assert decision.outcome.state is JobState.FAILED and decision.outcome.retire_machine
    assert decision.outcome.result is None
    assert decision.outcome.error == (
        "worker unreachable on 2 machines, none was sent the job: "
        "machine m-1: Connection refused; machine m-2: No route to host"
    )


def test_an_unreachable_reply_without_words_still_names_a_reason() -> None:
    decision = decide_hand_back(WorkerReply(kind=ReplyKind.UNREACHABLE), machine_id="m-1", refused_before=())
    assert decision.refusal == Refusal(machine_id="m-1", reason="no connection")


def test_a_larger_bound_hands_back_until_it() -> None:
    """The bound is an argument: with three, a second refusal is handed back and a third gives up."""
    second = decide_hand_back(REFUSED, machine_id="m-2", refused_before=(FIRST,), max_refusals=3)
    third = decide_hand_back(
        REFUSED, machine_id="m-3", refused_before=(FIRST, Refusal(machine_id="m-2", reason="x")), max_refusals=3
    )
    assert (second.action, third.action) == (HandBackAction.HAND_BACK, HandBackAction.GIVE_UP)


def test_the_error_is_bounded() -> None:
    attempts = [Refusal(machine_id=f"m-{i}", reason="r" * 600) for i in range(3)]
    assert len(refusals_error(attempts)) == MAX_ERROR_CHARS


@pytest.mark.parametrize(
    ("refused", "on_machine", "count"),
    [
        pytest.param(0, False, 0, id="queued-never-handed"),
        pytest.param(0, True, 1, id="on-its-first-machine"),
        pytest.param(1, False, 1, id="handed-back-waiting-again"),
        pytest.param(1, True, 2, id="on-its-second-machine-or-failed-there"),
    ],
)
def test_handed_to_machines(refused: int, on_machine: bool, count: int) -> None:
    """The job's JSON counts the machines that handed it back and the one it is on (or ended on)."""
    assert handed_to_machines(refused=refused, on_machine=on_machine) == count
