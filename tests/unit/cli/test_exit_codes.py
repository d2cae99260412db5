"""Each kind of client error exits with its documented code (the stack tests produce most of them for real;
this table also covers the ones a healthy stack cannot be made to answer, such as INTERNAL)."""

from __future__ import annotations

import grpc
import pytest

from thermostat.cli.exit_codes import JOB_STATES, ExitCode, for_error
from thermostat.client import errors
from thermostat.pool.v1 import pool_pb2

JOB = pool_pb2.Job(id="j1", state="failed")


@pytest.mark.parametrize(
    ("error", "code"),
    [
        pytest.param(errors.InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, "x"), ExitCode.USAGE, id="invalid"),
        pytest.param(
            errors.Unauthenticated(grpc.StatusCode.UNAUTHENTICATED, "x"), ExitCode.UNAUTHENTICATED, id="no-token"
        ),
        pytest.param(
            errors.PermissionDenied(grpc.StatusCode.PERMISSION_DENIED, "x"), ExitCode.UNAUTHENTICATED, id="denied"
        ),
        pytest.param(errors.NotFound(grpc.StatusCode.NOT_FOUND, "x"), ExitCode.NOT_FOUND, id="not-found"),
        pytest.param(errors.Conflict(grpc.StatusCode.FAILED_PRECONDITION, "x"), ExitCode.REFUSED, id="conflict"),
        pytest.param(errors.WakeFailed(grpc.StatusCode.ABORTED, "x"), ExitCode.REFUSED, id="wake-failed"),
        pytest.param(errors.ResourceExhausted(grpc.StatusCode.RESOURCE_EXHAUSTED, "x"), ExitCode.REFUSED, id="limit"),
        pytest.param(errors.Unavailable(grpc.StatusCode.UNAVAILABLE, "x"), ExitCode.UNAVAILABLE, id="unavailable"),
        pytest.param(
            errors.DeadlineExceeded(grpc.StatusCode.DEADLINE_EXCEEDED, "x"), ExitCode.UNAVAILABLE, id="deadline"
        ),
        pytest.param(errors.JobFailed(grpc.StatusCode.UNKNOWN, "x", JOB), ExitCode.JOB_FAILED, id="job-failed"),
        pytest.param(
            errors.JobTimedOut(grpc.StatusCode.DEADLINE_EXCEEDED, "x", JOB), ExitCode.JOB_TIMED_OUT, id="job-timed-out"
        ),
        pytest.param(
            errors.JobCancelled(grpc.StatusCode.CANCELLED, "x", JOB), ExitCode.JOB_CANCELLED, id="job-cancelled"
        ),
        pytest.param(errors.ThermostatError(grpc.StatusCode.INTERNAL, "x"), ExitCode.ERROR, id="internal"),
    ],
)
def test_a_client_error_exits_with_its_documented_code(error: errors.ThermostatError, code: ExitCode) -> None:
    assert for_error(error) is code


def test_every_terminal_job_state_has_a_code_and_only_completed_is_success() -> None:
    assert {state for state, code in JOB_STATES.items() if code is ExitCode.OK} == {"completed"}
    assert set(JOB_STATES) == {"completed", "failed", "timed_out", "cancelled"}
