"""A dispatcher step whose store write did not answer: how long to wait before writing again, and what the
machine's held job means when the write's answer was lost.

Every write of a step (mark_sent, a completion, take_next, a boot's rows) is fenced by owner and term, so
writing again is safe: it lands, or it answers that the row is no longer this process's (the lease was lost
and the rows reclaimed). A write can also land with its answer lost; the step then reads what its machine
holds under this owner and resumes from there rather than leave a row under a live owner that nothing drives.
"""

from __future__ import annotations

from enum import StrEnum

from .jobs import JobState

FIRST_RETRY_SECONDS = 0.05
LONGEST_RETRY_SECONDS = 2.0


def retry_delay(attempt: int) -> float:
    """The wait before write attempt `attempt` + 1 (attempt counts failures from 1): doubling, capped."""
    if attempt < 1:
        raise ValueError(f"attempt: must be at least 1, got {attempt}")
    return min(LONGEST_RETRY_SECONDS, FIRST_RETRY_SECONDS * 2.0 ** (attempt - 1))


class HeldAction(StrEnum):
    SEND = "send"  # running by this process's own hand-off whose answer was lost: never sent, send it now
    MARK_AND_SEND = "mark_and_send"  # dispatched: the conditional send (mark_sent) first
    NOTHING = "nothing"  # the machine holds no live job of this process's


def resume_held(state: JobState | None) -> HeldAction:
    """What to do with the job a machine of this process holds after a write whose answer was lost. Only the
    step driving that machine asks, and it sends a payload only after its write answered, so a held running
    job cannot have reached the worker."""
    if state is JobState.RUNNING:
        return HeldAction.SEND
    if state is JobState.DISPATCHED:
        return HeldAction.MARK_AND_SEND
    return HeldAction.NOTHING
