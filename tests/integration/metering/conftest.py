"""What the metering tests share: a controller on the simulator (the feed's source), a ledger reading it over
gRPC, and a bulk writer of billable actions for volume (rows as the controller records them)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg

from tests.fixtures.services import RunningService
from thermostat.metering.ledger import POD_ACTIONS, AfterRead, Feed, Ledger, Page, PodActionFeed, _nothing
from thermostat.metering.repository import MeteringRepository
from thermostat.pods.v1 import pods_pb2_grpc
from thermostat.store.db import Store


@dataclass
class LedgerRig:
    ledger: Ledger
    feed: PodActionFeed
    repository: MeteringRepository


@contextlib.asynccontextmanager
async def ledger_on(
    controller: RunningService,
    store: Store,
    *,
    page_size: int = 7,
    after_read: AfterRead = _nothing,
    timeout: float = 10,
) -> AsyncIterator[LedgerRig]:
    """A ledger as metering runs it (a new one is a restarted metering: it keeps nothing in memory)."""
    async with controller.channel() as channel:
        feed = PodActionFeed(pods_pb2_grpc.PodControllerInternalStub(channel), timeout=timeout)
        repository = MeteringRepository(store.pool)
        yield LedgerRig(
            ledger=Ledger(repository, [feed], page_size=page_size, after_read=after_read),
            feed=feed,
            repository=repository,
        )


def crash_on_page(n: int) -> AfterRead:
    """An after_read hook that kills metering once it has read its `n`th page, before that page lands."""
    pages = 0

    async def crash(_feed: Feed, _page: Page) -> None:
        nonlocal pages
        pages += 1
        if pages == n:
            raise SystemExit("killed between read and write")

    return crash


async def write_actions(pool: asyncpg.Pool, count: int, *, pod_name: str = "qwen") -> None:
    """`count` billable actions (alternating Create/Stop of one pod per pair), numbered as the controller numbers
    them (the column default), in one statement."""
    await pool.execute(
        """
        INSERT INTO pod_actions (id, pod_name, action, pod_id, gpu_id, price_per_hour, http_status, ok, trigger, at)
        SELECT gen_random_uuid(), $1, CASE WHEN g % 2 = 1 THEN 'Create' ELSE 'Stop' END, 'pod-' || ((g + 1) / 2),
               'NVIDIA A100 80GB PCIe', CASE WHEN g % 2 = 1 THEN 1.5 END, 200, true,
               CASE WHEN g % 2 = 1 THEN 'wake' ELSE 'idle' END, now() + make_interval(secs => g)
        FROM generate_series(1, $2) AS g""",
        pod_name,
        count,
    )


async def ledger_ids(pool: asyncpg.Pool) -> list[str]:
    rows = await pool.fetch("SELECT source_id FROM ledger_pod_actions WHERE source = $1 ORDER BY position", POD_ACTIONS)
    return [r["source_id"] for r in rows]


async def feed_ids(pool: asyncpg.Pool) -> list[str]:
    """The controller's own rows, in feed order: what the ledger must hold exactly once."""
    return [str(r["id"]) for r in await pool.fetch("SELECT id FROM pod_actions ORDER BY position")]


async def stored_position(pool: asyncpg.Pool) -> int:
    value = await pool.fetchval("SELECT position FROM ledger_feeds WHERE source = $1", POD_ACTIONS)
    return int(value or 0)
