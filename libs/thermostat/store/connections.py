"""Borrowing a pooled connection so that a deadline really ends the wait.

asyncpg's own `pool.acquire()` context returns a connection gracefully: after a cancelled statement it
first waits for the server to confirm the cancel, then resets the session. When the database has stopped
answering (a half-open link), both waits hang on the same dead link — a 0.3 s `asyncio.timeout` around a
ping measured 30 s. `borrow` drops a connection whose statement was interrupted instead: the pool opens a
fresh one on next demand, and the caller's deadline holds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
from asyncpg.pool import PoolConnectionProxy

__all__ = ["STORE_ERRORS", "TRANSIENT_STORE_ERRORS", "borrow"]

STORE_ERRORS = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)
"""What a statement raises when the store is unreachable, too slow or refuses it."""

TRANSIENT_STORE_ERRORS = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,  # shutting down, restarting, not accepting connections yet
)
"""What a statement raises while the store is unreachable or restarting: the same write may land later."""

# Interrupted or broken: the session's state is unknown, so it is not worth a round trip to reset.
_UNUSABLE = (asyncio.CancelledError, TimeoutError, OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError)


@contextlib.asynccontextmanager
async def borrow(pool: asyncpg.Pool) -> AsyncIterator[PoolConnectionProxy]:
    """A connection from `pool`, dropped rather than returned if the block is interrupted or broken."""
    connection = await pool.acquire()
    try:
        yield connection
    except _UNUSABLE:
        connection.terminate()
        raise
    finally:
        await pool.release(connection)  # a no-op for a terminated connection
