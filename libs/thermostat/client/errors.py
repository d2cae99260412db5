"""The client's typed errors: one class per gRPC status a caller handles differently, and the job outcomes.

`from_rpc_error` is the whole mapping (a table, so a test walks every status code). Details are the server's
message as sent; the client never adds what it sent (tokens travel in metadata and never reach an error).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from thermostat.pool.v1 import pool_pb2


class ThermostatError(Exception):
    """ThermostatError is any failed call: `.code` the grpc.StatusCode, `.detail` the server's message."""

    def __init__(self, code: grpc.StatusCode, detail: str) -> None:
        super().__init__(f"{code.name}: {detail}" if detail else code.name)
        self.code = code
        self.detail = detail


class Unauthenticated(ThermostatError):
    """No token (or none the service accepts as one) was presented."""


class PermissionDenied(ThermostatError):
    """A token was presented but it does not allow this call."""


class NotFound(ThermostatError):
    """An unknown pod name, job id (another tenant's job included) or budget."""


class InvalidArgument(ThermostatError):
    """The request was refused as malformed; the detail names the field."""


class Conflict(ThermostatError):
    """FAILED_PRECONDITION, ABORTED or ALREADY_EXISTS: the request was understood but the state refuses it."""


class WakeFailed(Conflict):
    """The pod could not be woken (every GPU excluded, a budget refusal, the pod stopped while booting)."""


class Unavailable(ThermostatError):
    """The service could not be reached, or says it cannot serve (unconfigured, store down)."""


class DeadlineExceeded(ThermostatError):
    """The call (or the wait) ran past its deadline."""


class ResourceExhausted(ThermostatError):
    """A limit refused the call (a payload over the pool's size limit)."""


class JobError(ThermostatError):
    """JobError is a job that finished without a result; `.job` is the job as the pool last reported it."""

    def __init__(self, code: grpc.StatusCode, detail: str, job: pool_pb2.Job) -> None:
        super().__init__(code, detail)
        self.job = job


class JobFailed(JobError):
    """The job failed (the worker raised, was unreachable, or the budget refused it)."""


class JobTimedOut(JobError):
    """The job ran past its timeout_seconds."""


class JobCancelled(JobError):
    """The job was cancelled."""


_BY_CODE: dict[grpc.StatusCode, type[ThermostatError]] = {
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: Conflict,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.ALREADY_EXISTS: Conflict,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
}


def error_type(code: grpc.StatusCode) -> type[ThermostatError]:
    """The class a failed call with `code` raises (the base class for codes no caller acts on differently)."""
    return _BY_CODE.get(code, ThermostatError)


def from_status(code: grpc.StatusCode, detail: str) -> ThermostatError:
    return error_type(code)(code, detail)


def from_rpc_error(error: grpc.RpcError) -> ThermostatError:
    """The typed error for a failed call (grpc.aio.AioRpcError or a sync grpc.Call)."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    detail = error.details() if hasattr(error, "details") else str(error)
    return from_status(code or grpc.StatusCode.UNKNOWN, detail or "")


JOB_ERRORS: dict[str, tuple[type[JobError], grpc.StatusCode]] = {
    "failed": (JobFailed, grpc.StatusCode.UNKNOWN),
    "timed_out": (JobTimedOut, grpc.StatusCode.DEADLINE_EXCEEDED),
    "cancelled": (JobCancelled, grpc.StatusCode.CANCELLED),
}


def job_error(job: pool_pb2.Job) -> JobError:
    """The error for a job that ended `failed`, `timed_out` or `cancelled` (KeyError for any other state)."""
    kind, code = JOB_ERRORS[job.state]
    reason = f": {job.error}" if job.HasField("error") and job.error else ""
    return kind(code, f"job {job.id} {job.state.replace('_', ' ')}{reason}", job)
