"""Store: migrates on open, pings fast, and keeps leases working when the main pool is exhausted."""

import asyncio
import time
from urllib.parse import urlsplit

import pytest

from tests.fixtures.polling import eventually
from tests.fixtures.tcp_proxy import FreezableProxy
from thermostat.store.db import Store
from thermostat.store.migrations import discover_migrations

PING_TIMEOUT = 0.3
# A ping waits at most its timeout; on two loaded cores the timer can fire late by more than the timeout itself.
# Generous, yet short of what an unbounded ping would take: the lease pool's 5 s statement timeout, or forever.
PING_BOUND = 3.0


def through(proxy: FreezableProxy, dsn: str) -> str:
    parts = urlsplit(dsn)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@127.0.0.1:{proxy.port}" if credentials else f"127.0.0.1:{proxy.port}"
    return parts._replace(netloc=netloc).geturl()


async def reachable(store: Store) -> bool | None:
    return True if await store.ping() else None


async def test_open_applies_every_migration_to_a_fresh_database(empty_database_url):
    """A service starting against an empty database finds it migrated and reachable."""
    async with await Store.open(empty_database_url, max_size=2) as store:
        versions = await store.pool.fetch("SELECT version FROM schema_migrations ORDER BY version")
        assert await store.ping()
    assert [row["version"] for row in versions] == [m.version for m in discover_migrations()]


async def test_ping_fails_within_its_timeout_when_the_store_stops_answering(database_url):
    """A half-open path to the database (no reset, no answer) turns ping False in time, then True again."""
    target = urlsplit(database_url)
    async with FreezableProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        store = await Store.open(
            through(proxy, database_url), run_migrations=False, max_size=2, ping_timeout=PING_TIMEOUT
        )
        try:
            await eventually(lambda: reachable(store))  # reachable first: one 0.3 s ping can miss on a loaded machine
            proxy.freeze()
            started = time.monotonic()
            answered = await store.ping()
            elapsed = time.monotonic() - started
            proxy.thaw()
            recovered = await eventually(lambda: reachable(store))
        finally:
            proxy.thaw()
            await store.close()
    assert answered is False
    assert PING_TIMEOUT <= elapsed < PING_BOUND
    assert recovered


async def test_ping_is_false_once_the_store_is_closed(database_url):
    """A closed store is not a reachable store."""
    store = await Store.open(database_url, run_migrations=False, max_size=1)
    await store.close()
    assert await store.ping() is False


async def test_leases_keep_working_while_the_main_pool_is_exhausted(database_url):
    """Lease calls have their own connections: busy service queries cannot starve a renewal."""
    async with await Store.open(database_url, run_migrations=False, max_size=2) as store:
        held = [await store.pool.acquire() for _ in range(2)]
        try:
            async with asyncio.timeout(10):  # queued behind the held connections, they would wait forever
                lease = await store.leases.acquire("leader", "a", 30)
                renewed = await store.leases.renew(lease) if lease is not None else None
        finally:
            for connection in held:
                await store.pool.release(connection)
    assert lease is not None
    assert renewed is not None


async def test_ping_answers_while_the_main_pool_is_exhausted(database_url):
    """A busy service is a reachable one: with every connection of the main pool held (the jobs' statements under
    load), the ping still answers True within its timeout."""
    # a ping queued behind the held connections would wait out any timeout: one generous for a loaded machine
    async with await Store.open(database_url, run_migrations=False, max_size=2, ping_timeout=5.0) as store:
        held = [await store.pool.acquire() for _ in range(2)]
        try:
            answered = await store.ping()
        finally:
            for connection in held:
                await store.pool.release(connection)
    assert answered is True


async def test_a_lease_write_keeps_its_own_bound_whatever_the_connect_bound(database_url):
    """A store allowed 30 s to connect (as the tests' own are) still gives up a lease write stalled on a lock within
    its lease statement bound: a slow connect allowed for never lets a stalled lease write hold a keeper."""
    async with await Store.open(
        database_url, run_migrations=False, max_size=2, connect_timeout=30, lease_statement_timeout=0.5
    ) as store:
        lease = await store.leases.acquire("bounded", "holder-a", ttl=30)
        assert lease is not None
        async with store.pool.acquire() as blocker, blocker.transaction():
            await blocker.execute("SELECT 1 FROM leases WHERE name = 'bounded' FOR UPDATE")
            began = time.monotonic()
            with pytest.raises(TimeoutError):
                await store.leases.renew(lease)
            assert time.monotonic() - began < PING_BOUND
