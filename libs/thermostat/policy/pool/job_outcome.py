"""Job outcome: what a worker's reply to `POST /execute` means for the job, the machine and the meter.

The worker-pool seed: "The caller has to be able to tell 'your code raised' from 'we could not run it'." So:
- The worker answered 2xx: the job completed with the body as its result; the machine goes back to warm.
- The worker answered with an error status (≥ 400, or anything else that is not 2xx): the job failed with
  the worker's message, and the machine is kept. The worker is alive and said so; the code in the cell
  raised, which is no reason to throw away a warm machine.
- The job's deadline passed: timed out, and the machine is retired. Its process is still running the job,
  so it cannot take the next one. The deadline is wall-clock for the whole call (the job's
  timeout_seconds), not a per-read timeout a worker streaming a byte a minute would never trip.
- The worker could not be reached, the connection broke mid-reply, or anything unexpected: the job failed,
  and the machine is retired; a machine in an unknown state is not trusted with the next job. (Unreachable is
  first offered to thermostat.policy.pool.hand_back: no byte was sent, so the job goes to another machine, and
  fails here only once it may not be handed back again.)
- A gateway status (502, 503, 504, or Cloudflare's 520-524) is the provider's proxy in front of the machine
  saying it could not reach the worker (RunPod's pod proxy, a Fly or Docker front door): unreachable, as
  above, with the machine retired. The reference worker answers a failed job with 500, never a gateway
  status, and a 524 is RunPod's proxy ending a request at 100 s while the machine still runs the job.
- A result over the pool's size limit: failed, machine kept (the worker worked; the pool refused the bytes).

A job cancelled while running stays cancelled whatever the reply (worker-pool seed: "The cancel stands even if the
machine finished first: its result is dropped"). That is not decided here: the runner cannot know of a cancel that
lands after the reply, so the completion's statement keeps a cancelled row and drops the result
(pool_dispatcher/repository/jobs.sql `complete`; its orderings in
tests/integration/pool_dispatcher/test_cancel_running.py). The machine follows the reply as above, so one that
ignored the cancel and never answers is retired at the job's timeout.

Every outcome here is of a job that reached a machine, so each records exactly one usage event, with the
job's terminal state (the service writes it in the same transaction as that state).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.pool.jobs import JobState

MAX_ERROR_CHARS = 1000
GATEWAY_STATUSES = frozenset({502, 503, 504, 520, 521, 522, 523, 524})


class ReplyKind(StrEnum):
    """ReplyKind is how a call to a worker ended, as the worker client reports it."""

    ANSWERED = "answered"  # an HTTP status and a body
    DEADLINE = "deadline"  # the job's wall-clock deadline passed first
    UNREACHABLE = "unreachable"  # no connection
    BROKEN = "broken"  # connection lost or protocol error mid-call, or anything unexpected
    TOO_LARGE = "too_large"  # answered, with a body over the pool's limit


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerReply:
    """WorkerReply is the typed outcome of one `POST /execute` (the worker client builds it)."""

    kind: ReplyKind
    status: int | None = None
    body: bytes = b""
    error: str = ""
    cause: str = ""  # UNREACHABLE's kind in a word: refused, connect_timeout, no_route, unknown_name, tls, network


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOutcome:
    """JobOutcome is the job's terminal state, its result or error, and whether the machine is retired."""

    state: JobState
    result: bytes | None
    error: str | None
    retire_machine: bool


def decide_job_outcome(reply: WorkerReply, *, timeout_seconds: float) -> JobOutcome:
    """Map one worker reply (a cancel that landed meanwhile is kept by the completion's statement: see above)."""
    if reply.kind is ReplyKind.ANSWERED and reply.status is not None and 200 <= reply.status < 300:
        outcome = JobOutcome(state=JobState.COMPLETED, result=reply.body, error=None, retire_machine=False)
    elif reply.kind is ReplyKind.ANSWERED and reply.status in GATEWAY_STATUSES:
        error = f"worker unreachable: its provider's proxy answered HTTP {reply.status}"
        outcome = JobOutcome(state=JobState.FAILED, result=None, error=error, retire_machine=True)
    elif reply.kind is ReplyKind.ANSWERED:
        message = reply.body.decode("utf-8", errors="replace").strip()[:MAX_ERROR_CHARS]
        error = f"worker answered HTTP {reply.status}" + (f": {message}" if message else "")
        outcome = JobOutcome(state=JobState.FAILED, result=None, error=error, retire_machine=False)
    elif reply.kind is ReplyKind.TOO_LARGE:
        outcome = JobOutcome(state=JobState.FAILED, result=None, error=reply.error, retire_machine=False)
    elif reply.kind is ReplyKind.DEADLINE:
        error = f"job ran past its timeout of {timeout_seconds:g} s"
        outcome = JobOutcome(state=JobState.TIMED_OUT, result=None, error=error, retire_machine=True)
    elif reply.kind is ReplyKind.UNREACHABLE:
        error = "worker unreachable" + (f": {reply.error}" if reply.error else "")
        outcome = JobOutcome(state=JobState.FAILED, result=None, error=error, retire_machine=True)
    else:
        error = "worker call failed" + (f": {reply.error}" if reply.error else "")
        outcome = JobOutcome(state=JobState.FAILED, result=None, error=error, retire_machine=True)
    return outcome
