"""The pool's door to Postgres for what concerns metering (style 13: SQL in metering_queries.sql): the event
tables its feeds read, and the budget refusals it records. Kept apart from repository/, the dispatcher's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from thermostat.store.connections import borrow
from thermostat.store.sql import load_sql

from .repository.ids import new_job_id

Q = load_sql(Path(__file__).with_name("metering_queries.sql"))


@dataclass(frozen=True, slots=True, kw_only=True)
class EventPage:
    """Visible rows after a position (as mappings of their columns), the greatest position and the db clock."""

    rows: tuple[dict[str, Any], ...]
    head: int
    now: datetime


class PoolMeteringRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def _page(self, rows_query: str, head_query: str, after: int, size: int) -> EventPage:
        async with borrow(self.pool) as c:
            # the clock first: a row recorded after it is younger than it looks, never older
            head = await c.fetchrow(*Q.bind(head_query))
            assert head is not None  # a SELECT without FROM returns its one row
            rows = await c.fetch(*Q.bind(rows_query, after=after, limit=size))
        return EventPage(rows=tuple(dict(r) for r in rows), head=head["head"], now=head["now"])

    async def usage_page(self, after: int, size: int) -> EventPage:
        return await self._page("usage_after", "usage_head", after, size)

    async def machine_events_page(self, after: int, size: int) -> EventPage:
        return await self._page("machine_events_after", "machine_events_head", after, size)

    async def acknowledge(self, feed: str, position: int) -> None:
        """Metering's ledger has landed `feed` ('usage' or 'machines') through `position` (never moves back)."""
        async with borrow(self.pool) as c:
            await c.execute(*Q.bind("acknowledge_feed", feed=feed, position=position))

    async def record_refused_submit(
        self,
        *,
        tenant_id: str,
        machine_type: str,
        priority: int,
        session_id: str | None,
        timeout_seconds: float,
        error: str,
    ) -> str:
        """A submit refused for the tenant's budget, as a failed job on the record; its id."""
        job_id = new_job_id()
        async with borrow(self.pool) as c:
            await c.execute(
                *Q.bind(
                    "record_refusal",
                    job_id=job_id,
                    tenant_id=tenant_id,
                    machine_type=machine_type,
                    priority=priority,
                    session_id=session_id,
                    timeout_seconds=timeout_seconds,
                    error=error,
                )
            )
        return str(job_id)
