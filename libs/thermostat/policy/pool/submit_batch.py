"""Group commit of submits that will queue: which submit joins a batch, and when a batch goes out.

Theory of operation. A submit is one statement: it inserts the job and, in the same statement, hands it to an
idle warm machine of the tenant, type and image. Under a backlog nearly every submit queues instead (every
machine the tenant cap allows is busy, and each takes its next job in the statement that completes its
current one), and then the statement's only work is the insert, whose per-statement cost (a round trip, a
commit, the driver's per-call work) is paid per job. So a process that has reason to believe the next submit
of a (tenant, type, image) will queue lets it join a short batch written by one multi-row insert instead.

The reason is what the last submit statement of that key answered in this process: queued, with placement
unable to act (thermostat.policy.pool.placement.placement_may_act), behind a queue deep enough that every live
machine of the key has `queued_per_machine` jobs waiting in the store. That depth is what keeps a batch's
window off the machines' path: each takes its next job in the statement that completes its current one, and
a job held in a window is one the store's queue does not have. Behind a shallow queue (a few callers, as
many machines) a held job would leave a machine idle and cost a placement pass to hand over, more than the
batch saves (bench/pool_throughput_ab.py --clients 6). Anything since that suggests a machine of the key
may be idle (this process's completion that found no next job, a machine of the key becoming ready or
stopping) sends the next submit back to the single statement, which can claim it, and sends the key's
gathering batch out at once. A batch's answer says as much as a single submit's, so it keeps or clears the
reason the same way, and pokes placement when placement could act.

A batch goes out when it holds `max_jobs` submits or `max_bytes` of payload, or `max_delay_seconds` after
its first one joined. A submit joins only when its call has at least the window plus a margin left, so the
window never outlasts a caller's deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.pool.placement import placement_may_act


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchLimits:
    """How large a batch grows and how long its first submit waits for company (bench/pool_throughput_ab.py)."""

    max_jobs: int = 16
    max_bytes: int = 1024 * 1024  # payload bytes: a batch of large payloads goes out before it holds max_jobs
    max_delay_seconds: float = 0.010
    deadline_margin_seconds: float = 0.05  # left of a caller's deadline after the window, for the statement
    queued_per_machine: int = 2

    def __post_init__(self) -> None:
        if self.max_jobs < 1 or self.max_bytes < 1 or self.queued_per_machine < 1:
            raise ValueError("max_jobs, max_bytes and queued_per_machine must be at least 1")
        if self.max_delay_seconds < 0 or self.deadline_margin_seconds < 0:
            raise ValueError("the delay and the margin must not be negative")


class Outlook(StrEnum):
    """What this process expects of the next submit of a (tenant, type, image)."""

    MAY_TAKE = "may_take"  # a machine may take it at submit, or placement may act on it: one statement of its own
    WILL_QUEUE = "will_queue"  # the last submit queued with placement unable to act: it may join a batch


def queued_to_count(*, max_workers: int | None, limits: BatchLimits) -> int:
    """How far a submit statement counts the key's queue: no further than the deepest queue the outlook asks
    for (the tenant cap's machines, each with its jobs waiting). Uncapped types never batch: count nothing."""
    return 0 if max_workers is None else max_workers * limits.queued_per_machine


def outlook_after_submit(
    *,
    claimed: bool,
    live_machines: int,
    idle_machines: int,
    queued_jobs: int,
    max_workers: int | None,
    limits: BatchLimits,
) -> Outlook:
    """The outlook a submit statement's answer (single or batch) leaves for the next submit of its key:
    `queued_jobs` is the key's queue it saw besides its own jobs (counted up to queued_to_count)."""
    if claimed or placement_may_act(live_machines=live_machines, idle_machines=idle_machines, max_workers=max_workers):
        return Outlook.MAY_TAKE
    if queued_jobs < live_machines * limits.queued_per_machine:
        return Outlook.MAY_TAKE  # a shallow queue: a job held in a window may be the one a machine wants next
    return Outlook.WILL_QUEUE


def joins_batch(
    *, outlook: Outlook | None, remaining_seconds: float | None, limits: BatchLimits, single_waiting: bool = False
) -> bool:
    """Whether a submit joins its key's batch: the key is expected to queue (nothing known: it is not), the
    call has room for the whole window before its deadline (None: no deadline), and no single submit of the key
    is waiting for the key's batches to answer (`single_waiting`): a batch formed behind it could land first and
    queue a later arrival ahead of it, so later submits go single too, after the same batches."""
    if outlook is not Outlook.WILL_QUEUE or limits.max_jobs < 2 or single_waiting:
        return False
    return remaining_seconds is None or remaining_seconds >= limits.max_delay_seconds + limits.deadline_margin_seconds


def goes_out_now(*, members: int, payload_bytes: int, limits: BatchLimits) -> bool:
    """Whether a batch with this many submits and payload bytes goes out without waiting for the rest of its window."""
    return members >= limits.max_jobs or payload_bytes >= limits.max_bytes
