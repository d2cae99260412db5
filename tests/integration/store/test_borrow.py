"""The store's pool (asyncpg's, as `create_pool` builds it) keeps every promise `borrow` makes.

A healthy connection is lent again; one whose statement was interrupted or broke is dropped, never reused;
one that died while idle is replaced; at most `max_size` are open; waiters are served first come first; a
deadline ends a wait; close() closes everything. (Issue 37 removed the LendingPool in front of asyncpg's pool:
its own mechanisms' tests went with it.)
"""

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from thermostat.store.connections import borrow
from thermostat.store.db import create_pool

GUARD = 5.0  # only a broken pool takes this long: a lost connection would hang the next borrow


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(database_url, min_size=1, max_size=2, application_name="lending-test")
    yield pool
    try:
        await asyncio.wait_for(pool.close(), GUARD)
    except TimeoutError:
        pool.terminate()
        raise


@pytest.fixture
async def admin(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(database_url)
    yield connection
    await connection.close()


async def backend(connection: object) -> int:
    pid: int = await connection.fetchval("SELECT pg_backend_pid()")  # type: ignore[attr-defined]
    return pid


async def open_backends(admin: asyncpg.Connection) -> set[int]:
    rows = await admin.fetch("SELECT pid FROM pg_stat_activity WHERE application_name = 'lending-test'")
    return {row["pid"] for row in rows}


async def test_a_healthy_connection_is_lent_again(pool):
    async with borrow(pool) as first:
        before = await backend(first)
    async with borrow(pool) as second:
        after = await backend(second)
    assert after == before


async def test_a_connection_whose_statement_hit_its_deadline_is_dropped_not_reused(pool):
    async with borrow(pool) as connection:
        interrupted = await backend(connection)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2), borrow(pool) as connection:
            await connection.execute("SELECT pg_sleep(30)")
    async with asyncio.timeout(GUARD), borrow(pool) as connection:
        replacement = await backend(connection)
    assert replacement != interrupted  # (its backend sleeps on until it finds the client gone)


async def test_a_cancelled_borrower_drops_its_connection(pool):
    started = asyncio.Event()
    slept: list[int] = []

    async def sleeper() -> None:
        async with borrow(pool) as connection:
            slept.append(await backend(connection))
            started.set()
            await connection.execute("SELECT pg_sleep(30)")

    task = asyncio.create_task(sleeper())
    await started.wait()
    async with borrow(pool) as other:
        busy_elsewhere = await backend(other)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    seen = set()
    for _ in range(3):  # max_size 2: every connection the pool lends now
        async with asyncio.timeout(GUARD), borrow(pool) as connection:
            seen.add(await backend(connection))
    assert seen == {busy_elsewhere}, "the cancelled one is gone; the idle one is lent while nothing else is out"
    assert slept[0] != busy_elsewhere


async def test_a_connection_that_broke_mid_statement_is_dropped(pool, admin):
    broken: list[int] = []

    async def statement_on_a_killed_backend() -> None:
        async with borrow(pool) as connection:
            broken.append(await backend(connection))
            await admin.execute("SELECT pg_terminate_backend($1)", broken[0])
            await connection.fetchval("SELECT pg_sleep(1)")

    broke = (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError, OSError)
    with pytest.raises(broke):
        await statement_on_a_killed_backend()
    async with asyncio.timeout(GUARD), borrow(pool) as connection:
        assert await backend(connection) != broken[0]


async def test_a_connection_that_died_while_idle_is_replaced_on_the_next_borrow(pool, admin):
    """As after a store restart: the backend is gone before anyone borrows its connection again."""
    async with borrow(pool) as connection:
        idle = await backend(connection)
    await admin.execute("SELECT pg_terminate_backend($1)", idle)
    async with asyncio.timeout(GUARD):
        while not _closed_in_pool(pool, idle):
            await asyncio.sleep(0.01)  # until the client has read the server's goodbye, however slow the machine
    async with asyncio.timeout(GUARD), borrow(pool) as connection:
        assert await connection.fetchval("SELECT 1") == 1
        assert await backend(connection) != idle


def _closed_in_pool(pool: asyncpg.Pool, pid: int) -> bool:
    """Whether the pool's idle connection to backend `pid` has seen its end (the proxy lent before is detached)."""
    return not any(
        h._con is not None and not h._con.is_closed() and h._con.get_server_pid() == pid for h in pool._holders
    )


async def test_a_transaction_left_open_is_rolled_back_before_the_connection_is_lent_again(pool):
    async with borrow(pool) as connection:
        await connection.execute("BEGIN")
        left_open = await backend(connection)
    async with borrow(pool) as connection:
        assert not connection.is_in_transaction()
        assert await backend(connection) == left_open


async def test_no_more_than_max_size_connections_are_ever_open(pool, admin):
    holding = asyncio.Event()
    release = asyncio.Event()
    pids: list[int] = []

    async def hold() -> None:
        async with borrow(pool) as connection:
            pids.append(await backend(connection))
            if len(pids) == 2:
                holding.set()
            await release.wait()

    tasks = [asyncio.create_task(hold()) for _ in range(2)]
    await holding.wait()
    third = asyncio.create_task(hold())
    await asyncio.sleep(0.1)
    assert not third.done(), "a third borrower waits while two connections are out"
    assert len(await open_backends(admin)) == 2
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks, third), GUARD)
    assert len(set(pids)) == 2


