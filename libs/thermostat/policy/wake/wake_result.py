"""What a wake returns to its callers and records in the wake history (pod-control seed: WakeResult, #2541).

Waiting means something is in flight — poll again; nothing was terminated. Failed means nothing is in flight
either, so re-polling will not change it. A Failed wake carries a `failure_kind`; the refusal kinds are the
fail-closed guards that declined before anything was billed, and only they may be recorded as Refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.wake.create_walk import CreateFailurePhase


class WakeOutcome(StrEnum):
    """WakeOutcome is how a wake ended, as the start route reports it."""

    ALREADY_RUNNING = "AlreadyRunning"
    STARTED = "Started"
    CREATED = "Created"
    WAITING = "Waiting"
    FAILED = "Failed"

    @property
    def http_status(self) -> int:
        """200 serving · 202 in flight, poll again · 409 failed with nothing in flight."""
        return _HTTP_STATUS[self]


_HTTP_STATUS = {
    WakeOutcome.ALREADY_RUNNING: 200,
    WakeOutcome.STARTED: 200,
    WakeOutcome.CREATED: 200,
    WakeOutcome.WAITING: 202,
    WakeOutcome.FAILED: 409,
}


class WakeFailureKind(StrEnum):
    """WakeFailureKind says why a wake Failed; the first four are refusals (nothing billed)."""

    UNCONFIGURED = "Unconfigured"
    LOOKUP_UNREADABLE = "LookupUnreadable"
    TEMPLATE_UNSET = "TemplateUnset"
    NO_ELIGIBLE_GPU = "NoEligibleGpu"
    OVER_BUDGET = "OverBudget"  # metering refused (or could not be asked): nothing was billed
    CREATE_EXHAUSTED = "CreateExhausted"
    CREATE_RETRIES_EXHAUSTED = "CreateRetriesExhausted"
    CREATE_ABORTED = "CreateAborted"
    CREATED_WITHOUT_ID = "CreatedWithoutId"
    RECHECK_UNREADABLE = "RecheckUnreadable"
    NEW_POD_FAILED = "NewPodFailed"
    STOPPED_DURING_WAKE = "StoppedDuringWake"
    EXCEPTION = "Exception"

    @property
    def is_refusal(self) -> bool:
        return self in _REFUSALS


_REFUSALS = frozenset(
    {
        WakeFailureKind.UNCONFIGURED,
        WakeFailureKind.LOOKUP_UNREADABLE,
        WakeFailureKind.TEMPLATE_UNSET,
        WakeFailureKind.OVER_BUDGET,
        WakeFailureKind.NO_ELIGIBLE_GPU,
    }
)

_KIND_OF_PHASE = {
    CreateFailurePhase.NO_CANDIDATES: WakeFailureKind.NO_ELIGIBLE_GPU,
    CreateFailurePhase.EXHAUSTED: WakeFailureKind.CREATE_EXHAUSTED,
    CreateFailurePhase.RETRIES_EXHAUSTED: WakeFailureKind.CREATE_RETRIES_EXHAUSTED,
    CreateFailurePhase.ABORTED: WakeFailureKind.CREATE_ABORTED,
    CreateFailurePhase.CREATED_WITHOUT_ID: WakeFailureKind.CREATED_WITHOUT_ID,
}


def failure_kind_of(phase: CreateFailurePhase) -> WakeFailureKind:
    """The wake failure a create walk's end maps to; only "no candidates" posted nothing."""
    return _KIND_OF_PHASE[phase]


@dataclass(frozen=True, slots=True, kw_only=True)
class WakeResult:
    """WakeResult is one finished wake.

    `gpu_id` / `price_per_hour` are known only for a pod this wake created. `candidates_considered`,
    `create_attempts` and `last_provider_status` come from the create walk, for the wake history.
    """

    outcome: WakeOutcome
    pod_id: str | None = None
    gpu_id: str | None = None
    price_per_hour: float | None = None
    proxy_url: str | None = None
    message: str = ""
    failure_kind: WakeFailureKind | None = None
    candidates_considered: int = 0
    create_attempts: int = 0
    last_provider_status: int | None = None
    billed: bool = False
    """Whether this wake issued a billable call (a start, a create, a terminate): then it was not Refused."""
