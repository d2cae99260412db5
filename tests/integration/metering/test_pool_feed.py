"""The pool's usage events land in the ledger exactly once: across pages, a crash between read and write, a
replayed page, and a position a transaction still in flight fills after a later one committed."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg
import grpc
import pytest

from tests.fixtures.services import INTERNAL_TOKEN
from tests.integration.metering.conftest import crash_on_page
from tests.integration.pool_dispatcher.conftest import pool_env, sleepy_type, start_pool
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.request_context import insecure_channel
from thermostat.metering.ledger import POOL_USAGE, AfterRead, Ledger, PoolUsageFeed, _nothing
from thermostat.metering.repository import MeteringRepository
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc
from thermostat.store.db import Store

POOL_ENV = pool_env([sleepy_type()], **{INTERNAL_TOKEN_ENV: INTERNAL_TOKEN})


@contextlib.asynccontextmanager
async def pool_ledger(
    address: str, store: Store, *, page_size: int = 7, after_read: AfterRead = _nothing
) -> AsyncIterator[tuple[Ledger, PoolUsageFeed, MeteringRepository]]:
    """A ledger reading only the pool's feed, as metering runs it (a new one is a restarted metering)."""
    async with insecure_channel(address, internal_token=INTERNAL_TOKEN) as channel:
        feed = PoolUsageFeed(pool_pb2_grpc.PoolDispatcherInternalStub(channel), timeout=10)
        repository = MeteringRepository(store.pool)
        yield Ledger(repository, [feed], page_size=page_size, after_read=after_read), feed, repository


async def write_usage(pool: asyncpg.Pool | asyncpg.Connection, count: int, *, tenant: str = "acme") -> None:
    """`count` usage events of one-second jobs, as the pool records them, in one statement."""
    await pool.execute(
        """INSERT INTO pool_usage (job_id, tenant_id, machine_type, worker_id, terminal_state, duration_seconds,
                                   started_at, ended_at)
        SELECT gen_random_uuid(), $1, 'sleepy', gen_random_uuid(), 'completed', 1.0,
               now() + make_interval(secs => g), now() + make_interval(secs => g + 1)
        FROM generate_series(1, $2) AS g""",
        tenant,
        count,
    )


async def ledger_jobs(pool: asyncpg.Pool) -> list[str]:
    rows = await pool.fetch("SELECT source_id FROM ledger_pool_usage WHERE source = $1 ORDER BY position", POOL_USAGE)
    return [r["source_id"] for r in rows]


async def pool_jobs(pool: asyncpg.Pool) -> list[str]:
    """The pool's own rows, in feed order: what the ledger must hold exactly once."""
    return [str(r["job_id"]) for r in await pool.fetch("SELECT job_id FROM pool_usage ORDER BY position")]


async def stored_position(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval("SELECT position FROM ledger_feeds WHERE source = $1", POOL_USAGE) or 0)


async def test_jobs_the_pool_ran_land_once_with_the_durations_it_recorded(db_store: Store) -> None:
    """Five jobs run on real workers, read two at a time: every job once, the summed durations the pool's own."""
    async with start_pool(db_store, POOL_ENV) as pool:
        for tenant in ("acme", "acme", "globex", "acme", "globex"):
            await pool.run(b"0", tenant=tenant, machine_type="sleepy")
        async with pool_ledger(pool.address, db_store, page_size=2) as (ledger, feed, _):
            assert await ledger.catch_up(feed) == 5
    assert await ledger_jobs(db_store.pool) == await pool_jobs(db_store.pool)
    billed = await db_store.pool.fetchval("SELECT sum(duration_seconds) FROM ledger_pool_usage")
    assert billed == await db_store.pool.fetchval("SELECT sum(duration_seconds) FROM pool_usage")
    tenants = await db_store.pool.fetch("SELECT tenant_id, count(*) FROM ledger_pool_usage GROUP BY 1 ORDER BY 1")
    assert [(r[0], r[1]) for r in tenants] == [("acme", 3), ("globex", 2)]


async def test_a_crash_between_read_and_write_and_a_replayed_page_change_nothing(db_store: Store) -> None:
    """A metering that dies after reading its third page lands the first two; a restarted one lands the rest
    once, and the first page landed again afterwards adds nothing and leaves the position at the head."""
    await write_usage(db_store.pool, 30)
    async with start_pool(db_store, POOL_ENV) as pool:
        async with pool_ledger(pool.address, db_store, after_read=crash_on_page(3)) as (ledger, feed, _):
            with pytest.raises(SystemExit):
                await ledger.catch_up(feed)
        assert (len(await ledger_jobs(db_store.pool)), await stored_position(db_store.pool)) == (14, 14)
        async with pool_ledger(pool.address, db_store) as (ledger, feed, repository):
            assert await ledger.catch_up(feed) == 16
            first = await feed.read(0, 7)
            assert await feed.land(repository, first) == 0
    assert await ledger_jobs(db_store.pool) == await pool_jobs(db_store.pool)
    assert await stored_position(db_store.pool) == 30


async def test_a_position_still_in_flight_is_waited_for_not_skipped(db_store: Store) -> None:
    """One transaction takes position 1 and holds it; another commits position 2. The feed stops before 1 (a
    reader storing 2 would never see 1); once 1 commits, both land, in order."""
    async with start_pool(db_store, POOL_ENV) as pool, pool_ledger(pool.address, db_store) as (ledger, feed, _):
        async with db_store.pool.acquire() as slow:
            in_flight = slow.transaction()
            await in_flight.start()
            await write_usage(slow, 1, tenant="slow")
            await write_usage(db_store.pool, 1, tenant="fast")
            assert await ledger.catch_up(feed) == 0
            assert await stored_position(db_store.pool) == 0
            await in_flight.commit()
        assert await ledger.catch_up(feed) == 2
    tenants = await db_store.pool.fetch("SELECT tenant_id FROM ledger_pool_usage ORDER BY position")
    assert [r[0] for r in tenants] == ["slow", "fast"]


async def test_a_position_that_never_commits_is_read_through_after_the_settle_window(db_store: Store) -> None:
    """A rolled-back transaction consumed position 1 for good: once the window has passed, 2 is read."""
    env = {**POOL_ENV, "POOL_USAGE_SETTLE_SECONDS": "5"}
    with contextlib.suppress(RuntimeError):
        async with db_store.pool.acquire() as rolled_back, rolled_back.transaction():
            await write_usage(rolled_back, 1)
            raise RuntimeError("rolled back: position 1 is gone")
    async with start_pool(db_store, env) as pool, pool_ledger(pool.address, db_store) as (ledger, feed, _):
        await write_usage(db_store.pool, 1)
        assert await ledger.catch_up(feed) == 0
        # the row after the gap was recorded longer ago than the window
        await db_store.pool.execute("UPDATE pool_usage SET recorded_at = recorded_at - interval '6 seconds'")
        assert await ledger.catch_up(feed) == 1
    assert await ledger_jobs(db_store.pool) == await pool_jobs(db_store.pool)
    assert await stored_position(db_store.pool) == 2


async def test_the_feed_answers_only_with_the_internal_token(db_store: Store) -> None:
    """ListUsageEvents is internal: neither no token nor the pool's admin token reads it."""
    async with start_pool(db_store, POOL_ENV) as pool:
        for metadata in ((), (("authorization", "Bearer pool-admin-token-for-tests"),)):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await pool_pb2_grpc.PoolDispatcherInternalStub(pool.channel).ListUsageEvents(
                    pool_pb2.ListUsageEventsRequest(), metadata=metadata
                )
            assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
