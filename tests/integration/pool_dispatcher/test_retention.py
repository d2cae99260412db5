"""Retention on real Postgres: finished jobs, acknowledged usage events and dead machines' events past the
retention are deleted in bounded batches, by the one holder of the retention lease; a pruned job answers that it
expired.

Rows are written as the pool leaves them (a finished job unowned, a usage event, a machine row inserted then
deleted, whose trigger records its boot and stop); time is the pruner's FakeClock, a day and more after the
database clock stamped them. Orderings between two pruners are held at the repository's delete (a wrapped method)
and at the database's own row locks, never by sleeping.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import grpc
import pytest

from tests.fixtures.clock import FakeClock
from tests.fixtures.polling import eventually
from tests.fixtures.postgres import open_store
from tests.integration.pool_dispatcher.conftest import caller, pool_env, start_pool
from thermostat.policy.pool.machine_type import Catalogue
from thermostat.policy.pool.retention import BatchSize, mint_job_id
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc
from thermostat.pool_dispatcher.internal import PoolInternalServicer
from thermostat.pool_dispatcher.metering_repository import PoolMeteringRepository
from thermostat.pool_dispatcher.metrics import PoolMetrics
from thermostat.pool_dispatcher.repository.retention import Fence, PrunedTable, RetentionRepository
from thermostat.pool_dispatcher.repository.retention import Q as RETENTION_SQL
from thermostat.pool_dispatcher.retention import LEASE, RetentionPruner
from thermostat.store.db import Store
from thermostat.store.keeper import LeaseKeeper

DAY = timedelta(hours=24)


def later(hours: float = 25) -> FakeClock:
    """A clock whose wall time is `hours` after now: what the database stamped now is that old."""
    return FakeClock(wall=datetime.now(UTC) + timedelta(hours=hours))


def pruner(store: Store, clock: FakeClock, holder: str = "a", *, rows: int = 500, **kwargs: Any) -> RetentionPruner:
    return RetentionPruner(
        RetentionRepository(store.pool),
        store.leases,
        holder=holder,
        retention=DAY,
        every_seconds=10,
        lease_seconds=30,
        batch=BatchSize(rows=rows, floor=min(50, rows), ceiling=rows),
        clock=clock,
        **kwargs,
    )


async def finished_job(
    conn: asyncpg.Connection, *, state: str = "completed", ago: timedelta = timedelta(0), **cols: Any
) -> uuid.UUID:
    """A job as the pool leaves it finished: unowned, its end stamped `ago` before the database's now."""
    job_id = mint_job_id(now=datetime.now(UTC) - ago, random=uuid.uuid4().bytes[:10])
    owner = cols.get("owner")
    await conn.execute(
        "INSERT INTO pool_jobs (id, tenant_id, machine_type, state, timeout_seconds, result, submitted_at,"
        " completed_at, owner, owner_term) VALUES ($1, 'acme', 'cpu', $2, 30, 'r', now() - $3::interval,"
        " now() - $3::interval, $4, $5)",
        job_id,
        state,
        ago,
        owner,
        1 if owner else None,
    )
    return job_id


async def usage_event(conn: asyncpg.Connection) -> int:
    position: int = await conn.fetchval(
        "INSERT INTO pool_usage (job_id, tenant_id, machine_type, worker_id, terminal_state, duration_seconds,"
        " started_at, ended_at) VALUES ($1, 'acme', 'cpu', $2, 'completed', 1, now(), now()) RETURNING position",
        uuid.uuid4(),
        uuid.uuid4(),
    )
    return position


async def machine_life(conn: asyncpg.Connection, *, dies: bool = True) -> uuid.UUID:
    """A machine row inserted (its boot event) and, when it `dies`, deleted (its stop event), by the pool's trigger."""
    machine_id = uuid.uuid4()
    await conn.execute(
        "INSERT INTO pool_machines (id, tenant_id, machine_type, image, backend, token, state, owner, owner_term,"
        " cool_down_seconds) VALUES ($1, 'acme', 'cpu', 'img', 'local', 'tok', 'warm', 'me', 1, 60)",
        machine_id,
    )
    if dies:
        await conn.execute("DELETE FROM pool_machines WHERE id = $1", machine_id)
    return machine_id


