"""Borrowing a pooled connection so that a deadline really ends the wait, and cheaply.

asyncpg's own `pool.acquire()` context returns a connection gracefully: after a cancelled statement it
first waits for the server to confirm the cancel, then resets the session. When the database has stopped
answering (a half-open link), both waits hang on the same dead link — a 0.3 s `asyncio.timeout` around a
ping measured 30 s. `borrow` drops a connection whose statement was interrupted instead: the pool opens a
fresh one on next demand, and the caller's deadline holds.

It is also the store's hot path (two borrows per pool job). asyncpg's acquire and release cost a few
coroutine layers, a new proxy, an inactivity timer armed and cancelled, and a Task per release
(`asyncio.shield`). `LendingPool` (what `create_pool` builds) keeps the connections it has checked out of
asyncpg's pool in a free list and lends them from there: a borrow that finds one takes it without
awaiting, and a healthy return puts it back (or hands it to the first waiter) without a Task. Everything
unusual goes through asyncpg's own release, which resets, rolls back or closes as it always did.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from types import TracebackType
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

__all__ = ["STORE_ERRORS", "TRANSIENT_STORE_ERRORS", "LendingPool", "borrow"]

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

_SLOT = None
"""What a waiter is handed instead of a connection when one was dropped: room to open a fresh one."""


class LendingPool(asyncpg.Pool):
    """asyncpg's pool behind a free list: at most `max_size` connections, waiters served first come first.

    Every checkout goes through the free list (`borrow`, and `acquire()`, which asyncpg's own `fetch`,
    `execute` ... use too), so nothing waits in asyncpg's queue while an idle connection sits here. A
    connection is *held* from the moment it is checked out of asyncpg's pool until it goes back: lent, or
    idle in the free list. Held connections never exceed `max_size`, and one that is dropped frees its slot
    for the first waiter, who opens a fresh connection.

    - `borrow` returns a healthy connection to the free list; one whose block was interrupted or broke is
      terminated (asyncpg takes its holder back and reconnects it on demand); one left inside a
      transaction goes back through asyncpg's release, which rolls it back.
    - `acquire()` / `release()` lend from the same free list but always give back through asyncpg's
      release (its reset and listener checks), for the rare callers that hold a connection for long.
    - A connection that died while idle here (a store restart) is detached by asyncpg; the next lend finds
      it unusable, forgets it and opens a fresh one.
    - `close()` gives the idle ones back and then closes asyncpg's pool, which waits for the lent ones;
      `terminate()` and `expire_connections()` reach the idle ones too.

    Unlike asyncpg's pool, an idle connection here is not closed on a timer after
    `max_inactive_connection_lifetime` (a pool stays at the size its busiest moment needed) nor after
    `max_queries` statements; but one idle here for longer than that lifetime is never lent again: it is closed
    and a fresh one opened, as a link a NAT or load balancer dropped while idle would hang its next statement.
    """

    __slots__ = (
        "_lend_closing",
        "_lend_direct",
        "_lend_free",
        "_lend_generation",
        "_lend_held",
        "_lend_idle_limit",
        "_lend_since",
        "_lend_waiters",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lend_free: collections.deque[PoolConnectionProxy] = collections.deque()
        self._lend_since: collections.deque[float] = collections.deque()  # when each in _lend_free came back
        self._lend_idle_limit = float(kwargs.get("max_inactive_connection_lifetime") or 0.0)  # 0: no limit
        self._lend_waiters: collections.deque[asyncio.Future[PoolConnectionProxy | None]] = collections.deque()
        self._lend_held = 0
        self._lend_closing = False
        self._lend_generation = 0
        # connections lent through acquire(), by id: one that dies while lent (asyncpg takes its holder back) frees its
        # slot when released, or when a lend finds the pool full (a caller that never releases a dead one: a LISTEN)
        self._lend_direct: dict[int, PoolConnectionProxy] = {}

    # --- lending ---------------------------------------------------------------------------------------

    async def lend(self, timeout: float | None = None) -> PoolConnectionProxy:
        """A connection: an idle one, else a fresh one while below `max_size`, else the next one returned."""
        free = self._lend_free
        while free:  # only ever non-empty while nobody waits
            connection = free.pop()  # the most recently used: its backend is warm
            since = self._lend_since.pop()
            fresh = not self._lend_idle_limit or time.monotonic() - since <= self._lend_idle_limit
            if fresh and _usable(connection):
                return connection
            _terminate(connection)  # died idle: asyncpg has (or now takes) its holder back
            self._lend_held -= 1
        if self._lend_closing:
            raise asyncpg.InterfaceError("pool is closing")
        if self._lend_held >= self.get_max_size():
            self._reclaim_dead()
        if self._lend_held < self.get_max_size():
            self._lend_held += 1
            return await self._open(timeout)
        waiter: asyncio.Future[PoolConnectionProxy | None] = asyncio.get_running_loop().create_future()
        self._lend_waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                lent = await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._hand_on(waiter.result())  # handed one just as this wait ended: the next waiter's
            else:
                _discard(self._lend_waiters, waiter)
            raise
        if lent is not _SLOT:
            if _usable(lent):
                return lent
            _terminate(lent)
        return await self._open(timeout)  # the slot is this caller's either way

    def give_back(self, connection: PoolConnectionProxy) -> bool:
        """Return a healthy connection without awaiting; False when it must go through `give_back_slowly`."""
        if self._lend_closing or not _usable(connection):
            return False
        self._hand_on(connection)
        return True

    async def give_back_slowly(self, connection: PoolConnectionProxy) -> None:
        """Through asyncpg's release (rollback, reset, close on expiry), then free the slot."""
        try:
            await asyncpg.Pool.release(self, connection)
        finally:
            self._free_slot()

    def drop(self, connection: PoolConnectionProxy) -> None:
        """Terminate a connection whose state is unknown; its slot goes to the first waiter."""
        _terminate(connection)
        self._free_slot()

    async def _open(self, timeout: float | None) -> PoolConnectionProxy:
        """Check a connection out of asyncpg's pool, on a slot already counted as held."""
        try:
            connection: PoolConnectionProxy = await asyncpg.Pool.acquire(self, timeout=timeout)
        except BaseException:
            self._free_slot()
            raise
        return connection

    def _hand_on(self, connection: PoolConnectionProxy | None) -> None:
        """A connection (or a free slot) to the first waiter still waiting, else to the free list."""
        waiters = self._lend_waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        if connection is _SLOT:
            self._lend_held -= 1
        elif self._lend_closing:
            self._lend_held -= 1  # close() is under way: asyncpg's close takes it from here
            _terminate(connection)
        else:
            self._lend_free.append(connection)
            self._lend_since.append(time.monotonic())

    def _free_slot(self) -> None:
        self._hand_on(_SLOT)

    def _reclaim_dead(self) -> None:
        """Free the slots of connections lent through acquire() that died while lent: asyncpg has taken their
        holders back, and a caller may never release them (a LISTEN connection lost with the store)."""
        for key, connection in list(self._lend_direct.items()):
            if _dead(connection):
                del self._lend_direct[key]  # a later release of it is asyncpg's no-op for a detached proxy
                self._free_slot()  # to the first waiter, who came first

    # --- asyncpg's surface -----------------------------------------------------------------------------

    def acquire(self, *, timeout: float | None = None) -> _Acquire:  # type: ignore[override]
        return _Acquire(self, timeout)

    async def release(self, connection: Any, *, timeout: float | None = None) -> None:
        key = id(connection)
        if key not in self._lend_direct:  # released twice, or not this pool's: asyncpg says which
            await asyncpg.Pool.release(self, connection, timeout=timeout)
            return
        del self._lend_direct[key]
        try:
            await asyncpg.Pool.release(self, connection, timeout=timeout)
        finally:
            self._free_slot()

    async def close(self) -> None:
        self._shut()
        idle, self._lend_free = list(self._lend_free), collections.deque()
        self._lend_since.clear()
        self._lend_held -= len(idle)
        try:
            await asyncio.gather(*(asyncpg.Pool.release(self, connection) for connection in idle))
        except BaseException:
            super().terminate()  # as asyncpg's close does when interrupted
            raise
        await super().close()

    def terminate(self) -> None:
        self._shut()
        idle, self._lend_free = list(self._lend_free), collections.deque()
        self._lend_since.clear()
        self._lend_held -= len(idle)
        super().terminate()

    async def expire_connections(self) -> None:
        self._lend_generation += 1
        idle, self._lend_free = list(self._lend_free), collections.deque()
        self._lend_since.clear()
        await super().expire_connections()
        for connection in idle:  # back through asyncpg, which replaces an expired connection on its next checkout
            await self.give_back_slowly(connection)

    def _shut(self) -> None:
        self._lend_closing = True
        waiters, self._lend_waiters = self._lend_waiters, collections.deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(asyncpg.InterfaceError("pool is closing"))


