"""Every gRPC status code maps to one typed error; a finished job's state to its JobError."""

from __future__ import annotations

import grpc
import pytest

from thermostat.client import errors
from thermostat.pool.v1 import pool_pb2

EXPECTED = {
    grpc.StatusCode.OK: errors.ThermostatError,
    grpc.StatusCode.CANCELLED: errors.ThermostatError,
    grpc.StatusCode.UNKNOWN: errors.ThermostatError,
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidArgument,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.DeadlineExceeded,
    grpc.StatusCode.NOT_FOUND: errors.NotFound,
    grpc.StatusCode.ALREADY_EXISTS: errors.Conflict,
    grpc.StatusCode.PERMISSION_DENIED: errors.PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.ResourceExhausted,
    grpc.StatusCode.FAILED_PRECONDITION: errors.Conflict,
    grpc.StatusCode.ABORTED: errors.Conflict,
    grpc.StatusCode.OUT_OF_RANGE: errors.InvalidArgument,
    grpc.StatusCode.UNIMPLEMENTED: errors.ThermostatError,
    grpc.StatusCode.INTERNAL: errors.ThermostatError,
    grpc.StatusCode.UNAVAILABLE: errors.Unavailable,
    grpc.StatusCode.DATA_LOSS: errors.ThermostatError,
    grpc.StatusCode.UNAUTHENTICATED: errors.Unauthenticated,
}


def test_the_table_names_every_status_code() -> None:
    assert set(EXPECTED) == set(grpc.StatusCode)


@pytest.mark.parametrize("code", list(grpc.StatusCode), ids=lambda c: c.name)
def test_each_status_code_raises_its_type_carrying_code_and_detail(code: grpc.StatusCode) -> None:
    error = errors.from_status(code, "the server's words")
    assert type(error) is EXPECTED[code]
    assert (error.code, error.detail) == (code, "the server's words")
    assert isinstance(error, errors.ThermostatError)
    assert "the server's words" in str(error)


@pytest.mark.parametrize(
    ("state", "kind", "code"),
    [
        ("failed", errors.JobFailed, grpc.StatusCode.UNKNOWN),
        ("timed_out", errors.JobTimedOut, grpc.StatusCode.DEADLINE_EXCEEDED),
        ("cancelled", errors.JobCancelled, grpc.StatusCode.CANCELLED),
    ],
)
def test_a_finished_jobs_state_is_its_job_error_carrying_the_job(
    state: str, kind: type[errors.JobError], code: grpc.StatusCode
) -> None:
    job = pool_pb2.Job(id="j-1", state=state, error="worker said no")
    error = errors.job_error(job)
    assert type(error) is kind and isinstance(error, errors.JobError)
    assert error.job is job and error.code is code
    assert "j-1" in error.detail and "worker said no" in error.detail


def test_a_job_without_an_error_text_says_its_state() -> None:
    assert errors.job_error(pool_pb2.Job(id="j-2", state="cancelled")).detail == "job j-2 cancelled"


def test_a_job_still_running_has_no_job_error() -> None:
    with pytest.raises(KeyError):
        errors.job_error(pool_pb2.Job(id="j-3", state="running"))


def test_a_wake_failure_is_a_conflict() -> None:
    assert issubclass(errors.WakeFailed, errors.Conflict)