async def acknowledge(store: Store, feed: str, position: int) -> None:
    """Metering's ledger landed `feed` through `position` (what its page request says)."""
    await PoolMeteringRepository(store.pool).acknowledge(feed, position)


async def lead(store: Store, clock: FakeClock, holder: str) -> LeaseKeeper:
    keeper = LeaseKeeper(store.leases, name=LEASE, holder=holder, ttl=30, clock=clock)
    assert await keeper.acquire() is not None
    return keeper


async def ids(conn: asyncpg.Connection, query: str) -> set[Any]:
    return {r[0] for r in await conn.fetch(query)}


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await open_store(database_url, max_size=8, application_name="retention-tests")
    yield opened
    await opened.close()


# what goes and what stays


async def test_finished_jobs_past_the_retention_are_deleted_and_every_other_job_kept(store: Store) -> None:
    """Finished and unowned, ended over a day ago: deleted with its result. Younger, live, or a cancelled job whose
    machine has not answered yet (its usage still to be recorded): kept."""
    clock = later(hours=0)
    async with store.pool.acquire() as conn:
        old = {
            await finished_job(conn, state=s, ago=DAY + timedelta(hours=1))
            for s in ("completed", "failed", "timed_out", "cancelled")
        }
        young = await finished_job(conn, ago=DAY - timedelta(hours=1))
        running_cancel = await finished_job(conn, state="cancelled", ago=DAY * 2, owner="me")
        queued = await conn.fetchval(
            "INSERT INTO pool_jobs (id, tenant_id, machine_type, state, timeout_seconds, submitted_at)"
            " VALUES ($1, 'acme', 'cpu', 'queued', 30, now() - interval '3 days') RETURNING id",
            uuid.uuid4(),
        )
    prune = pruner(store, clock)
    keeper = await lead(store, clock, "a")
    await prune.prune_once(keeper)
    async with store.pool.acquire() as conn:
        assert await ids(conn, "SELECT id FROM pool_jobs") == {young, running_cancel, queued}
    assert prune.pruned[PrunedTable.JOBS] == len(old)
    await keeper.release()


async def test_usage_events_wait_for_the_ledger_as_well_as_the_retention(store: Store) -> None:
    """Events a day old are kept until metering acknowledged them; then those at or before the position go."""
    async with store.pool.acquire() as conn:
        positions = [await usage_event(conn) for _ in range(4)]
    clock = later()
    prune = pruner(store, clock)
    keeper = await lead(store, clock, "a")
    await prune.prune_once(keeper)
    assert prune.pruned[PrunedTable.USAGE] == 0  # never acknowledged: every event kept
    await acknowledge(store, "usage", positions[1])
    await prune.prune_once(keeper)
    async with store.pool.acquire() as conn:
        assert sorted(await ids(conn, "SELECT position FROM pool_usage")) == positions[2:]
    # acknowledged, but inside the retention: kept
    await acknowledge(store, "usage", positions[-1])
    await pruner(store, later(hours=23)).prune_once(keeper)
    async with store.pool.acquire() as conn:
        assert sorted(await ids(conn, "SELECT position FROM pool_usage")) == positions[2:]
    await keeper.release()


async def test_a_dead_machines_boot_and_stop_go_together_and_a_live_machines_boot_stays(store: Store) -> None:
    async with store.pool.acquire() as conn:
        alive = await machine_life(conn, dies=False)
        dead = [await machine_life(conn) for _ in range(2)]
        unacknowledged = await machine_life(conn)
        through = await conn.fetchval(
            "SELECT position FROM pool_machine_events WHERE machine_id = $1 AND event = 'stopped'", dead[-1]
        )
    await acknowledge(store, "machines", through)
    clock = later()
    prune = pruner(store, clock)
    keeper = await lead(store, clock, "a")
    await prune.prune_once(keeper)
    async with store.pool.acquire() as conn:
        left = await conn.fetch("SELECT machine_id, event FROM pool_machine_events ORDER BY position")
    assert [(r["machine_id"], r["event"]) for r in left] == [
        (alive, "started"),
        (unacknowledged, "started"),
        (unacknowledged, "stopped"),
    ]
    assert prune.pruned[PrunedTable.MACHINE_EVENTS] == 4
    await keeper.release()


