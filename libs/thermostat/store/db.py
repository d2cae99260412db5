"""A service's handle on Postgres: migrations at start-up, a main pool, a lease pool, a health ping.

`Store.open(dsn)` applies pending migrations over a dedicated connection (serialized across replicas, see
`migrations`), then opens two pools: the main one for the service's queries and a small one that only the
lease store uses, so renewals never queue behind ordinary work (River PR 1101: pool exhaustion stalled
leader election). `ping()` answers within `ping_timeout` whether the store is reachable; the health
service reports SERVING only while it is.

JSON and JSONB values travel as text (asyncpg's default): encode with `json.dumps` and decode with
`json.loads` at the edge of each query module.
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Self

import asyncpg

from thermostat.store.connections import borrow
from thermostat.store.lease import LeaseStore
from thermostat.store.migrations import Migration, migrate

__all__ = ["Store", "apply_migrations", "create_pool"]

_log = logging.getLogger(__name__)


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    connect_timeout: float = 5.0,
    command_timeout: float | None = 30.0,
    application_name: str = "thermostat",
) -> asyncpg.Pool:
    """An asyncpg pool with bounded connect and statement times, named in `pg_stat_activity`.

    A connection goes back to the pool without asyncpg's default reset query (`RESET ALL; UNLISTEN *;
    CLOSE ALL; pg_advisory_unlock_all()`): that is a round trip on every borrow, as much as the statement
    itself (bench/pool_throughput.py), to undo session state nothing here sets. Pooled connections never
    SET session variables, take session advisory locks or keep cursors, and a LISTEN is removed before its
    connection is released. asyncpg still rolls back a transaction left open.

    asyncpg's own pool (issue 37 measured the LendingPool that stood in front of it: bench/README.md).
    """
    pool: asyncpg.Pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        timeout=connect_timeout,
        command_timeout=command_timeout,
        server_settings={"application_name": application_name},
        reset=_keep_session,
    )
    return pool


async def _keep_session(_connection: asyncpg.Connection) -> None:
    """No reset query on release (see create_pool); asyncpg's own rollback of an open transaction runs first."""


async def apply_migrations(dsn: str, *, connect_timeout: float = 5.0) -> list[Migration]:
    """Apply pending migrations over a connection of their own; return what this call applied."""
    connection = await asyncpg.connect(
        dsn, timeout=connect_timeout, server_settings={"application_name": "thermostat:migrations"}
    )
    try:
        return await migrate(connection)
    finally:
        await connection.close()


class Store:
    """The main pool, the lease store on its own pool, and the health ping."""

    def __init__(self, pool: asyncpg.Pool, lease_pool: asyncpg.Pool, *, ping_timeout: float = 1.0) -> None:
        self.pool = pool
        self.leases = LeaseStore(lease_pool)
        self._lease_pool = lease_pool
        self._ping_timeout = ping_timeout

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        run_migrations: bool = True,
        min_size: int = 1,
        max_size: int = 10,
        lease_pool_size: int = 2,
        connect_timeout: float = 5.0,
        lease_statement_timeout: float = 5.0,
        ping_timeout: float = 1.0,
        application_name: str = "thermostat",
    ) -> Store:
        if run_migrations:
            applied = await apply_migrations(dsn, connect_timeout=connect_timeout)
            if applied:
                _log.info("migrated to %s", applied[-1].file_name)
        pool = await create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            connect_timeout=connect_timeout,
            application_name=application_name,
        )
        try:
            lease_pool = await create_pool(
                dsn,
                min_size=1,
                max_size=lease_pool_size,
                connect_timeout=connect_timeout,
                # A lease statement is a single-row write; anything slower is a stalled store. Its own bound, not
                # the connect bound: a slow connect allowed for must not let a stalled lease write hold a keeper.
                command_timeout=lease_statement_timeout,
                application_name=f"{application_name}:leases",
            )
        except BaseException:
            await pool.close()
            raise
        return cls(pool, lease_pool, ping_timeout=ping_timeout)

    async def ping(self) -> bool:
        """True when a connection of the lease pool answered `SELECT 1` within the ping timeout. Not the main pool:
        under load every one of its connections is busy and its waiters queue, so a ping there timed out behind
        the jobs' statements and turned a busy service NOT_SERVING (the edge then routed around it)."""
        try:
            async with asyncio.timeout(self._ping_timeout), borrow(self._lease_pool) as connection:
                await connection.fetchval("SELECT 1")
        except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
            _log.debug("store ping failed: %r", error)
            return False
        return True

    async def close(self, timeout: float = 5.0) -> None:
        """Close both pools; past `timeout` (a connection still held, or a dead link), terminate them.

        asyncpg's graceful close waits for every acquired connection to come back, so one statement stuck on
        a half-open link would hold a shutdown forever.
        """
        try:
            await asyncio.wait_for(asyncio.gather(self.pool.close(), self._lease_pool.close()), timeout)
        except TimeoutError:
            _log.warning("store pools did not close within %.0fs; terminating their connections", timeout)
            self.pool.terminate()
            self._lease_pool.terminate()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
