"""Retention's reads and deletes (retention.sql): the oldest candidates of each pruned table, and their deletion by
key under the retention lease's fence. The pruner (pool_dispatcher/retention.py) decides between the two with
thermostat.policy.pool.retention."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from thermostat.policy.pool.retention import Candidate
from thermostat.store.connections import borrow
from thermostat.store.sql import load_sql

from .values import one

Q = load_sql(Path(__file__).with_name("retention.sql"))


class PrunedTable(enum.StrEnum):
    """The tables retention prunes (the metric's `table` label)."""

    JOBS = "pool_jobs"
    USAGE = "pool_usage"
    MACHINE_EVENTS = "pool_machine_events"


FEED_OF = {PrunedTable.USAGE: "usage", PrunedTable.MACHINE_EVENTS: "machines"}
"""The feed (pool_feed_acks) whose acknowledgement a table's rows wait for; jobs wait for none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidates:
    """A table's oldest candidates: each one's key (a job id, a position, a machine id) beside the candidate the
    policy judges, in the same order, and how far the table's feed was acknowledged (None: never, or no feed)."""

    keys: tuple[uuid.UUID | int, ...]
    rows: tuple[Candidate, ...]
    acknowledged: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fence:
    """The retention lease a delete must still hold: its name, holder and term."""

    name: str
    holder: str
    term: int


_READS = {
    PrunedTable.JOBS: ("finished_jobs", "id", "completed_at", None),
    PrunedTable.USAGE: ("oldest_usage", "position", "recorded_at", "position"),
    PrunedTable.MACHINE_EVENTS: ("oldest_machine_stops", "machine_id", "recorded_at", "position"),
}
_DELETES = {
    PrunedTable.JOBS: "prune_jobs",
    PrunedTable.USAGE: "prune_usage",
    PrunedTable.MACHINE_EVENTS: "prune_machine_events",
}


class RetentionRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def candidates(self, table: PrunedTable, limit: int) -> Candidates:
        """The `limit` oldest candidates of `table` (an index scan in the table's own order)."""
        query, key, ended, position = _READS[table]
        feed = FEED_OF.get(table)
        async with borrow(self.pool) as c:
            # the acknowledgement first: one that moves on meanwhile only keeps rows a little longer
            acknowledged = None if feed is None else await c.fetchval(*Q.bind("feed_ack", feed=feed))
            rows = await c.fetch(*Q.bind(query, limit=limit))
        return Candidates(
            keys=tuple(r[key] for r in rows),
            rows=tuple(Candidate(ended_at=r[ended], position=None if position is None else r[position]) for r in rows),
            acknowledged=acknowledged,
        )

    async def prune(self, table: PrunedTable, keys: Sequence[uuid.UUID | int], fence: Fence) -> int:
        """Delete the rows of `keys` still prunable, in one statement, while `fence` holds; the rows deleted."""
        if not keys:
            return 0
        async with borrow(self.pool) as c:
            prune = Q.bind(
                _DELETES[table],
                keys=list(keys),
                lease_name=fence.name,
                lease_holder=fence.holder,
                lease_term=fence.term,
            )
            row = one(await c.fetchrow(*prune))
        return int(row["deleted"])