async def test_every_delete_is_bounded_by_the_batch_and_the_backlog_is_worked_off(store: Store) -> None:
    """250 prunable jobs at 100 rows a statement: three statements, none over 100 rows, nothing left behind."""
    async with store.pool.acquire() as conn:
        for _ in range(250):
            await finished_job(conn, ago=DAY * 2)
    clock = later(hours=0)
    prune = pruner(store, clock, rows=100)
    sizes: list[int] = []
    real = prune.repository.prune

    async def counted(table: PrunedTable, keys: Any, fence: Fence) -> int:
        if table is PrunedTable.JOBS:
            sizes.append(len(keys))
        return await real(table, keys, fence)

    prune.repository.prune = counted  # type: ignore[method-assign]
    keeper = await lead(store, clock, "a")
    pauses = [await prune.prune_once(keeper) for _ in range(3)]
    assert sizes == [100, 100, 50]
    assert pauses[-1] == 10  # caught up: the pass interval
    assert prune.pruned[PrunedTable.JOBS] == 250
    await keeper.release()


async def test_the_metric_counts_rows_pruned_by_table(store: Store) -> None:
    metrics = PoolMetrics()
    async with store.pool.acquire() as conn:
        for _ in range(3):
            await finished_job(conn, ago=DAY * 2)
    clock = later(hours=0)
    keeper = await lead(store, clock, "a")
    await pruner(store, clock, metrics=metrics).prune_once(keeper)
    assert metrics.pruned.labels(table="pool_jobs")._value.get() == 3
    assert metrics.pruned.labels(table="pool_usage")._value.get() == 0
    await keeper.release()


# two pruners: the orderings


async def test_only_the_lease_holder_deletes(store: Store) -> None:
    """B cannot lead while A's lease is live; a fence of B's own making (no lease) deletes nothing."""
    async with store.pool.acquire() as conn:
        job = await finished_job(conn, ago=DAY * 2)
    clock = later(hours=0)
    a = await lead(store, clock, "a")
    b = LeaseKeeper(store.leases, name=LEASE, holder="b", ttl=30, clock=clock)
    assert await b.acquire() is None
    deleted = await RetentionRepository(store.pool).prune(
        PrunedTable.JOBS, [job], Fence(name=LEASE, holder="b", term=1)
    )
    assert deleted == 0
    await pruner(store, clock, "a").prune_once(a)
    async with store.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM pool_jobs") == 0
    await a.release()


async def test_a_pruner_whose_lease_was_taken_over_mid_batch_deletes_nothing(store: Store) -> None:
    """A reads its batch, stalls past its lease; B takes the lease over and deletes the batch; A's delete, landing
    after, finds its fence gone and deletes nothing: each row deleted once, by the holder of the day."""
    async with store.pool.acquire() as conn:
        jobs = {await finished_job(conn, ago=DAY * 2) for _ in range(5)}
    clock = later(hours=0)
    a_keeper = await lead(store, clock, "a")
    a = pruner(store, clock, "a")
    read = asyncio.Event()
    go = asyncio.Event()
    real = a.repository.prune

    async def stalled(table: PrunedTable, keys: Any, fence: Fence) -> int:
        if table is PrunedTable.JOBS:
            read.set()
            await go.wait()
        return await real(table, keys, fence)

    a.repository.prune = stalled  # type: ignore[method-assign]
    a_pass = asyncio.create_task(a.prune_batch(PrunedTable.JOBS, fence_of(a_keeper)))
    await read.wait()
    async with store.pool.acquire() as conn:  # A's lease lapses by the database clock
        await conn.execute("UPDATE leases SET expires_at = now() - interval '1 second' WHERE name = $1", LEASE)
    b_keeper = await lead(store, clock, "b")
    b = pruner(store, clock, "b")
    await b.prune_batch(PrunedTable.JOBS, fence_of(b_keeper))
    go.set()
    await a_pass
    assert (a.pruned[PrunedTable.JOBS], b.pruned[PrunedTable.JOBS]) == (0, len(jobs))
    await b_keeper.release()


