"""The exit codes scripts rely on: one per kind of outcome, fixed once and documented in `--help` and README.

2 for a usage error is click's (and the shell's) convention, so a wrapper that already reads 2 as "called
wrongly" stays right; a server's INVALID_ARGUMENT is the same mistake found one hop later. The job outcomes get
a code each because a script retries a timed-out job but not a failed one.
"""

from __future__ import annotations

import enum

from thermostat.client import errors


class ExitCode(enum.IntEnum):
    """What `thermostat` exits with."""

    OK = 0
    ERROR = 1  # anything not classified below (an INTERNAL or UNKNOWN status, a bug)
    USAGE = 2  # a bad command line, an unreadable input file, or the server's INVALID_ARGUMENT
    UNAUTHENTICATED = 3  # no token, or the token is refused (UNAUTHENTICATED, PERMISSION_DENIED)
    NOT_FOUND = 4  # an unknown pod, job, tenant or machine type
    REFUSED = 5  # refused as things stand: a budget, a failed wake, a conflict, a payload over a limit
    UNAVAILABLE = 6  # the service did not answer (UNAVAILABLE, or no answer before the deadline)
    JOB_FAILED = 7
    JOB_TIMED_OUT = 8
    JOB_CANCELLED = 9
    INTERRUPTED = 130  # Ctrl-C, as the shell reports SIGINT


DESCRIPTIONS: dict[ExitCode, str] = {
    ExitCode.OK: "success",
    ExitCode.ERROR: "an unexpected error",
    ExitCode.USAGE: "usage: a bad command line or input (the server's INVALID_ARGUMENT too)",
    ExitCode.UNAUTHENTICATED: "no token, or the token was refused",
    ExitCode.NOT_FOUND: "not found (pod, job, tenant, machine type)",
    ExitCode.REFUSED: "refused: a budget, a failed wake, a conflict, a limit",
    ExitCode.UNAVAILABLE: "unavailable: no answer, or none before the deadline",
    ExitCode.JOB_FAILED: "the job failed",
    ExitCode.JOB_TIMED_OUT: "the job timed out",
    ExitCode.JOB_CANCELLED: "the job was cancelled",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}

# Most specific first: a job outcome is also a ThermostatError.
_BY_ERROR: tuple[tuple[type[errors.ThermostatError], ExitCode], ...] = (
    (errors.JobFailed, ExitCode.JOB_FAILED),
    (errors.JobTimedOut, ExitCode.JOB_TIMED_OUT),
    (errors.JobCancelled, ExitCode.JOB_CANCELLED),
    (errors.InvalidArgument, ExitCode.USAGE),
    (errors.Unauthenticated, ExitCode.UNAUTHENTICATED),
    (errors.PermissionDenied, ExitCode.UNAUTHENTICATED),
    (errors.NotFound, ExitCode.NOT_FOUND),
    (errors.Conflict, ExitCode.REFUSED),
    (errors.ResourceExhausted, ExitCode.REFUSED),
    (errors.Unavailable, ExitCode.UNAVAILABLE),
    (errors.DeadlineExceeded, ExitCode.UNAVAILABLE),
)

JOB_STATES: dict[str, ExitCode] = {
    "completed": ExitCode.OK,
    "failed": ExitCode.JOB_FAILED,
    "timed_out": ExitCode.JOB_TIMED_OUT,
    "cancelled": ExitCode.JOB_CANCELLED,
}
"""A terminal job state's exit code (`jobs wait`, `jobs submit --wait`)."""


def for_error(error: errors.ThermostatError) -> ExitCode:
    """The exit code of a client error."""
    for kind, code in _BY_ERROR:
        if isinstance(error, kind):
            return code
    return ExitCode.ERROR


def epilog() -> str:
    """The exit-code table for `--help`."""
    rows = [f"  {int(code):>3}  {text}" for code, text in DESCRIPTIONS.items()]
    return "\n".join(["Exit codes:", *rows])
