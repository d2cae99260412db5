"""The ledger's ingest: one replica (the `metering:ingest` lease) reads each feed from its stored position and
lands every page exactly once (repository.py says how).

Each feed is a `Feed`: where it is read (its source name), how a page is read after a position, and how a
page lands. The pod controller's billable actions (`PodActionFeed`), the pool's usage events
(`PoolUsageFeed`) and machine boots and stops (`PoolMachineFeed`, both when POOL_DISPATCHER_ADDR is set) each
land in their own table, read by the same loop from
their own position. Each read of a pool feed acknowledges the stored position (everything at or before it has
landed), so the pool's retention deletes only events the ledger holds.

Lag is bounded and visible: a feed read until it returns less than a page, then every `poll_seconds`; each
read records the feed's head beside the stored position and a read that fails records why (keeping the last
successful read's time). GetLedgerStatus, metering's part of the edge's GET /health and the
`thermostat_ledger_lag_*` gauges show the entries behind and the seconds since the last successful read.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import grpc

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.request_context import outgoing_metadata
from thermostat.chassis.timestamps import from_timestamp
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc
from thermostat.store.keeper import LeaseKeeper
from thermostat.store.leader import LeaseLeader
from thermostat.store.lease import LeaseStore

from .metrics import MeteringMetrics
from .repository import LedgerAction, LedgerMachineEvent, LedgerUsage, MeteringRepository

log = logging.getLogger("thermostat.metering.ledger")

POD_ACTIONS = "pod-controller/billable-actions"
POOL_USAGE = "pool-dispatcher/usage"
POOL_MACHINES = "pool-dispatcher/machines"


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """One page read from a feed: its entries, the last position they reach, and the feed's head."""

    entries: Sequence[object]
    through: int
    head: int


class Feed(Protocol):
    source: str

    async def read(self, after: int, limit: int) -> Page: ...

    async def land(self, repository: MeteringRepository, page: Page) -> int: ...


class PodActionFeed:
    """The pod controller's billable actions, read over its internal RPC (never its tables)."""

    source = POD_ACTIONS

    def __init__(self, stub: pods_pb2_grpc.PodControllerInternalStub, *, timeout: float = 10.0) -> None:
        self.stub = stub
        self.timeout = timeout

    async def read(self, after: int, limit: int) -> Page:
        reply = await self.stub.ListBillableActions(
            pods_pb2.ListBillableActionsRequest(after_position=after, page_size=limit),
            timeout=self.timeout,
            # a controller restarting is waited for (within the timeout), not failed at once in its backoff
            wait_for_ready=True,
            metadata=outgoing_metadata(),
        )
        entries = [
            LedgerAction(
                source_id=b.action.id,
                position=b.position,
                pod_name=b.action.pod_name,
                action=b.action.action,
                pod_id=b.action.pod_id,
                ok=b.action.ok,
                trigger=b.action.trigger,
                at=from_timestamp(b.action.at),
                http_status=b.action.http_status or None,
                gpu_id=b.action.gpu_id or None,
                price_per_hour=b.action.price_per_hour or None,
            )
            for b in reply.actions
        ]
        through = entries[-1].position if entries else after
        return Page(entries=entries, through=through, head=max(reply.head_position, through))

    async def land(self, repository: MeteringRepository, page: Page) -> int:
        actions = [e for e in page.entries if isinstance(e, LedgerAction)]
        return await repository.land_pod_actions(self.source, actions, through=page.through, head=page.head)


class PoolUsageFeed:
    """The pool dispatcher's usage events, read over its internal RPC (never its tables)."""

    source = POOL_USAGE

    def __init__(self, stub: pool_pb2_grpc.PoolDispatcherInternalStub, *, timeout: float = 10.0) -> None:
        self.stub = stub
        self.timeout = timeout

    async def read(self, after: int, limit: int) -> Page:
        reply = await self.stub.ListUsageEvents(
            # `after` is the stored position, landed in the ledger: the pool may delete what lies at or before it
            pool_pb2.ListUsageEventsRequest(after_position=after, page_size=limit, acknowledged_position=after),
            timeout=self.timeout,
            wait_for_ready=True,
            metadata=outgoing_metadata(),
        )
        entries = [
            LedgerUsage(
                source_id=e.job_id,
                position=e.position,
                tenant_id=e.tenant_id,
                machine_type=e.machine_type,
                worker_id=e.worker_id,
                terminal_state=e.terminal_state,
                duration_seconds=e.duration_seconds,
                started_at=datetime.fromtimestamp(e.started_at, UTC),
                ended_at=datetime.fromtimestamp(e.ended_at, UTC),
            )
            for e in reply.events
        ]
        through = entries[-1].position if entries else after
        return Page(entries=entries, through=through, head=max(reply.head_position, through))

    async def land(self, repository: MeteringRepository, page: Page) -> int:
        events = [e for e in page.entries if isinstance(e, LedgerUsage)]
        return await repository.land_pool_usage(self.source, events, through=page.through, head=page.head)


