"""Leases: exactly one replica acts where acting twice would bill twice.

A lease is a named row in Postgres held by one holder for a term until an expiry. Theory of operation:

- Expiry is judged only by the database clock (`now()` inside each statement), as River, pgqueuer and
  pg-boss do; queues that compared process clocks inherited clock-skew bugs (Oban, solid_queue). The
  worker-pool seed's "lease expiry is compared by wall clock across processes" is the follow-up done.
- `acquire` takes a free, released or expired lease (term + 1) or returns None while another holder's is
  live. The holder already named on the lease gets it back with its term unchanged, live or expired —
  nobody else held it in between, so nothing was fenced off (the worker-pool seed's "a process restarted under its
  old instance_id takes its own rows back at once"). `acquire(..., new_term=True)` takes it back under a
  new term instead: the name is still taken at once, and an earlier incarnation of the holder that is
  still alive (stalled) is fenced off like any other former holder.
- The term grows by one every time the lease changes hands, and never repeats for a name (release keeps
  the row). Every `renew` and `release` matches holder AND term, so a holder that stalled past its expiry
  learns on its next renew that it lost, and cannot release or extend the new holder's lease — the bug
  several queues had and solid_queue fixed (issue 589).
- A renew of a lease that expired but was not taken succeeds: holder and term still match, so nobody
  acted under the name meanwhile.
- Trust is process-side and conservative (River's rule): a `Lease` is trusted until the monotonic time at
  which its holder *asked*, plus the TTL, minus a safety margin. A slow answer therefore never extends
  trust, and the holder stops believing before the database would let anyone else in. Check
  `lease.is_trusted()` right before each action the lease guards.

Give the lease store its own small pool (two connections), separate from the service's main pool: a pool
exhausted by ordinary queries must not stall renewals until leadership is lost (River PR 1101). See
`Store`, which does this.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.store.connections import borrow
from thermostat.store.sql import load_sql

__all__ = ["DEFAULT_SAFETY_FRACTION", "Lease", "LeaseHolder", "LeaseStore"]

_SQL = load_sql(Path(__file__).with_name("lease.sql"))

DEFAULT_SAFETY_FRACTION = 0.2
"""Share of the TTL a holder gives up from its trust window: time to finish a guarded action after the
last trust check, and slack for the two clocks' rates."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """A lease as its holder saw it on its last successful acquire or renew."""

    name: str
    holder: str
    term: int
    ttl: float
    expires_at: datetime
    """Expiry by the database clock; for display and diagnostics, never compared with a local clock."""
    trusted_until: float
    """On the monotonic clock: when the holder asked, plus the TTL, minus the safety margin."""

    def is_trusted(self, now: float | None = None) -> bool:
        """Whether the holder may still act on this lease (`now` on the monotonic clock)."""
        return (time.monotonic() if now is None else now) < self.trusted_until

    def remaining_trust(self, now: float | None = None) -> float:
        return self.trusted_until - (time.monotonic() if now is None else now)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseHolder:
    """Who holds a lease right now, by the database clock."""

    name: str
    holder: str
    term: int
    acquired_at: datetime
    expires_at: datetime


class LeaseStore:
    """Acquire, renew, release and inspect leases over a pool (give it its own small pool).

    `clock` stamps when each acquire or renew was asked, so `Lease.trusted_until` is on its monotonic reading.
    `on_takeover(name)` is called for each lease this store's holders take from another holder whose lease
    expired unreleased (a takeover: that holder died or stalled); services count them (`observed`).
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        safety_fraction: float = DEFAULT_SAFETY_FRACTION,
        clock: Clock = SYSTEM_CLOCK,
        on_takeover: Callable[[str], None] | None = None,
    ) -> None:
        if not 0 <= safety_fraction < 1:
            raise ValueError(f"safety_fraction must be in [0, 1), not {safety_fraction}")
        self._pool = pool
        self._safety_fraction = safety_fraction
        self.clock = clock
        self._on_takeover = on_takeover

    def using(self, clock: Clock) -> LeaseStore:
        """The same leases over the same pool, with trust stamped on `clock`."""
        if clock is self.clock:
            return self
        return LeaseStore(self._pool, safety_fraction=self._safety_fraction, clock=clock, on_takeover=self._on_takeover)

    def observed(self, on_takeover: Callable[[str], None]) -> LeaseStore:
        """The same leases over the same pool, calling `on_takeover(name)` for each lease taken over."""
        return LeaseStore(self._pool, safety_fraction=self._safety_fraction, clock=self.clock, on_takeover=on_takeover)

    async def acquire(self, name: str, holder: str, ttl: float, *, new_term: bool = False) -> Lease | None:
        """Take the lease for `ttl` seconds; None while another holder's lease is live. `new_term`: the term
        grows even when `holder` already holds it (a new incarnation fencing off an old one)."""
        _check_args(name, holder, ttl)
        asked_at = self.clock.monotonic()
        row = await self._fetchrow(
            *_SQL.bind("acquire_new_term" if new_term else "acquire", name=name, holder=holder, ttl=float(ttl))
        )
        if row is None:
            return None
        if row["taken_over"] and self._on_takeover is not None:
            self._on_takeover(name)
        return self._lease(name, holder, ttl, row, asked_at)

    async def renew(self, lease: Lease, *, ttl: float | None = None) -> Lease | None:
        """Extend `lease` by `ttl` (default: its own) from now; None when it was lost to another term."""
        ttl = lease.ttl if ttl is None else ttl
        _check_args(lease.name, lease.holder, ttl)
        asked_at = self.clock.monotonic()
        row = await self._fetchrow(
            *_SQL.bind("renew", name=lease.name, holder=lease.holder, term=lease.term, ttl=float(ttl))
        )
        if row is None:
            return None
        return self._lease(lease.name, lease.holder, ttl, row, asked_at)

    async def release(self, lease: Lease) -> bool:
        """Give `lease` up; False when it was no longer ours in this term (nothing is changed then)."""
        row = await self._fetchrow(*_SQL.bind("release", name=lease.name, holder=lease.holder, term=lease.term))
        return row is not None

    async def holder(self, name: str) -> LeaseHolder | None:
        """The current unexpired holder of `name`, or None when the lease is free."""
        row = await self._fetchrow(*_SQL.bind("holder", name=name))
        if row is None:
            return None
        return LeaseHolder(
            name=name,
            holder=row["holder"],
            term=row["term"],
            acquired_at=row["acquired_at"],
            expires_at=row["expires_at"],
        )

    async def _fetchrow(self, sql: str, *args: object) -> asyncpg.Record | None:
        # Deadlines are the caller's (`asyncio.timeout` around the call), covering the wait for a
        # connection as well as the statement; the keeper bounds each renewal by its remaining trust.
        async with borrow(self._pool) as connection:
            return await connection.fetchrow(sql, *args)

    def _lease(self, name: str, holder: str, ttl: float, row: asyncpg.Record, asked_at: float) -> Lease:
        return Lease(
            name=name,
            holder=holder,
            term=row["term"],
            ttl=ttl,
            expires_at=row["expires_at"],
            trusted_until=asked_at + ttl * (1 - self._safety_fraction),
        )


def _check_args(name: str, holder: str, ttl: float) -> None:
    if not name:
        raise ValueError("a lease needs a name")
    if not holder:
        raise ValueError("a lease needs a holder")
    if not ttl > 0:
        raise ValueError(f"a lease's ttl must be positive, not {ttl}")
