"""Admission: whether a submit may queue, decided before anything is written.

Theory of operation. A submit (SubmitJob, SubmitJobSync, each job of RunJobs and of a REST batch) arrives as
the seed's query parameters and a payload. Its caller's token and tenant were checked by the chassis; what
is left is decided here, in the worker-pool seed's order, the first refusal winning:

| rule              | refused when                                                  | answer |
|-------------------|---------------------------------------------------------------|--------|
| machine type      | `machine_type` names no catalogue type                         | 400    |
| options           | a parameter is missing or malformed                            | 422    |
| servable          | this deployment has no backend for the type's machines         | 503    |
| payload size      | the payload is over the deployment's limit                    | 413    |

An unknown machine type answers as the original strata-pool package does, 400 with the detail
`unknown machine type: '<name>'`, which its clients match on; the seed's 422 stays for a malformed parameter.

A submit that passes is admitted with its options (submit_options.py). The tenant's budget is checked after
admission by the service (it asks metering), and a refusal for budget is built here too (409, naming the
failed job it recorded), so every refusal a submit can get is one value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.pool.machine_type import Catalogue, MachineType
from thermostat.policy.pool.submit_options import SubmitError, SubmitErrorKind, SubmitOptions, parse_submit_query

QUERY_FIELDS = ("machine_type", "priority", "session_id", "timeout_seconds")
"""A submit's parameters, as the REST query and the gRPC request name them; a sync submit adds wait_seconds."""


class RefusalKind(StrEnum):
    """RefusalKind is why a submit was refused: each has its HTTP status and the gRPC code its call ends with."""

    OPTIONS = "options"
    UNKNOWN_MACHINE_TYPE = "unknown_machine_type"
    UNSERVABLE = "unservable"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    OVER_BUDGET = "over_budget"
    SHUTTING_DOWN = "shutting_down"  # a drain began here: retryable, another replica takes it
    INTERNAL = "internal"  # an unexpected error after admission (a stream's job; the log has it)

    @property
    def http(self) -> int:
        return _HTTP[self]

    @property
    def grpc_code(self) -> str:
        """The name of the grpc.StatusCode (policy imports no gRPC)."""
        return _GRPC[self]


_HTTP = {
    RefusalKind.OPTIONS: 422,
    RefusalKind.UNKNOWN_MACHINE_TYPE: 400,
    RefusalKind.UNSERVABLE: 503,
    RefusalKind.PAYLOAD_TOO_LARGE: 413,
    RefusalKind.OVER_BUDGET: 409,
    RefusalKind.SHUTTING_DOWN: 503,
    RefusalKind.INTERNAL: 500,
}
_GRPC = {
    RefusalKind.OPTIONS: "INVALID_ARGUMENT",
    RefusalKind.UNKNOWN_MACHINE_TYPE: "INVALID_ARGUMENT",
    RefusalKind.UNSERVABLE: "FAILED_PRECONDITION",
    RefusalKind.PAYLOAD_TOO_LARGE: "RESOURCE_EXHAUSTED",
    RefusalKind.OVER_BUDGET: "FAILED_PRECONDITION",
    RefusalKind.SHUTTING_DOWN: "UNAVAILABLE",
    RefusalKind.INTERNAL: "UNKNOWN",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitAsk:
    """SubmitAsk is a submit as it arrived: its parameters (blank: not given), its payload's size, and whether
    the caller waits for the job (a sync submit reads wait_seconds; an asynchronous one ignores it)."""

    machine_type: str = ""
    priority: str = ""
    session_id: str = ""
    timeout_seconds: str = ""
    wait_seconds: str = ""
    payload_bytes: int = 0
    sync: bool = False

    def query(self) -> dict[str, str]:
        """The parameters given, as the REST query would carry them."""
        query = {name: getattr(self, name) for name in QUERY_FIELDS if getattr(self, name)}
        if self.sync and self.wait_seconds:
            query["wait_seconds"] = self.wait_seconds
        return query


@dataclass(frozen=True, slots=True)
class Admitted:
    """Admitted is a submit that may queue, with its options."""

    options: SubmitOptions


@dataclass(frozen=True, slots=True)
class SubmitRefusal:
    """SubmitRefusal is a submit refused, nothing queued: why, what the caller reads, and the failed job a budget
    refusal recorded."""

    kind: RefusalKind
    detail: str
    job_id: str | None = None

    @property
    def http(self) -> int:
        return self.kind.http


def admit_submit(
    ask: SubmitAsk,
    *,
    catalogue: Catalogue,
    unservable: Callable[[MachineType], str | None],
    max_payload_bytes: int,
) -> Admitted | SubmitRefusal:
    """The submit admitted, or its first refusal in the table's order. `unservable` is the deployment's reason
    it cannot start a type's machines (its backend is not configured), or None."""
    options = parse_submit_query(ask.query(), catalogue=catalogue, sync=ask.sync)
    if isinstance(options, SubmitError):
        if options.kind is SubmitErrorKind.UNKNOWN_MACHINE_TYPE:
            return SubmitRefusal(RefusalKind.UNKNOWN_MACHINE_TYPE, options.message)
        return SubmitRefusal(RefusalKind.OPTIONS, options.detail)
    reason = unservable(options.machine_type)
    if reason is not None:  # nothing is queued that this deployment could never start a machine for
        return SubmitRefusal(RefusalKind.UNSERVABLE, reason)
    if ask.payload_bytes > max_payload_bytes:
        return SubmitRefusal(
            RefusalKind.PAYLOAD_TOO_LARGE,
            f"payload of {ask.payload_bytes} bytes is over the limit of {max_payload_bytes}",
        )
    return Admitted(options)


def over_budget(reason: str, job_id: str) -> SubmitRefusal:
    """A submit refused for its tenant's budget: nothing queued, the refusal recorded as the failed job `job_id`."""
    return SubmitRefusal(RefusalKind.OVER_BUDGET, f"{reason} (job {job_id})", job_id)