async def test_a_takeover_waits_for_the_delete_in_flight(store: Store) -> None:
    """A's delete holds the lease row while it runs; B's takeover of the lapsed lease waits for it to commit, so the
    two never delete at once: A deletes its batch, B (leading after) finds nothing of it left."""
    async with store.pool.acquire() as conn:
        jobs = [await finished_job(conn, ago=DAY * 2) for _ in range(3)]
    clock = later(hours=0)
    a_keeper = LeaseKeeper(store.leases, name=LEASE, holder="a", ttl=1, clock=clock)
    assert await a_keeper.acquire() is not None
    a = pruner(store, clock, "a")
    async with store.pool.acquire() as blocker, blocker.transaction():
        # the test holds one of the batch's rows, so A's delete (its fence already taken) waits on it
        await blocker.execute("SELECT 1 FROM pool_jobs WHERE id = $1 FOR UPDATE", jobs[0])
        a_delete = asyncio.create_task(a.prune_batch(PrunedTable.JOBS, fence_of(a_keeper)))
        await waiting_on_a_lock(store, "DELETE FROM pool_jobs")
        await eventually(lambda: lapsed(store), timeout=10, every=0.05)  # A's lease has expired by the db clock
        b_acquire = asyncio.create_task(store.leases.acquire(LEASE, "b", 30))
        await waiting_on_a_lock(store, "INSERT INTO leases")
        assert not b_acquire.done() and not a_delete.done()
    await a_delete
    b_lease = await b_acquire
    assert b_lease is not None and b_lease.term == a_keeper.lease.term + 1  # type: ignore[union-attr]
    b = pruner(store, clock, "b")
    await b.prune_batch(PrunedTable.JOBS, Fence(name=LEASE, holder="b", term=b_lease.term))
    assert (a.pruned[PrunedTable.JOBS], b.pruned[PrunedTable.JOBS]) == (3, 0)
    await a_keeper.release()


def fence_of(keeper: LeaseKeeper) -> Fence:
    lease = keeper.lease
    assert lease is not None
    return Fence(name=lease.name, holder=lease.holder, term=lease.term)


async def lapsed(store: Store) -> bool | None:
    async with store.pool.acquire() as conn:
        return True if await conn.fetchval("SELECT expires_at <= now() FROM leases WHERE name = $1", LEASE) else None


async def waiting_on_a_lock(store: Store, statement: str) -> None:
    """Until a backend running `statement` waits on a lock (the database's own word for it, pg_stat_activity)."""

    async def seen() -> bool | None:
        async with store.pool.acquire() as conn:
            found = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'"
                " AND pid <> pg_backend_pid()",
                statement,
            )
        return True if found else None

    await eventually(seen, timeout=20, every=0.02)


# the feed's acknowledgement and the expired answer


async def test_a_read_of_the_usage_feed_records_what_the_reader_acknowledged(store: Store) -> None:
    """The acknowledgement never goes back, and may not pass the position the reader asks after."""
    servicer = PoolInternalServicer(PoolMeteringRepository(store.pool), Catalogue, settle_seconds=10)
    server = grpc.aio.server()
    pool_pb2_grpc.add_PoolDispatcherInternalServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pool_pb2_grpc.PoolDispatcherInternalStub(channel)
            for after in (7, 3):
                await stub.ListUsageEvents(
                    pool_pb2.ListUsageEventsRequest(after_position=after, acknowledged_position=after)
                )
            async with store.pool.acquire() as conn:
                assert await conn.fetchval("SELECT position FROM pool_feed_acks WHERE feed = 'usage'") == 7
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.ListMachineEvents(
                    pool_pb2.ListMachineEventsRequest(after_position=2, acknowledged_position=5)
                )
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "acknowledged_position must not pass after_position" in (refused.value.details() or "")
    finally:
        await server.stop(0)


