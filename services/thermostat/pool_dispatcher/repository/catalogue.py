"""The pool's catalogue of machine types in Postgres (catalogue.sql): one versioned row every process applies."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg

from thermostat.store.connections import borrow
from thermostat.store.sql import load_sql

from .values import one

Q = load_sql(Path(__file__).with_name("catalogue.sql"))


class CatalogueRepository:
    """The pool_catalogue row: read, its version, replace (failing removed types' queued jobs)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def read_catalogue(self) -> tuple[int, Any] | None:
        async with borrow(self.pool) as c:
            row = await c.fetchrow(*Q.bind("read_catalogue"))
        return None if row is None else (row["version"], json.loads(row["types"]))

    async def catalogue_version(self) -> int:
        async with borrow(self.pool) as c:
            version = await c.fetchval(*Q.bind("catalogue_version"))
        return int(version or 0)

    async def replace_catalogue(self, types_json: str, names: Sequence[str]) -> tuple[int, int]:
        """Store the catalogue; (its version, queued jobs failed for removed types)."""
        async with borrow(self.pool) as c:
            row = one(await c.fetchrow(*Q.bind("replace_catalogue", types=types_json, names=list(names))))
        return row["version"], row["failed"]
