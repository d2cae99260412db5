"""Retention (issue 23, docs/pool-retention.md): finished jobs and their results, usage events and dead machines'
events are deleted once kept POOL_JOB_RETENTION_HOURS, the feeds' rows only once metering's ledger has taken them.

One dispatcher process prunes at a time: the holder of the `pool:retention` lease (a LeaseLeader, as metering's
ingest and the idle monitor's tickers elect theirs). While it leads it takes each table in turn, one batch at a
time: the table's oldest candidates read by an index in its own order, thermostat.policy.pool.retention deciding
how many go (a prefix: the first too young, or not yet acknowledged, ends the batch), then one delete by key of
at most the batch's rows. Each delete is its own short statement, fenced in SQL by the lease (repository
retention.sql: it deletes nothing once the lease is another's, and a takeover waits for a delete in flight), so two
processes never delete the same batch at once, and a process whose lease lapsed mid-pass deletes nothing more.
The batch's size follows how long the last one took; a full batch is followed by a pause as long as it took, a
short one by POOL_PRUNE_SECONDS.

The horizon is read on the injected clock's wall time (`now` - retention), so a test steps time instead of waiting
hours; the database's `completed_at`/`recorded_at` it is compared with are hours old by then, and a few seconds of
skew between the two clocks moves a deletion by those seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.policy.pool.retention import BatchSize, horizon, pause_after, prunable_prefix
from thermostat.store.keeper import LeaseKeeper
from thermostat.store.leader import LeaseLeader
from thermostat.store.lease import LeaseStore

from .metrics import PoolMetrics
from .repository.retention import Fence, PrunedTable, RetentionRepository

log = logging.getLogger("thermostat.pool_dispatcher.retention")

LEASE = "pool:retention"
STOP_SECONDS = 5.0


class RetentionPruner:
    def __init__(
        self,
        repository: RetentionRepository,
        leases: LeaseStore,
        *,
        holder: str,
        retention: timedelta,
        every_seconds: float,
        lease_seconds: float,
        batch: BatchSize | None = None,
        clock: Clock = SYSTEM_CLOCK,
        metrics: PoolMetrics | None = None,
    ) -> None:
        self.repository = repository
        self.retention = retention
        self.every_seconds = every_seconds
        self.clock = clock
        self.metrics = metrics or PoolMetrics()
        self.sizes = {table: batch or BatchSize() for table in PrunedTable}
        self.pruned = dict.fromkeys(PrunedTable, 0)
        for table in PrunedTable:  # each table's series shows 0 before its first prune, so increase() sees it
            self.metrics.pruned.labels(table=table.value)
        self.leader = LeaseLeader(
            leases,
            name=LEASE,
            holder=holder,
            ttl=lease_seconds,
            retry_seconds=min(lease_seconds / 3, every_seconds),
            lead=self._lead,
            log=log,
            what="retention",
            clock=clock,
        )
        self._task: asyncio.Task[None] | None = None

    async def _lead(self, keeper: LeaseKeeper) -> None:
        while keeper.is_trusted():
            try:
                pause = await self.prune_once(keeper)
            except Exception:
                log.exception("retention pass failed; retrying")
                pause = self.every_seconds
            await self.clock.sleep(pause)

    async def prune_once(self, keeper: LeaseKeeper) -> float:
        """One batch of each table while `keeper`'s lease is trusted; the pause before the next batches."""
        pauses = [self.every_seconds]
        for table in PrunedTable:
            lease = keeper.lease
            if lease is None or not keeper.is_trusted():
                break
            pauses.append(await self.prune_batch(table, Fence(name=lease.name, holder=lease.holder, term=lease.term)))
        return min(pauses)

    async def prune_batch(self, table: PrunedTable, fence: Fence) -> float:
        """Read `table`'s oldest candidates, delete the prunable prefix under `fence`; the pause it asks for."""
        size = self.sizes[table]
        found = await self.repository.candidates(table, size.rows)
        take = prunable_prefix(
            found.rows, horizon=horizon(now=self.clock.now(), retention=self.retention), acknowledged=found.acknowledged
        )
        if take == 0:
            return self.every_seconds
        started = self.clock.monotonic()
        deleted = await self.repository.prune(table, found.keys[:take], fence)
        took = self.clock.monotonic() - started
        self.sizes[table] = size.after(took)
        self.pruned[table] += deleted
        self.metrics.pruned.labels(table=table.value).inc(deleted)
        if deleted == 0:  # fenced: the lease is no longer ours (or every row changed since it was read)
            return self.every_seconds
        log.debug("retention: %d rows of %s deleted in %.3f s", deleted, table.value, took)
        return pause_after(prunable=take, asked=size.rows, took_seconds=took, interval_seconds=self.every_seconds)

    async def start(self) -> None:
        self._task = asyncio.create_task(self.leader.run(), name="pool-retention")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        # bounded: a stop runs after SIGTERM; the leader's own finally releases the lease for the next process
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, STOP_SECONDS)
