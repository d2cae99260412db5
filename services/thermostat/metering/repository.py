"""Metering's one door to Postgres: the ledger, feed positions and pod budgets (style 13: SQL in queries.sql,
frozen values out).

Exactly once: a page of a feed lands in one transaction that inserts its entries (idempotent by their source
id) and advances the feed's position. A crash before the commit lands nothing and moves nothing, so the page
is read again; a replayed page, or one a replica that lost the ingest lease lands as well, adds no entry and
never moves the position back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from thermostat.policy.metering.budget import PodBudget
from thermostat.policy.metering.pod_spend import BillableEvent
from thermostat.policy.metering.pool_spend import JobTime, MachineLife
from thermostat.store.connections import borrow
from thermostat.store.sql import load_sql

Q = load_sql(Path(__file__).with_name("queries.sql"))


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerAction:
    """One billable action of the pod controller's feed, as the ledger keeps it."""

    source_id: str
    position: int
    pod_name: str
    action: str
    pod_id: str
    ok: bool
    trigger: str
    at: datetime
    http_status: int | None = None
    gpu_id: str | None = None
    price_per_hour: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerUsage:
    """One usage event of the pool's feed (a terminal job that reached a machine), as the ledger keeps it."""

    source_id: str  # the job id
    position: int
    tenant_id: str
    machine_type: str
    worker_id: str
    terminal_state: str
    duration_seconds: float
    started_at: datetime
    ended_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerMachineEvent:
    """One machine boot or stop of the pool's machine-life feed, as the ledger keeps it."""

    position: int
    machine_id: str
    tenant_id: str
    machine_type: str
    event: str
    at: datetime
    price_per_hour: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedState:
    source: str
    position: int
    head_position: int
    last_read_at: datetime | None  # the last successful read
    error: str  # the last read's failure; empty when it succeeded
    lag_seconds: float | None = None  # since the last successful read (database clock); None: never read

    @property
    def lag_events(self) -> int:
        return max(0, self.head_position - self.position)


class MeteringRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def position(self, source: str) -> int:
        async with borrow(self._pool) as c:
            value: int = await c.fetchval(*Q.bind("feed_position", source=source))
            return value

    async def _land(
        self, source: str, statement: str, columns: dict[str, list[Any]], *, through: int, head: int
    ) -> int:
        """Land one page (`columns`: one array per column of `statement`, empty for an empty page) and advance
        the feed to `through` in one transaction, so a crash lands neither; how many entries were new."""
        async with borrow(self._pool) as c, c.transaction():
            await c.execute(*Q.bind("ensure_feed", source=source))
            await c.execute(*Q.bind("lock_feed", source=source))
            status = "INSERT 0 0"
            if any(columns.values()):
                status = await c.execute(*Q.bind(statement, source=source, **columns))
            await c.execute(*Q.bind("advance_feed", source=source, through=through, head=head))
            return int(status.rsplit(" ", 1)[-1])

    async def land_pod_actions(
        self, source: str, actions: list[LedgerAction] | tuple[LedgerAction, ...], *, through: int, head: int
    ) -> int:
        """Land a page of billable actions and advance the feed to `through`; how many entries were new."""
        a = actions
        columns: dict[str, list[Any]] = {
            "source_ids": [x.source_id for x in a], "positions": [x.position for x in a],
            "pod_names": [x.pod_name for x in a], "actions": [x.action for x in a], "pod_ids": [x.pod_id for x in a],
            "gpu_ids": [x.gpu_id for x in a], "prices_per_hour": [x.price_per_hour for x in a],
            "http_statuses": [x.http_status for x in a], "oks": [x.ok for x in a],
            "triggers": [x.trigger for x in a], "ats": [x.at for x in a],
        }  # fmt: skip
        return await self._land(source, "land_pod_action", columns, through=through, head=head)

    async def land_pool_usage(
        self, source: str, events: list[LedgerUsage] | tuple[LedgerUsage, ...], *, through: int, head: int
    ) -> int:
        """Land a page of pool usage and advance the feed to `through`; how many were new."""
        e = events
        columns: dict[str, list[Any]] = {
            "source_ids": [x.source_id for x in e], "positions": [x.position for x in e],
            "tenant_ids": [x.tenant_id for x in e], "machine_types": [x.machine_type for x in e],
            "worker_ids": [x.worker_id for x in e], "terminal_states": [x.terminal_state for x in e],
            "durations_seconds": [x.duration_seconds for x in e], "started_ats": [x.started_at for x in e],
            "ended_ats": [x.ended_at for x in e],
        }  # fmt: skip
        return await self._land(source, "land_pool_usage", columns, through=through, head=head)

    async def land_pool_machines(
        self, source: str, events: list[LedgerMachineEvent], *, through: int, head: int
    ) -> int:
        """Land a page of machine events and advance the feed to `through`; how many were new."""
        e = events
        columns: dict[str, list[Any]] = {
            "positions": [x.position for x in e], "machine_ids": [x.machine_id for x in e],
            "tenant_ids": [x.tenant_id for x in e], "machine_types": [x.machine_type for x in e],
            "events": [x.event for x in e], "ats": [x.at for x in e], "prices_per_hour": [x.price_per_hour for x in e],
        }  # fmt: skip
        return await self._land(source, "land_pool_machine", columns, through=through, head=head)

    async def pool_time(
        self, tenant_id: str | None, since: datetime, until: datetime
    ) -> tuple[list[MachineLife], list[JobTime]]:
        """Machine lives overlapping the range and jobs ended in it, of one tenant or all."""
        async with borrow(self._pool) as c:
            lives = await c.fetch(*Q.bind("pool_lives", tenant=tenant_id, since=since, until=until))
            jobs = await c.fetch(*Q.bind("pool_jobs", tenant=tenant_id, since=since, until=until))
        return (
            [
                MachineLife(
                    machine_id=r["machine_id"],
                    tenant_id=r["tenant_id"],
                    machine_type=r["machine_type"],
                    started_at=r["started_at"],
                    stopped_at=r["stopped_at"],
                    price_per_hour=r["price_per_hour"],
                )
                for r in lives
            ],
            [
                JobTime(
                    tenant_id=r["tenant_id"],
                    machine_type=r["machine_type"],
                    seconds=r["duration_seconds"],
                    ended_at=r["ended_at"],
                    price_per_hour=r["price_per_hour"],
                )
                for r in jobs
            ],
        )

    async def feed_failed(self, source: str, error: str) -> None:
        async with borrow(self._pool) as c:
            await c.execute(*Q.bind("ensure_feed", source=source))
            await c.execute(*Q.bind("feed_error", source=source, error=error))

    async def feeds(self) -> list[FeedState]:
        async with borrow(self._pool) as c:
            rows = await c.fetch(*Q.bind("feeds"))
        return [
            FeedState(
                source=r["source"],
                position=r["position"],
                head_position=r["head_position"],
                last_read_at=r["last_read_at"],
                error=r["error"],
                lag_seconds=r["lag_seconds"],
            )
            for r in rows
        ]

    async def pod_events(self, pod_name: str) -> list[BillableEvent]:
        async with borrow(self._pool) as c:
            rows = await c.fetch(*Q.bind("pod_events", pod_name=pod_name))
        return [_event(r) for r in rows]

    async def tenant_budgets(self, limit: int) -> dict[str, PodBudget]:
        """The tenants with a ceiling (at most `limit`), each with its budget."""
        async with borrow(self._pool) as c:
            rows = await c.fetch(*Q.bind("tenant_budgets", limit=limit))
        return {r["tenant_id"]: PodBudget(daily_usd=r["daily_usd"], monthly_usd=r["monthly_usd"]) for r in rows}

    async def pod_budget(self, pod_name: str) -> PodBudget:
        async with borrow(self._pool) as c:
            row = await c.fetchrow(*Q.bind("pod_budget", pod_name=pod_name))
        return PodBudget(daily_usd=row["daily_usd"], monthly_usd=row["monthly_usd"]) if row else PodBudget()

    async def pod_check(self, pod_name: str, after: int) -> tuple[PodBudget, list[BillableEvent]]:
        """The pod's budget and its billable actions landed after position `after`, in one statement."""
        async with borrow(self._pool) as c:
            rows = await c.fetch(*Q.bind("pod_check", pod_name=pod_name, after=after))
        budget = PodBudget(daily_usd=rows[0]["daily_usd"], monthly_usd=rows[0]["monthly_usd"])
        return budget, [_event(r) for r in rows if r["position"] is not None]

    async def set_pod_budget(self, pod_name: str, budget: PodBudget) -> None:
        async with borrow(self._pool) as c:
            await c.execute(
                *Q.bind("set_pod_budget", pod_name=pod_name, daily_usd=budget.daily_usd, monthly_usd=budget.monthly_usd)
            )

    async def tenant_budget(self, tenant_id: str) -> PodBudget:
        async with borrow(self._pool) as c:
            row = await c.fetchrow(*Q.bind("tenant_budget", tenant=tenant_id))
        return PodBudget(daily_usd=row["daily_usd"], monthly_usd=row["monthly_usd"]) if row else PodBudget()

    async def set_tenant_budget(self, tenant_id: str, budget: PodBudget) -> None:
        async with borrow(self._pool) as c:
            await c.execute(
                *Q.bind(
                    "set_tenant_budget", tenant=tenant_id, daily_usd=budget.daily_usd, monthly_usd=budget.monthly_usd
                )
            )

    async def db_now(self) -> datetime:
        async with borrow(self._pool) as c:
            now: datetime = await c.fetchval(*Q.bind("db_now"))
            return now


def _event(r: asyncpg.Record) -> BillableEvent:
    return BillableEvent(
        position=r["position"],
        at=r["at"],
        action=r["action"],
        pod_id=r["pod_id"],
        ok=r["ok"],
        http_status=r["http_status"],
        gpu_id=r["gpu_id"],
        price_per_hour=r["price_per_hour"],
    )
