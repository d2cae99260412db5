"""Job outcome: a worker error fails the job and keeps the machine; no answer retires the machine."""

from __future__ import annotations

import pytest

from thermostat.policy.pool.job_outcome import ReplyKind, WorkerReply, decide_job_outcome
from thermostat.policy.pool.jobs import JobState


@pytest.mark.parametrize(
    ("reply", "state", "retire", "error"),
    [
        pytest.param(
            WorkerReply(kind=ReplyKind.ANSWERED, status=200, body=b"\x00r"),
            JobState.COMPLETED,
            False,
            None,
            id="200-completes-and-keeps",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.ANSWERED, status=500, body=b"boom"),
            JobState.FAILED,
            False,
            "worker answered HTTP 500: boom",
            id="500-fails-the-job-keeps-the-machine",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.ANSWERED, status=502, body=b"<html>502 Bad Gateway</html>"),
            JobState.FAILED,
            True,
            "worker unreachable: its provider's proxy answered HTTP 502",
            id="proxy-502-is-unreachable-and-retires",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.ANSWERED, status=524, body=b"error code: 524"),
            JobState.FAILED,
            True,
            "worker unreachable: its provider's proxy answered HTTP 524",
            id="cloudflare-524-is-unreachable-and-retires",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.ANSWERED, status=400),
            JobState.FAILED,
            False,
            "worker answered HTTP 400",
            id="400-fails-keeps",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.ANSWERED, status=401),
            JobState.FAILED,
            False,
            "worker answered HTTP 401",
            id="401-fails-keeps",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.DEADLINE),
            JobState.TIMED_OUT,
            True,
            "job ran past its timeout of 30 s",
            id="deadline-times-out-and-retires",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.UNREACHABLE, error="connection refused"),
            JobState.FAILED,
            True,
            "worker unreachable: connection refused",
            id="unreachable-fails-and-retires",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.BROKEN, error="server disconnected"),
            JobState.FAILED,
            True,
            "worker call failed: server disconnected",
            id="broken-call-fails-and-retires",
        ),
        pytest.param(
            WorkerReply(kind=ReplyKind.TOO_LARGE, error="result over 64 MiB"),
            JobState.FAILED,
            False,
            "result over 64 MiB",
            id="oversized-result-fails-keeps",
        ),
    ],
)
def test_worker_reply_maps_to_job_state_and_machine_fate(
    reply: WorkerReply, state: JobState, retire: bool, error: str | None
) -> None:
    """A worker that answered keeps its machine; one that did not is retired."""
    outcome = decide_job_outcome(reply, timeout_seconds=30)
    assert (outcome.state, outcome.retire_machine, outcome.error) == (state, retire, error)
    assert outcome.result == (reply.body if state is JobState.COMPLETED else None)


def test_result_bytes_are_kept_verbatim() -> None:
    """The result is the worker's body, byte for byte."""
    body = bytes(range(256))
    outcome = decide_job_outcome(WorkerReply(kind=ReplyKind.ANSWERED, status=200, body=body), timeout_seconds=1)
    assert outcome.result == body


def test_long_worker_error_is_cut() -> None:
    """A worker's error body is cut to a bounded message."""
    outcome = decide_job_outcome(
        WorkerReply(kind=ReplyKind.ANSWERED, status=500, body=b"x" * 10_000), timeout_seconds=1
    )
    assert outcome.error is not None and len(outcome.error) < 1100