async def test_a_pruned_job_answers_not_found_saying_it_expired(store: Store) -> None:
    """A job run, then pruned a day later: GET and cancel answer NOT_FOUND with the expired detail; an id minted now
    that no job ever had answers the plain not-found."""
    clock = later()
    async with start_pool(store, pool_env(), clock=clock, sleep=asyncio.sleep) as pool:
        body, _ = await pool.run(b"once")
        assert body == b"once"
        async with store.pool.acquire() as conn:
            job_id = str(await conn.fetchval("SELECT id FROM pool_jobs"))
        await eventually(lambda: holds(store), timeout=10)  # the pool's own pruner leads: prune as it does
        clock.advance(10)
        await eventually(lambda: gone(store, job_id), timeout=20, every=0.05)
        for call in (
            pool.stub.GetJob(pool_pb2.GetJobRequest(id=job_id), metadata=caller()),
            pool.stub.CancelJob(pool_pb2.CancelJobRequest(id=job_id, build_id="b-1"), metadata=caller()),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await call
            assert missing.value.code() is grpc.StatusCode.NOT_FOUND
            assert missing.value.details() == f"job {job_id} expired: finished jobs and their results are kept 24 hours"
        never = str(mint_job_id(now=clock.now(), random=bytes(10)))
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await pool.stub.GetJob(pool_pb2.GetJobRequest(id=never), metadata=caller())
        assert (missing.value.code(), missing.value.details()) == (grpc.StatusCode.NOT_FOUND, "no such job")


async def holds(store: Store) -> bool | None:
    return True if await store.leases.holder(LEASE) is not None else None


async def gone(store: Store, job_id: str) -> bool | None:
    async with store.pool.acquire() as conn:
        return (
            True
            if await conn.fetchval("SELECT count(*) FROM pool_jobs WHERE id = $1", uuid.UUID(job_id)) == 0
            else None
        )


# the scans stay index scans


def plan_nodes(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    """Every node of an EXPLAIN plan: its type and the index (or, for a sequential scan, the table) it reads."""
    nodes = [(plan["Node Type"], plan.get("Index Name") or plan.get("Relation Name"))]
    for child in plan.get("Plans", []):
        nodes += plan_nodes(child)
    return nodes


FENCE = {"lease_name": LEASE, "lease_holder": "a", "lease_term": 1}
PLANNED: dict[str, tuple[dict[str, object], str]] = {
    "finished_jobs": ({"limit": 500}, "pool_jobs_finished"),
    "oldest_usage": ({"limit": 500}, "pool_usage_pkey"),
    "oldest_machine_stops": ({"limit": 500}, "pool_machine_events_pkey"),
    "prune_jobs": ({"keys": [uuid.UUID(int=9)], **FENCE}, "pool_jobs_pkey"),
    "prune_usage": ({"keys": [1, 2], **FENCE}, "pool_usage_pkey"),
    "prune_machine_events": ({"keys": [uuid.UUID(int=9)], **FENCE}, "pool_machine_events_machine_id_event_key"),
}


@pytest.mark.parametrize("block", sorted(PLANNED))
async def test_each_prune_statement_reads_an_index_never_the_whole_table(store: Store, block: str) -> None:
    """With thousands of live rows beside the finished ones, each candidate read walks its index in order and each
    delete looks its rows up by key: the pruner's cost follows the batch, never the table."""
    args, index = PLANNED[block]
    async with store.pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO pool_jobs (id, tenant_id, machine_type, state, timeout_seconds, completed_at)"
            " SELECT gen_random_uuid(), 'acme', 'cpu', CASE WHEN n % 2 = 0 THEN 'completed' ELSE 'queued' END, 30,"
            " CASE WHEN n % 2 = 0 THEN now() - n * interval '1 second' END FROM generate_series(1, 5000) n"
        )
        await conn.execute(
            "INSERT INTO pool_machine_events (machine_id, tenant_id, machine_type, event, at)"
            " SELECT gen_random_uuid(), 'acme', 'cpu', CASE WHEN n % 2 = 0 THEN 'stopped' ELSE 'started' END, now()"
            " FROM generate_series(1, 5000) n"
        )
        await conn.execute(
            "INSERT INTO pool_usage (job_id, tenant_id, machine_type, worker_id, terminal_state, duration_seconds,"
            " started_at, ended_at) SELECT gen_random_uuid(), 'acme', 'cpu', gen_random_uuid(), 'completed', 1, now(),"
            " now() FROM generate_series(1, 5000)"
        )
        await conn.execute("ANALYZE pool_jobs, pool_usage, pool_machine_events")
        sql, *values = RETENTION_SQL.bind(block, **args)
        plan = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *values)
    nodes = plan_nodes(json.loads(plan)[0]["Plan"] if isinstance(plan, str) else plan[0]["Plan"])
    assert any(kind.startswith("Index") and name == index for kind, name in nodes), nodes
    assert not [name for kind, name in nodes if kind == "Seq Scan" and name != "leases"], nodes
