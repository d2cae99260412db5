"""Single-flight across replicas: one call per key in the whole deployment, and every caller gets its result.

Within a replica, callers of a key share one detached task (chassis `SingleFlight`: a caller that leaves
never aborts it). Across replicas that task first takes the key's lease (`<name>:<key>`, expiry by the
database clock, see `lease`):

- The holder leads: it runs the user's call, which writes the flight's row before it acts and stores its
  result with the row's completion (through a `Codec`, so the stored result is a typed value).
- A replica that cannot take the lease joins the row in flight: it polls the row for the stored result, and
  every third of the lease asks whether anyone still holds the lease. When nobody does (the leader died
  mid-call) it tries to lead; the new leader's call closes the abandoned row.
- A result stored by a flight that completed after the caller asked answers it too (`completed_since`): a
  call that ran wholly while this caller waited for the lease is as good as one it joined.

Store errors propagate: the user decides what an unreachable store means (the wake gate refuses, fail
closed). The pod controller's wakes are the first user; the pool's boot-per-demand is meant to be the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.single_flight import SingleFlight
from thermostat.store.connections import STORE_ERRORS
from thermostat.store.keeper import LeaseKeeper
from thermostat.store.lease import LeaseStore

__all__ = ["FlightRows", "InFlight", "Lead", "SharedFlight", "Stored"]

V = TypeVar("V")

log = logging.getLogger("thermostat.store.shared_flight")


@dataclass(frozen=True, slots=True, kw_only=True)
class InFlight:
    """InFlight is a flight some replica runs now: its row is open."""

    flight_id: uuid.UUID
    holder: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Stored(Generic[V]):
    """Stored is a flight's row as a joiner polls it: completed yet, and the result its callers got."""

    completed: bool
    result: V | None = None


class FlightRows(Protocol[V]):
    """Where the user's flights are written (its repository): read by subject, the name its rows carry."""

    async def db_now(self) -> datetime: ...

    async def completed_since(self, subject: str, arrival: datetime) -> V | None: ...

    async def in_flight(self, subject: str) -> InFlight | None: ...

    async def stored(self, flight_id: uuid.UUID) -> Stored[V]: ...


Lead = Callable[[LeaseKeeper], Awaitable[V]]
"""The call itself, run by the lease's holder: it writes its row, acts while the keeper's lease is trusted,
and stores its result with the row's completion."""


class SharedFlight(Generic[V]):
    def __init__(
        self,
        rows: FlightRows[V],
        leases: LeaseStore,
        *,
        name: str,
        replica: str,
        lease_seconds: float,
        poll_seconds: float,
        release_timeout: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.rows = rows
        self.leases = leases
        self.name = name
        self.replica = replica
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.release_timeout = release_timeout
        self.clock = clock
        self._local: SingleFlight[V] = SingleFlight(name)

    async def run(self, key: str, subject: str, lead: Lead[V]) -> V:
        """Lead or join the flight of `key` (the lease's and the in-process flight's name); its rows are read
        by `subject`. Cancelling the caller does not cancel the flight."""
        return await self._local.do(key, lambda: self._lead_or_join(key, subject, lead))

    async def drain(self, seconds: float, *, interrupted_within: float) -> None:
        """Let this replica's flights finish within `seconds`, then interrupt them (see `SingleFlight.drain`)."""
        await self._local.drain(seconds, interrupted_within=interrupted_within + self.release_timeout)

    async def _lead_or_join(self, key: str, subject: str, lead: Lead[V]) -> V:
        arrival = await self.rows.db_now()
        while True:
            keeper = LeaseKeeper(
                self.leases, name=f"{self.name}:{key}", holder=f"{self.replica}:{uuid.uuid4()}", ttl=self.lease_seconds
            )
            if await keeper.acquire() is not None:
                try:
                    done = await self._completed_since(subject, arrival)
                    return done if done is not None else await lead(keeper)
                finally:
                    # bounded: on shutdown this runs in an interrupted task, and an unanswered release must not
                    # hold the drain (the lease then lapses after its TTL)
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(self.release_timeout):
                            await keeper.release()
            joined = await self._join(key, subject, arrival)
            if joined is not None:
                return joined

    async def _completed_since(self, subject: str, arrival: datetime) -> V | None:
        try:
            return await self.rows.completed_since(subject, arrival)
        except STORE_ERRORS as error:
            # best-effort: the lease alone still gates the flight
            log.warning("%s %s: completed flights unreadable (%s)", self.name, subject, type(error).__name__)
            return None

    async def _join(self, key: str, subject: str, arrival: datetime) -> V | None:
        """Wait for the flight another replica runs; None when there is none to join (try to lead)."""
        flight = await self.rows.in_flight(subject)
        if flight is None:
            done = await self._completed_since(subject, arrival)
            if done is not None:
                return done
            await self.clock.sleep(self.poll_seconds)
            return None
        log.info("%s %s: joining %s run by %s", self.name, subject, flight.flight_id, flight.holder)
        next_lease_check = self.clock.monotonic() + self.lease_seconds / 3
        while True:
            stored = await self.rows.stored(flight.flight_id)
            if stored.completed:
                return stored.result
            if self.clock.monotonic() >= next_lease_check:
                next_lease_check = self.clock.monotonic() + self.lease_seconds / 3
                if await self.leases.holder(f"{self.name}:{key}") is None:
                    return None  # its leader is gone: lead anew (the new leader closes the abandoned row)
            await self.clock.sleep(self.poll_seconds)