class PoolMachineFeed:
    """The pool dispatcher's machine boots and stops, read over its internal RPC (never its tables)."""

    source = POOL_MACHINES

    def __init__(self, stub: pool_pb2_grpc.PoolDispatcherInternalStub, *, timeout: float = 10.0) -> None:
        self.stub = stub
        self.timeout = timeout

    async def read(self, after: int, limit: int) -> Page:
        reply = await self.stub.ListMachineEvents(
            pool_pb2.ListMachineEventsRequest(after_position=after, page_size=limit, acknowledged_position=after),
            timeout=self.timeout,
            wait_for_ready=True,
            metadata=outgoing_metadata(),
        )
        entries = [
            LedgerMachineEvent(
                position=e.position,
                machine_id=e.machine_id,
                tenant_id=e.tenant_id,
                machine_type=e.machine_type,
                event=e.event,
                at=datetime.fromtimestamp(e.at, UTC),
                price_per_hour=e.price_per_hour if e.HasField("price_per_hour") else None,
            )
            for e in reply.events
        ]
        through = entries[-1].position if entries else after
        return Page(entries=entries, through=through, head=max(reply.head_position, through))

    async def land(self, repository: MeteringRepository, page: Page) -> int:
        events = [e for e in page.entries if isinstance(e, LedgerMachineEvent)]
        return await repository.land_pool_machines(self.source, events, through=page.through, head=page.head)


AfterRead = Callable[[Feed, Page], Awaitable[None]]


async def _nothing(_feed: Feed, _page: Page) -> None:
    return None


class Ledger:
    def __init__(
        self,
        repository: MeteringRepository,
        feeds: Sequence[Feed],
        *,
        page_size: int = 1000,
        clock: Clock = SYSTEM_CLOCK,
        after_read: AfterRead = _nothing,
        metrics: MeteringMetrics | None = None,
    ) -> None:
        self.metrics = metrics or MeteringMetrics()
        self.repository = repository
        self.feeds = tuple(feeds)
        self.page_size = page_size
        self.clock = clock
        # between reading a page and landing it: where a test injects a crash (or a replay)
        self.after_read = after_read

    async def step(self, feed: Feed) -> int:
        """Read one page after the stored position and land it; how many entries it held."""
        after = await self.repository.position(feed.source)
        page = await feed.read(after, self.page_size)
        await self.after_read(feed, page)
        landed = await feed.land(self.repository, page)
        self.metrics.landed.labels(feed=feed.source).inc(landed)
        if page.entries:
            log.debug(
                "%s: %d entries read, %d new, through %d (head %d)",
                feed.source,
                len(page.entries),
                landed,
                page.through,
                page.head,
            )
        return len(page.entries)

    async def catch_up(self, feed: Feed) -> int:
        """Read pages until one comes back short; the entries read."""
        total = 0
        while True:
            count = await self.step(feed)
            total += count
            if count < self.page_size:
                return total

    async def run_once(self) -> None:
        """Catch every feed up once; a feed that fails records why and the others go on."""
        for feed in self.feeds:
            try:
                await self.catch_up(feed)
            except grpc.aio.AioRpcError as error:
                log.warning("%s: feed unreadable (%s)", feed.source, error.code().name)
                with contextlib.suppress(Exception):
                    await self.repository.feed_failed(feed.source, f"unreadable ({error.code().name})")


class LedgerLeader:
    """Runs the ledger on the one replica that holds the ingest lease (`metering:ingest`, a LeaseLeader)."""

    def __init__(
        self,
        ledger: Ledger,
        leases: LeaseStore,
        *,
        replica: str,
        lease_seconds: float,
        poll_seconds: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.ledger = ledger
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.leader = LeaseLeader(
            leases,
            name="metering:ingest",
            holder=replica,
            ttl=lease_seconds,
            retry_seconds=min(lease_seconds / 3, poll_seconds),
            lead=self._ingest,
            log=log,
            what="ledger ingest",
            clock=clock,
        )

    async def run(self) -> None:
        await self.leader.run()

    async def _ingest(self, keeper: LeaseKeeper) -> None:
        """While the lease is trusted: catch the feeds up, then wait a poll interval."""
        while keeper.is_trusted():
            try:
                await self.ledger.run_once()
            except Exception:
                log.exception("ledger ingest failed; retrying")
            await self.clock.sleep(self.poll_seconds)
