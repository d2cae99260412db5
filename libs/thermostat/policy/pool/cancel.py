"""Cancel: what `POST /v1/jobs/{id}/cancel` does in each job state (worker-pool seed: Cancelling a job).

Cancelling stops the job, not the machine. The job is marked cancelled at once, so a sync wait on it
returns straight away; what else happens depends on how far it got:

    queued, dispatched  → cancelled; never reaches a machine, no usage (the cancel and the dispatch are
                          conditional updates on one row, so another process never starts it)
    running             → cancelled, and the pool posts /v1/executions/{build_id}/cancel to its machine
                          with that machine's token; usage is recorded when the execute call answers
    cancelled           → 200 again, so a retry is safe
    completed, failed,
    timed_out           → 409, like a result asked for too early

The payload is opaque to the pool, so the caller names the build: `{"build_id": "..."}`, required, of
letters, digits, `-` and `_` only (it goes into the worker's URL path), at most 128 characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.pool.jobs import JobState

MAX_BUILD_ID_LENGTH = 128
_BUILD_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_BUILD_ID_LENGTH}}}")


class CancelAction(StrEnum):
    CANCEL_BEFORE_MACHINE = "cancel_before_machine"  # mark cancelled; nothing to stop, no usage
    CANCEL_RUNNING = "cancel_running"  # mark cancelled and post the cancel to the machine
    ALREADY_CANCELLED = "already_cancelled"  # 200, nothing to do
    REFUSE = "refuse"  # 409: it finished another way


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelDecision:
    action: CancelAction
    status_code: int  # the REST answer: 200, or 409

    @property
    def marks_cancelled(self) -> bool:
        return self.action in (CancelAction.CANCEL_BEFORE_MACHINE, CancelAction.CANCEL_RUNNING)


_BY_STATE = {
    JobState.QUEUED: CancelAction.CANCEL_BEFORE_MACHINE,
    JobState.DISPATCHED: CancelAction.CANCEL_BEFORE_MACHINE,
    JobState.RUNNING: CancelAction.CANCEL_RUNNING,
    JobState.CANCELLED: CancelAction.ALREADY_CANCELLED,
    JobState.COMPLETED: CancelAction.REFUSE,
    JobState.FAILED: CancelAction.REFUSE,
    JobState.TIMED_OUT: CancelAction.REFUSE,
}


def decide_cancel(state: JobState) -> CancelDecision:
    action = _BY_STATE[state]
    return CancelDecision(action=action, status_code=409 if action is CancelAction.REFUSE else 200)


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildIdError:
    """BuildIdError is a 400 naming `build_id`; the offending value is not echoed."""

    message: str

    @property
    def detail(self) -> str:
        return f"build_id: {self.message}"


def validate_build_id(value: object) -> str | BuildIdError:
    if value is None:
        return BuildIdError(message="is required")
    if not isinstance(value, str) or not value:
        return BuildIdError(message="must be a non-empty string")
    if not _BUILD_ID.fullmatch(value):
        return BuildIdError(message=f"must be 1-{MAX_BUILD_ID_LENGTH} letters, digits, '-' or '_'")
    return value