async def test_waiters_are_served_first_come_first_served(database_url):
    pool = await create_pool(database_url, min_size=1, max_size=1, application_name="lending-test")
    served: list[int] = []

    async def wait_turn(n: int) -> None:
        async with borrow(pool):
            served.append(n)

    try:
        async with borrow(pool):
            waiters = []
            for n in range(4):
                waiters.append(asyncio.create_task(wait_turn(n)))
                await asyncio.sleep(0)  # each queues before the next starts
        await asyncio.wait_for(asyncio.gather(*waiters), GUARD)
    finally:
        await asyncio.wait_for(pool.close(), GUARD)
    assert served == [0, 1, 2, 3]


async def test_a_deadline_ends_a_wait_for_a_connection(database_url):
    pool = await create_pool(database_url, min_size=1, max_size=1, application_name="lending-test")
    try:
        async with borrow(pool):
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1), borrow(pool):
                    pass
        async with asyncio.timeout(GUARD), borrow(pool) as connection:
            assert await connection.fetchval("SELECT 1") == 1
    finally:
        await asyncio.wait_for(pool.close(), GUARD)


async def wait_and_hold(pool: asyncpg.Pool) -> None:
    async with borrow(pool):
        await asyncio.sleep(30)


async def test_acquire_and_pool_statements_share_the_same_bound_and_queue(database_url):
    pool = await create_pool(database_url, min_size=1, max_size=1, application_name="lending-test")
    try:
        async with borrow(pool):
            with pytest.raises(TimeoutError):
                await pool.acquire(timeout=0.1)
        assert await asyncio.wait_for(pool.fetchval("SELECT 7"), GUARD) == 7
        async with pool.acquire() as connection:
            await connection.execute("BEGIN")
        async with asyncio.timeout(GUARD), borrow(pool) as connection:
            assert not connection.is_in_transaction()
    finally:
        await asyncio.wait_for(pool.close(), GUARD)


async def test_close_waits_for_lent_connections_then_closes_every_one(pool, admin):
    async with borrow(pool), borrow(pool) as second:
        await second.fetchval("SELECT 1")
    assert len(await open_backends(admin)) == 2
    lent = await pool.acquire()
    closing = asyncio.create_task(pool.close())
    await asyncio.sleep(0.1)
    assert not closing.done(), "close waits for the lent connection"
    with pytest.raises(asyncpg.InterfaceError):
        async with borrow(pool):
            pass
    await pool.release(lent)
    await asyncio.wait_for(closing, GUARD)
    while await open_backends(admin):
        await asyncio.sleep(0.01)


async def test_terminate_closes_idle_connections_at_once(pool, admin):
    async with borrow(pool) as connection:
        await connection.fetchval("SELECT 1")
    pool.terminate()
    async with asyncio.timeout(GUARD):
        while await open_backends(admin):
            await asyncio.sleep(0.01)


async def test_a_pool_of_one_opens_a_fresh_connection_after_each_drop(database_url):
    """A dropped connection gives its place back: with room for one, the next borrow still gets one, each time."""
    pool = await create_pool(database_url, min_size=1, max_size=1, application_name="lending-test")
    seen: list[int] = []
    try:
        for _ in range(3):
            async with asyncio.timeout(GUARD), borrow(pool) as connection:
                seen.append(await backend(connection))
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.1), borrow(pool) as connection:
                    await connection.execute("SELECT pg_sleep(30)")
    finally:
        await asyncio.wait_for(pool.close(), GUARD)
    assert len(set(seen)) == 3


async def _dead(connection: object) -> bool:
    try:
        return bool(connection.is_closed())  # type: ignore[attr-defined]
    except asyncpg.InterfaceError:  # detached by asyncpg when its link died
        return True


async def test_a_connection_lent_through_acquire_that_dies_unreleased_gives_its_place_back(database_url, admin):
    """As a LISTEN connection lost with the store, twice: its holder never releases it, yet the pool of one still
    lends, and a late release of the dead one does not free a second place."""
    pool = await create_pool(database_url, min_size=1, max_size=1, application_name="lending-test")
    try:
        lost = []
        for _ in range(2):
            listening = await asyncio.wait_for(pool.acquire(), GUARD)
            lost.append(listening)
            await admin.execute("SELECT pg_terminate_backend($1)", await backend(listening))
            async with asyncio.timeout(GUARD):
                while not await _dead(listening):
                    await asyncio.sleep(0.01)  # until the client has read the server's goodbye
            async with asyncio.timeout(GUARD), borrow(pool) as connection:
                assert await connection.fetchval("SELECT 1") == 1
        await pool.release(lost[0])
        async with borrow(pool):
            with pytest.raises(TimeoutError):  # still one place: the late release freed nothing
                async with asyncio.timeout(0.1), borrow(pool):
                    pass
    finally:
        await asyncio.wait_for(pool.close(), GUARD)
