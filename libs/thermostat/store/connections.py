"""Borrowing a pooled connection so that a deadline really ends the wait.

asyncpg's own `pool.acquire()` context returns a connection gracefully: after a cancelled statement it
first waits for the server to confirm the cancel, then resets the session. When the database has stopped
answering (a half-open link), both waits hang on the same dead link — a 0.3 s `asyncio.timeout` around a
ping measured 30 s. `borrow` drops a connection whose statement was interrupted instead: the pool opens a
fresh one on next demand, and the caller's deadline holds.

It borrows from asyncpg's pool itself: a free list in front of it (the LendingPool) saved a few tens of
microseconds a borrow alone but nothing on the whole job, so issue 37 removed it (bench/README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

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

# Interrupted or broken: the session's state is unknown, so it is not worth a round trip to reset. (asyncpg
# raises InternalClientError when a statement finds the protocol mid-way through something else, as when the
# server's goodbye arrived on an idle connection whose close the client has not yet seen.)
_UNUSABLE = (
    asyncio.CancelledError,
    TimeoutError,
    OSError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.InternalClientError,
)


class _Borrow:
    """The `borrow` context: asyncpg's acquire, and its release unless the block was interrupted or broke."""

    __slots__ = ("_connection", "_pool")

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def __aenter__(self) -> PoolConnectionProxy:
        self._connection = connection = await self._pool.acquire()
        return connection

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None and issubclass(exc_type, _UNUSABLE):
            _terminate(self._connection)
        await self._pool.release(self._connection)  # a no-op for a terminated connection


def borrow(pool: asyncpg.Pool) -> _Borrow:
    """A connection from `pool`, dropped rather than returned if the block is interrupted or broken."""
    return _Borrow(pool)


def _terminate(connection: PoolConnectionProxy) -> None:
    with contextlib.suppress(asyncpg.InterfaceError):  # already detached: asyncpg closed it, took its holder back
        connection.terminate()