class _Acquire:
    """`LendingPool.acquire()`: awaitable, or an async context that releases through asyncpg."""

    __slots__ = ("_connection", "_pool", "_timeout")

    def __init__(self, pool: LendingPool, timeout: float | None) -> None:
        self._pool = pool
        self._timeout = timeout
        self._connection: PoolConnectionProxy | None = None

    async def _lend(self) -> PoolConnectionProxy:
        connection = await self._pool.lend(self._timeout)
        self._pool._lend_direct[id(connection)] = connection
        return connection

    def __await__(self) -> Any:
        return self._lend().__await__()

    async def __aenter__(self) -> PoolConnectionProxy:
        self._connection = await self._lend()
        return self._connection

    async def __aexit__(self, *_exc: object) -> None:
        connection, self._connection = self._connection, None
        await self._pool.release(connection)


class _Borrow:
    """The `borrow` context on a LendingPool: no await on a healthy return."""

    __slots__ = ("_connection", "_generation", "_pool")

    def __init__(self, pool: LendingPool) -> None:
        self._pool = pool

    async def __aenter__(self) -> PoolConnectionProxy:
        pool = self._pool
        self._generation = pool._lend_generation
        self._connection = connection = await pool.lend()
        return connection

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        pool, connection = self._pool, self._connection
        if exc_type is not None and issubclass(exc_type, _UNUSABLE):
            pool.drop(connection)
        elif self._generation != pool._lend_generation or not pool.give_back(connection):
            await pool.give_back_slowly(connection)


