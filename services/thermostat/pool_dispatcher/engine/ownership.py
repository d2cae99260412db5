"""Ownership: this process's instance lease, the fence every write carries (`Owner`: instance id and lease term,
repository/values.py), and whether a guarded call may go out (`trusted_for_call`).

One dispatcher process owns its rows under its instance lease (`pool-instance:<id>`, renewed by a LeaseKeeper);
every write matches owner and term (repository/). Each start takes a new lease term (LeaseKeeper
`new_incarnation`), so an old process of the same instance id that is merely stalled is fenced off by term while
the new one takes its rows back at once. Before any call the lease guards (sending a job, starting or stopping a
machine) the process checks that the lease is trusted for longer than `call_budget` (a quarter of the lease): a
process that cannot renew stops acting before anyone reclaims. A lease lost anyway is campaigned for again by the
scaler's pass (`keep`), and the rows it held are then the reclaimer's.

The instance lease is not a leadership (every process holds its own, all the time, and the hot path acts under it
whether or not the scaler runs), so it is kept by the keeper and `keep` rather than thermostat.store.leader's
campaign-lead-release cycle.
"""

from __future__ import annotations

import logging

from thermostat.chassis.clock import Clock
from thermostat.store.keeper import LeaseKeeper
from thermostat.store.lease import LeaseStore

from ..repository import Owner

log = logging.getLogger("thermostat.pool_dispatcher")

LEASE_PREFIX = "pool-instance:"
CALL_BUDGET_SHARE = 0.25
"""A call the instance lease guards is made only while the lease is trusted for longer than this share of it."""


def lease_name(instance_id: str) -> str:
    return LEASE_PREFIX + instance_id


class Ownership:
    """The instance lease of one dispatcher process."""

    def __init__(
        self, leases: LeaseStore, *, instance_id: str, lease_seconds: float, lease_clock: Clock | None = None
    ) -> None:
        self.instance_id = instance_id
        self.lease_seconds = lease_seconds
        self.call_budget = lease_seconds * CALL_BUDGET_SHARE
        self._keeper = LeaseKeeper(
            leases,
            name=lease_name(instance_id),
            holder=instance_id,
            ttl=lease_seconds,
            clock=lease_clock,
            new_incarnation=True,  # fences an older process of this id that is stalled, not dead
        )
        self._owner: Owner | None = None

    @property
    def started(self) -> bool:
        return self._owner is not None

    @property
    def owner(self) -> Owner:
        if self._owner is None:
            raise RuntimeError("the dispatcher has not started")
        return self._owner

    def trusted_for_call(self) -> bool:
        """Whether the instance lease stays trusted for longer than a guarded call may take."""
        return self._keeper.remaining_trust() > self.call_budget

    async def take(self) -> int:
        """Take the instance lease (a new term: see the module); its term."""
        lease = await self._keeper.campaign(retry_interval=min(1.0, self.lease_seconds / 3))
        self._owner = Owner(self.instance_id, lease.term)
        return lease.term

    async def keep(self) -> None:
        """Campaign again if the lease is no longer trusted (the scaler's pass, first)."""
        if self._keeper.is_trusted():
            return
        lease = await self._keeper.campaign(retry_interval=min(1.0, self.lease_seconds / 3))
        if lease.term != self.owner.term:
            log.error(
                "instance %s lost its lease (term %d → %d): its rows were reclaimed",
                self.instance_id,
                self.owner.term,
                lease.term,
            )
        self._owner = Owner(self.instance_id, lease.term)

    async def release(self) -> None:
        await self._keeper.release()
