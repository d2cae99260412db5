"""LeaseLeader: lead while holding one named lease, and campaign again whenever it is lost.

Theory of operation. A replica campaigns for the lease (`name`, `ttl`, retrying every `retry_seconds`), and once
it holds it runs `lead(keeper)` — what to do while leading — which returns when it sees the lease lost
(`keeper.is_trusted()` turned False, `keeper.wait_lost()` answered) or has nothing more to do. Then the lease is
released if it is still ours (so another replica leads at once, not after a TTL), `stepped_down` runs, and the
replica campaigns again; forever, until cancelled. A `lead` that raises (a store blip right after winning) must
not end the leading for good, since nobody else would campaign for this replica: it is logged, the replica pauses
`retry_seconds` (still holding the lease), then releases it and campaigns anew.

Time is the injected chassis `Clock` (the keeper's too), so a test steps it. The metering ledger
(metering/ledger.py, `metering:ingest`) and the idle monitor's per-pod ticker (idle_monitor/leader.py,
`monitor:<pod>`) are its users.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.store.keeper import LeaseKeeper
from thermostat.store.lease import LeaseStore

__all__ = ["LeaseLeader"]


class LeaseLeader:
    """Campaigns for one lease, runs `lead` while holding it, and campaigns again when it is lost."""

    def __init__(
        self,
        leases: LeaseStore,
        *,
        name: str,
        holder: str,
        ttl: float,
        retry_seconds: float,
        lead: Callable[[LeaseKeeper], Awaitable[object]],
        log: logging.Logger,
        what: str,
        clock: Clock = SYSTEM_CLOCK,
        stepped_down: Callable[[], object] | None = None,
    ) -> None:
        self.leases = leases
        self.name = name
        self.holder = holder
        self.ttl = ttl
        self.retry_seconds = retry_seconds
        self._lead = lead
        self._log = log
        self.what = what
        self.clock = clock
        self._stepped_down = stepped_down
        self.keeper: LeaseKeeper | None = None

    @property
    def leading(self) -> bool:
        return self.keeper is not None and self.keeper.is_trusted()

    async def run(self) -> None:
        while True:
            keeper = LeaseKeeper(self.leases, name=self.name, holder=self.holder, ttl=self.ttl, clock=self.clock)
            lease = await keeper.campaign(retry_interval=self.retry_seconds)
            self.keeper = keeper
            self._log.info("%s: this replica leads (lease %s, term %d)", self.what, self.name, lease.term)
            try:
                await self._lead(keeper)
            except Exception:
                self._log.exception("%s: leading failed; campaigning again", self.what)
                await self.clock.sleep(self.retry_seconds)
            finally:
                self.keeper = None
                if self._stepped_down is not None:
                    self._stepped_down()
                with contextlib.suppress(Exception):
                    await keeper.release()
            self._log.warning(
                "%s: lease lost (%s); another replica leads",
                self.what,
                keeper.loss.reason.value if keeper.loss else "released",
            )
