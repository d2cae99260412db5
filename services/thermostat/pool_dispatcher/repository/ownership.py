"""Ownership of the pool's rows across processes (ownership.sql): which instances lapsed, their rows reclaimed, a
restart under the same id taking its own rows back under its new lease term, and a deploy's release of its warm
machines with their adoption by any process."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncpg

from thermostat.store.connections import borrow
from thermostat.store.sql import load_sql

from .values import Owner, OwnMachine, Released, one

Q = load_sql(Path(__file__).with_name("ownership.sql"))


class OwnershipRepository:
    """Rows by owner: lapsed owners, reclaim, recover_own."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def lapsed_owners(self, owner: Owner) -> list[Owner]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("lapsed_owners", owner=owner.instance))
        return [Owner(r["owner"], r["owner_term"]) for r in rows]

    async def reclaim(self, lapsed: Owner, owner: Owner) -> tuple[int, int]:
        async with borrow(self.pool) as c:
            reclaim = Q.bind("reclaim", lapsed_owner=lapsed.instance, lapsed_term=lapsed.term, **owner.params())
            row = one(await c.fetchrow(*reclaim))
        return row["jobs"], row["machines"]

    async def recover_own(self, owner: Owner, *, any_term: bool = True) -> tuple[int, int]:
        """Fail the id's in-flight jobs and take its machines under `owner`'s term; `any_term=False` keeps
        to rows of that very term (shutdown)."""
        async with borrow(self.pool) as c:
            row = one(await c.fetchrow(*Q.bind("recover_own", any_term=any_term, **owner.params())))
        return row["jobs"], row["machines"]

    async def release_own(self, owner: Owner, running_error: str) -> Released:
        """A deploy's shutdown: requeue the unsent jobs, fail the running ones with `running_error`, set the
        starting and mid-job machines stopping and release the warm ones (ownership.sql says more)."""
        async with borrow(self.pool) as c:
            row = one(await c.fetchrow(*Q.bind("release_own", running_error=running_error, **owner.params())))
        return Released(
            requeued=row["requeued"], failed=row["failed"], stopping=row["stopping"], released=row["released"]
        )

    async def released_machines(self, limit: int = 100) -> list[OwnMachine]:
        """Machines released by a deploy and not yet adopted (to probe first)."""
        async with borrow(self.pool) as c:
            rows = await c.fetch(*Q.bind("released_machines", limit=limit))
        return [OwnMachine.from_row(r) for r in rows]

    async def adopt_released(self, machine_id: str, owner: Owner, *, healthy: bool) -> tuple[str, float | None] | None:
        """Take a released machine: warm (healthy) or stopping; (its state, idle seconds), or None when another
        process adopted it first."""
        async with borrow(self.pool) as c:
            adopt = Q.bind("adopt_released", machine_id=uuid.UUID(machine_id), healthy=healthy, **owner.params())
            row = await c.fetchrow(*adopt)
        return None if row is None else (row["state"], row["idle_seconds"])
