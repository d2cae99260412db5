"""Ownership of the pool's rows across processes (ownership.sql): which instances lapsed, their rows reclaimed, and
a restart under the same id taking its own rows back under its new lease term."""

from __future__ import annotations

from pathlib import Path

import asyncpg

from thermostat.store.connections import borrow
from thermostat.store.sql import load_sql

from .values import Owner, one

Q = load_sql(Path(__file__).with_name("ownership.sql"))


class OwnershipRepository:
    """Rows by owner: lapsed owners, reclaim, recover_own."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def lapsed_owners(self, owner: Owner) -> list[Owner]:
        async with borrow(self.pool) as c:
            rows = await c.fetch(Q["lapsed_owners"], owner.instance)
        return [Owner(r["owner"], r["owner_term"]) for r in rows]

    async def reclaim(self, lapsed: Owner, owner: Owner) -> tuple[int, int]:
        async with borrow(self.pool) as c:
            row = one(await c.fetchrow(Q["reclaim"], lapsed.instance, lapsed.term, owner.instance, owner.term))
        return row["jobs"], row["machines"]

    async def recover_own(self, owner: Owner, *, any_term: bool = True) -> tuple[int, int]:
        """Fail the id's in-flight jobs and take its machines under `owner`'s term; `any_term=False` keeps
        to rows of that very term (shutdown)."""
        async with borrow(self.pool) as c:
            row = one(await c.fetchrow(Q["recover_own"], owner.instance, owner.term, any_term))
        return row["jobs"], row["machines"]
