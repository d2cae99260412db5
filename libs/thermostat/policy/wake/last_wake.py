"""How a finished wake is recorded as the last wake outcome (pod-control seed: Last wake outcome, rig-conductor#2541).

    Succeeded   AlreadyRunning / Started / Created
    Refused     Failed by a fail-closed guard, nothing billed: unconfigured, unreadable lookup, template
                unset, no eligible GPU under the price cap (every exclusion in the reason)
    TimedOut    Waiting: not RUNNING within the poll budget (a start or create may have billed)
    Failed      RunPod rejected or broke the attempt, or the wake threw (wakeOutcome "Exception")

Refused is a claim that nothing was billed, so a Failed wake without a proven refusal kind is Failed.
On 2026-10-01 four failed wakes went unnoticed for a day and their cause had rotated out of the logs; this
record is what survives.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.wake.wake_result import WakeFailureKind, WakeOutcome, WakeResult

EXCEPTION_WAKE_OUTCOME = "Exception"


class LastWakeOutcome(StrEnum):
    SUCCEEDED = "Succeeded"
    REFUSED = "Refused"
    TIMED_OUT = "TimedOut"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class LastWake:
    """LastWake is the classified part of PodWakeCompleted: outcome, wakeOutcome and reason."""

    outcome: LastWakeOutcome
    wake_outcome: str
    reason: str


def classify_wake(
    outcome: WakeOutcome | None, kind: WakeFailureKind | None = None, *, billed: bool = False
) -> LastWakeOutcome:
    """Classify how a wake ended; `outcome` None means the wake threw.

    Refused claims nothing was billed, so a wake that issued a billable call (a start that did not take, then
    no GPU under the cap — the 2026-09-11 path) is Failed, never Refused: Refused ⇔ no action-log row.
    """
    match outcome:
        case WakeOutcome.ALREADY_RUNNING | WakeOutcome.STARTED | WakeOutcome.CREATED:
            return LastWakeOutcome.SUCCEEDED
        case WakeOutcome.WAITING:
            return LastWakeOutcome.TIMED_OUT
        case WakeOutcome.FAILED if kind is not None and kind.is_refusal and not billed:
            return LastWakeOutcome.REFUSED
        case _:
            return LastWakeOutcome.FAILED


def last_wake_of(result: WakeResult) -> LastWake:
    """The history record of a wake that returned."""
    return LastWake(
        outcome=classify_wake(result.outcome, result.failure_kind, billed=result.billed),
        wake_outcome=str(result.outcome),
        reason=result.message,
    )


def last_wake_of_exception(detail: str) -> LastWake:
    """The history record of a wake that threw; `detail` must already be free of secrets."""
    return LastWake(outcome=LastWakeOutcome.FAILED, wake_outcome=EXCEPTION_WAKE_OUTCOME, reason=detail)
