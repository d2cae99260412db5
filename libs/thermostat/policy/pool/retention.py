"""Retention: which finished rows the pool may delete, how many per statement, and what a deleted job answers.

Theory of operation. Nothing else ever deletes a finished job, its result, a usage event or a dead machine's
events, so without this the tables grow by the job rate forever (issue 23: 1,000,000 finished jobs took 218 MB
in pool_jobs and 215 MB in pool_usage; at 1,000 jobs/s about 19 GB a day each). The pruner (one dispatcher
process at a time, pool_dispatcher/retention.py) reads the oldest candidates of each table, oldest first, and
this module decides how many of them go:

    table                 candidates, oldest first            a candidate is prunable when
    --------------------  ----------------------------------  -----------------------------------------------
    pool_jobs             terminal, unowned, by completed_at  it ended before the horizon (now - retention)
    pool_usage            by position                         it was recorded before the horizon AND metering's
                                                              ledger acknowledged its position
    pool_machine_events   a dead machine's stop, by position  as pool_usage (the ledger's machine feed); its
                                                              machine's boot event goes with it

The decision is a prefix (`prunable_prefix`): the first candidate that is not prunable ends the batch, since
every one after it is younger or further along the feed. A batch is bounded (`BatchSize`): each statement
deletes at most `rows`, and the next batch's size follows how long this one took, so a statement stays short on
any hardware (halved when it took over the target, doubled when under half of it, within its floor and
ceiling); a full batch is followed by a pause as long as it took, so the pruner holds the store at most half
the time while it catches up, and a short one by the pass interval.

A pruned job answers 404 / NOT_FOUND saying it expired (`missing_job_detail`). Job ids are UUIDv7
(`mint_job_id`): their first 48 bits are the submit's wall time in milliseconds, so a missing id says by itself
whether a job with it could have been pruned: minted before the horizon, it could (a job is pruned at the
earliest a retention after its submit); minted after, it never existed. No tombstone is kept (a tombstone per
pruned job would be a table growing at the job rate again). An id that is not a UUIDv7 (the pool's ids before
retention were UUIDv4) carries no time, and answers the plain "no such job".
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

DEFAULT_RETENTION_HOURS = 24.0
"""POOL_JOB_RETENTION_HOURS' default (docs/pool-retention.md says why a day)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """A row the pruner read: when it ended (a job's completed_at, an event's recorded_at) and, for a feed's
    row, its position on that feed (None: the table feeds nobody)."""

    ended_at: datetime
    position: int | None = None


def horizon(*, now: datetime, retention: timedelta) -> datetime:
    """Rows that ended before this instant have been kept their retention."""
    return now - retention


def prunable_prefix(rows: Sequence[Candidate], *, horizon: datetime, acknowledged: int | None = None) -> int:
    """How many of `rows` (oldest first) may be deleted: the leading run that ended before `horizon` and, for a
    feed's rows, whose position the reader acknowledged (`acknowledged`: the position metering's ledger landed
    through; None for a feed it never acknowledged, which keeps every row)."""
    for index, row in enumerate(rows):
        if row.ended_at >= horizon:
            return index
        if row.position is not None and (acknowledged is None or row.position > acknowledged):
            return index
    return len(rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchSize:
    """Rows per prune statement: where it starts, its bounds, and how long one statement should take."""

    rows: int = 500
    floor: int = 50
    ceiling: int = 5000
    target_seconds: float = 0.05

    def __post_init__(self) -> None:
        if not 1 <= self.floor <= self.rows <= self.ceiling:
            raise ValueError(f"batch rows must satisfy 1 <= floor <= rows <= ceiling, not {self}")
        if not self.target_seconds > 0:
            raise ValueError(f"target_seconds must be positive, not {self.target_seconds}")

    @classmethod
    def at_most(cls, rows: int) -> BatchSize:
        """Batches never over `rows` (POOL_PRUNE_BATCH_ROWS), starting at a tenth of it and never under 50 (or
        `rows`, when that is fewer)."""
        floor = min(50, rows)
        return cls(rows=max(floor, rows // 10), floor=floor, ceiling=rows)

    def after(self, took_seconds: float) -> BatchSize:
        """The next batch's size after one of `rows` took `took_seconds`."""
        if took_seconds > self.target_seconds:
            rows = max(self.floor, self.rows // 2)
        elif took_seconds < self.target_seconds / 2:
            rows = min(self.ceiling, self.rows * 2)
        else:
            return self
        return BatchSize(rows=rows, floor=self.floor, ceiling=self.ceiling, target_seconds=self.target_seconds)


def pause_after(*, prunable: int, asked: int, took_seconds: float, interval_seconds: float) -> float:
    """How long the pruner waits before a table's next batch, after `prunable` of the `asked` candidates it read were
    prunable: a full batch (more may be waiting) as long as it took, so pruning holds the store at most half the
    time while it catches up; a short one the pass interval."""
    return max(0.0, took_seconds) if prunable >= asked else interval_seconds


# Job ids.

_VERSION_7 = 7


def mint_job_id(*, now: datetime, random: bytes) -> uuid.UUID:
    """A UUIDv7 (RFC 9562): 48 bits of `now` in Unix milliseconds, then 74 bits of `random` (10 bytes given)."""
    if len(random) != 10:
        raise ValueError(f"a UUIDv7 takes 10 random bytes, not {len(random)}")
    millis = int(now.timestamp() * 1000)
    if not 0 <= millis < 1 << 48:
        raise ValueError(f"{now} does not fit a UUIDv7's 48-bit millisecond clock")
    tail = int.from_bytes(random, "big")  # 80 bits, of which 74 are kept
    value = millis << 80 | _VERSION_7 << 76 | (tail >> 68 & 0xFFF) << 64 | 0b10 << 62 | (tail & (1 << 62) - 1)
    return uuid.UUID(int=value)


def job_id_minted_at(job_id: uuid.UUID) -> datetime | None:
    """When a UUIDv7 job id was minted (its millisecond); None for an id of any other version (no time in it)."""
    if job_id.version != _VERSION_7 or job_id.variant != uuid.RFC_4122:
        return None
    return datetime.fromtimestamp((job_id.int >> 80) / 1000, UTC)


NO_SUCH_JOB = "no such job"


def missing_job_detail(job_id: uuid.UUID, *, now: datetime, retention: timedelta) -> str:
    """What a lookup of a job id the store does not hold answers: expired when a job with that id could have been
    pruned (minted before the horizon), else the plain not-found. Either way it confirms nothing about another
    tenant: it reads only the id."""
    minted = job_id_minted_at(job_id)
    if minted is None or minted >= horizon(now=now, retention=retention):
        return NO_SUCH_JOB
    hours = retention.total_seconds() / 3600
    return f"job {job_id} expired: finished jobs and their results are kept {hours:g} hours"