class _BorrowFromAsyncpg:
    """The `borrow` context on a plain asyncpg pool (one not built by `create_pool`)."""

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


def borrow(pool: asyncpg.Pool) -> _Borrow | _BorrowFromAsyncpg:
    """A connection from `pool`, dropped rather than returned if the block is interrupted or broken."""
    if type(pool) is LendingPool:
        return _Borrow(pool)
    return _BorrowFromAsyncpg(pool)


def _usable(connection: PoolConnectionProxy) -> bool:
    """Open and outside a transaction. A connection whose link died is detached from its proxy by asyncpg,
    whose methods then raise InterfaceError."""
    try:
        return not connection.is_closed() and not connection.is_in_transaction()
    except asyncpg.InterfaceError:
        return False


def _dead(connection: PoolConnectionProxy) -> bool:
    """Closed, or detached from its proxy by asyncpg when its link died (its methods then raise InterfaceError).
    Unlike `_usable`, a connection inside a transaction is alive."""
    try:
        return connection.is_closed()
    except asyncpg.InterfaceError:
        return True


def _terminate(connection: PoolConnectionProxy) -> None:
    with contextlib.suppress(asyncpg.InterfaceError):  # already detached: asyncpg closed it, took its holder back
        connection.terminate()


def _discard(waiters: collections.deque[Any], waiter: object) -> None:
    with contextlib.suppress(ValueError):
        waiters.remove(waiter)
