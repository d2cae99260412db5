"""Queue order: higher priority first, then first come first served.

worker-pool seed: "priority ... higher runs first".

`sequence` is the order jobs were queued in (a store sequence, never a wall clock two processes would have
to agree on); the job id breaks a tie so the order is total and every process reads the same one.

This is the one statement of the rule: placement sorts demand by it, and each SQL block that takes from the
queue inside its own statement (`ORDER BY priority DESC, queue_seq`: take_next, complete's hand-off,
insert_machine, demand; submit's check for a job ahead) is run against it on real Postgres
(tests/integration/pool_dispatcher/test_queue_order_sql.py, which also fails for such a block it does not check).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedJob:
    """QueuedJob is the part of a queued job its place in line depends on."""

    id: str
    priority: int
    sequence: int


def queue_key(job: QueuedJob) -> tuple[int, int, str]:
    """Sort key: priority descending, then sequence ascending, then id."""
    return (-job.priority, job.sequence, job.id)


def in_queue_order(jobs: Iterable[QueuedJob]) -> tuple[QueuedJob, ...]:
    return tuple(sorted(jobs, key=queue_key))
