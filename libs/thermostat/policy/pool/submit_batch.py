"""Group commit of submits that will queue: which submit joins a batch, and when a batch goes out.

Theory of operation. A submit is one statement: it inserts the job and, in the same statement, hands it to an
idle warm machine of the tenant, type and image. Under a backlog nearly every submit queues instead (every
machine the tenant cap allows is busy, and each takes its next job in the statement that completes its
current one), and then the statement's only work is the insert, whose per-statement cost (a round trip, a
commit, the driver's per-call work) is paid per job. So a process that has reason to believe the next submit
of a (tenant, type, image) will queue lets it join a short batch written by one multi-row insert instead.

The reason is what the last submit statement of that key answered in this process: queued, with placement
unable to act (thermostat.policy.pool.placement.placement_may_act). Anything since that suggests a machine of
the key may be idle (this process's completion that found no next job, a machine of the key becoming ready)
sends the next submit back to the single statement, which can claim it. A batch's answer says as much as a
single submit's (the tenant's live and idle machines after the insert), so it keeps or clears the reason the
same way, and pokes placement when placement could act.

A batch goes out when it holds `max_jobs` submits, or `max_delay_seconds` after its first one joined. A
submit joins only when its call has at least the window plus a margin left, so the window never outlasts a
caller's deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.pool.placement import placement_may_act


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchLimits:
    """How large a batch grows and how long its first submit waits for company (bench/pool_throughput_ab.py)."""

    max_jobs: int = 16
    max_delay_seconds: float = 0.002
    deadline_margin_seconds: float = 0.05  # left of a caller's deadline after the window, for the statement

    def __post_init__(self) -> None:
        if self.max_jobs < 1:
            raise ValueError("max_jobs must be at least 1")
        if self.max_delay_seconds < 0 or self.deadline_margin_seconds < 0:
            raise ValueError("the delay and the margin must not be negative")


class Outlook(StrEnum):
    """What this process expects of the next submit of a (tenant, type, image)."""

    MAY_TAKE = "may_take"  # a machine may take it at submit, or placement may act on it: one statement of its own
    WILL_QUEUE = "will_queue"  # the last submit queued with placement unable to act: it may join a batch


def outlook_after_submit(*, claimed: bool, live_machines: int, idle_machines: int, max_workers: int | None) -> Outlook:
    """The outlook a submit statement's answer (single or batch) leaves for the next submit of its key."""
    if claimed or placement_may_act(live_machines=live_machines, idle_machines=idle_machines, max_workers=max_workers):
        return Outlook.MAY_TAKE
    return Outlook.WILL_QUEUE


def joins_batch(*, outlook: Outlook | None, remaining_seconds: float | None, limits: BatchLimits) -> bool:
    """Whether a submit joins its key's batch: the key is expected to queue (nothing known: it is not), and
    the call has room for the whole window before its deadline (None: no deadline)."""
    if outlook is not Outlook.WILL_QUEUE or limits.max_jobs < 2:
        return False
    return remaining_seconds is None or remaining_seconds >= limits.max_delay_seconds + limits.deadline_margin_seconds


def goes_out_now(*, members: int, limits: BatchLimits) -> bool:
    """Whether a batch with this many submits goes out without waiting for the rest of its window."""
    return members >= limits.max_jobs
