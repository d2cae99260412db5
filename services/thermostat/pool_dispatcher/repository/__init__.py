"""The pool dispatcher's one door to Postgres, split by aggregate; each part owns its named SQL blocks and returns
frozen values (values.py, built by `from_row`):

- jobs.py (jobs.sql): submit and its warm claim, group commit, completion and the machine's next job, the
  conditional send, requeue, hand-back, cancel, the reads of a job, its result and the usage feed;
- machines.py (machines.sql): placement's lock and counts, a machine's insert, boot, ready, retire and stop,
  health misses, the fleet's reads;
- catalogue.py (catalogue.sql): the versioned catalogue row;
- ownership.py (ownership.sql): lapsed instances, reclaim, a restart taking its rows back, a deploy's release of
  its warm machines and their adoption;
- retention.py (retention.sql): the pruner's candidates and fenced deletes (built on its own in __main__.py);
- notify.py: the job-done channels and the LISTEN connection;
- writes.py: the request values of `submit` and `complete`, whose fields are their statements' parameters.

`PoolRepository` holds the first four over the process's connection pool (`repo.jobs`, `repo.machines`,
`repo.catalogue`, `repo.ownership`); besides them only retention, the metering feeds (metering_repository.py) and
the placement transaction the engine opens on it (engine/placement.py) touch the pool. Every statement that writes
an owned row takes the process's `Owner` (instance id and lease term) and matches both, so a process that stalled
past its lease cannot write over rows another process took over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import asyncpg

from .catalogue import CatalogueRepository
from .jobs import JobRepository
from .machines import Conn, MachineRepository
from .notify import CATALOGUE, JOBS_DONE, RELEASED, Subscription, job_done_channel, listen, parse_job_done
from .ownership import OwnershipRepository
from .values import (
    Assignment,
    CancelResult,
    Completion,
    Demand,
    Finished,
    FleetMachine,
    HandedBack,
    JobView,
    MachineHold,
    Owner,
    OwnMachine,
    QueuedBatch,
    QueuedSubmit,
    Released,
    StartingMachine,
    StoredResult,
    Submitted,
    UsageView,
    WorkerView,
    usage_event_id,
)
from .writes import CompletionWrite, SubmitWrite

__all__ = [
    "CATALOGUE",
    "JOBS_DONE",
    "RELEASED",
    "Assignment",
    "CancelResult",
    "CatalogueRepository",
    "Completion",
    "CompletionWrite",
    "Conn",
    "Demand",
    "Finished",
    "FleetMachine",
    "HandedBack",
    "JobRepository",
    "JobView",
    "MachineHold",
    "MachineRepository",
    "OwnMachine",
    "Owner",
    "OwnershipRepository",
    "PoolRepository",
    "QueuedBatch",
    "QueuedSubmit",
    "Released",
    "StartingMachine",
    "StoredResult",
    "SubmitWrite",
    "Submitted",
    "Subscription",
    "UsageView",
    "WorkerView",
    "job_done_channel",
    "parse_job_done",
    "usage_event_id",
]


class PoolRepository:
    """The pool's rows in Postgres, by aggregate: each read and write is its aggregate's method."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.jobs = JobRepository(pool)
        self.machines = MachineRepository(pool)
        self.catalogue = CatalogueRepository(pool)
        self.ownership = OwnershipRepository(pool)

    async def listen(self, handlers: Mapping[str, Callable[[str], None]]) -> Subscription:
        """LISTEN to each channel, calling its handler with the notification's payload."""
        return await listen(self.pool, handlers)
