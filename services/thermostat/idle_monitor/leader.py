"""Who ticks a pod: the replica holding its `monitor:<pod>` lease (expiry by the database clock).

With two monitor replicas exactly one ticks a given pod; when it dies its lease lapses and the other takes
over within one lease period. A new holder reads the persisted state and waits out the rest of the check
interval the last holder began, so a failover neither skips a tick nor counts one twice — the streak goes
on exactly where it was.

Time is the injected `clock` (the lease keeper's too): a test steps it and counts ticks exactly.
"""

from __future__ import annotations

import asyncio
import logging

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.store.keeper import LeaseKeeper
from thermostat.store.leader import LeaseLeader
from thermostat.store.lease import LeaseStore

from .metrics import MonitorMetrics
from .repository import MonitorRepository
from .ticker import PodTicker

log = logging.getLogger("thermostat.idle_monitor")


class PodLeader:
    def __init__(
        self,
        ticker: PodTicker,
        leases: LeaseStore,
        states: MonitorRepository,
        *,
        replica: str,
        lease_seconds: float,
        check_seconds: float,
        clock: Clock = SYSTEM_CLOCK,
        metrics: MonitorMetrics | None = None,
    ) -> None:
        self.metrics = metrics  # the pod's series, dropped when this replica stops ticking it
        self.ticker = ticker
        self.states = states
        self.check_seconds = check_seconds
        self.clock = clock
        name = ticker.pod_name
        self.leader = LeaseLeader(
            leases,
            name=f"monitor:{name.casefold()}",
            holder=replica,
            ttl=lease_seconds,
            # a store blip right after winning pauses this long, then campaigns anew: nobody else would tick it
            retry_seconds=min(lease_seconds / 3, check_seconds),
            lead=self._lead,
            log=log,
            what=f"pod {name}",
            clock=clock,
            stepped_down=self._stepped_down,
        )

    @property
    def leading(self) -> bool:
        return self.leader.leading

    async def run(self) -> None:
        await self.leader.run()

    def _stepped_down(self) -> None:
        if self.metrics is not None:
            self.metrics.forget(self.ticker.pod_name)  # the next holder reports the pod from here

    async def _lead(self, keeper: LeaseKeeper) -> None:
        saved = await self.states.load(self.ticker.pod_name)
        # the last holder may have died with a readiness report the controller never took
        self.ticker.republish(saved.state)
        if saved.last_tick_at is not None:
            due = (saved.last_tick_at - self.clock.now()).total_seconds() + self.check_seconds
            if due > 0 and not await self._sleep_unless_lost(keeper, min(due, self.check_seconds)):
                return
        while keeper.is_trusted():
            started = self.clock.monotonic()
            try:
                await self.ticker.tick_once(self.clock.now(), keeper.is_trusted)
            except Exception:
                log.exception("pod %s: tick failed; the next tick starts afresh", self.ticker.pod_name)
            elapsed = self.clock.monotonic() - started
            if not await self._sleep_unless_lost(keeper, max(0.0, self.check_seconds - elapsed)):
                return

    async def _sleep_unless_lost(self, keeper: LeaseKeeper, seconds: float) -> bool:
        """Sleep `seconds` on the clock; False as soon as the lease is lost."""
        lost = asyncio.ensure_future(keeper.wait_lost())
        slept = asyncio.ensure_future(self.clock.sleep(seconds))
        try:
            await asyncio.wait({lost, slept}, return_when=asyncio.FIRST_COMPLETED)
            return not lost.done() and keeper.is_trusted()
        finally:
            lost.cancel()
            slept.cancel()
