"""Ordered SQL migrations, applied at start-up by whichever replica gets there first.

Every file `migrations/NNNN_name.sql` is one migration; they are applied in number order, each in its own
transaction together with its row in `schema_migrations`, so a migration is either wholly applied and
recorded or not at all. Services add their own files (0002 onward); the runner picks up every file.

Several replicas start at once against one database. They serialize on a session-level
`pg_advisory_lock` with a fixed key, held on one connection for the whole run: the first applies what is
pending, the others wait and then find nothing left to do. (Session advisory locks need a real session —
they break behind PgBouncer in transaction mode, as good_job found; connect migrations directly.)

A recorded migration whose file has since changed is an error, not a silent skip: the database would no
longer match what the code reads. Versions recorded in the database but absent here are ignored, so an
older replica keeps running during a rolling deploy of a newer one (migrations are additive by rule).
Statements that refuse to run inside a transaction (CREATE INDEX CONCURRENTLY) are not supported.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from asyncpg.pool import PoolConnectionProxy

__all__ = [
    "MIGRATIONS_DIR",
    "MIGRATION_LOCK_KEY",
    "Migration",
    "MigrationError",
    "discover_migrations",
    "migrate",
]

_log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")

MIGRATION_LOCK_KEY = 0x7468_6572_6D6F_0001
"""The advisory lock key that serializes migration runs ('thermo' in ASCII, then 1)."""

_FILE_NAME = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


class MigrationError(RuntimeError):
    """The migration files or the recorded history are inconsistent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def file_name(self) -> str:
        return f"{self.version:04d}_{self.name}.sql"


def discover_migrations(directory: Path = MIGRATIONS_DIR) -> tuple[Migration, ...]:
    """Every `NNNN_name.sql` in `directory`, in version order; other `.sql` names are an error."""
    migrations: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        match = _FILE_NAME.match(path.name)
        if match is None:
            raise MigrationError(f"{path.name}: migration files are named NNNN_lower_snake_name.sql")
        version = int(match["version"])
        if version in migrations:
            raise MigrationError(
                f"{path.name} and {migrations[version].file_name} share version {version}; renumber one"
            )
        migrations[version] = Migration(version=version, name=match["name"], sql=path.read_text("utf-8"))
    return tuple(migrations[version] for version in sorted(migrations))


async def migrate(
    connection: asyncpg.Connection | PoolConnectionProxy,
    migrations: Sequence[Migration] | None = None,
) -> list[Migration]:
    """Apply the pending migrations over `connection`; return those this call applied.

    `connection` must be a session of its own (not one shared with concurrent work): it holds the
    advisory lock for the whole run.
    """
    if migrations is None:
        migrations = discover_migrations()
    await connection.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await connection.execute(_CREATE_TABLE)
        rows = await connection.fetch("SELECT version, name, checksum FROM schema_migrations")
        recorded = {row["version"]: row for row in rows}
        applied: list[Migration] = []
        for migration in migrations:
            row = recorded.get(migration.version)
            if row is not None:
                if row["checksum"] != migration.checksum:
                    raise MigrationError(
                        f"{migration.file_name} changed after it was applied as "
                        f"{row['version']:04d}_{row['name']}; add a new migration instead"
                    )
                continue
            async with connection.transaction():
                await connection.execute(migration.sql)
                await connection.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
            _log.info("applied migration %s", migration.file_name)
            applied.append(migration)
        return applied
    finally:
        if not connection.is_closed():  # a lost session has released its locks already
            await connection.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
