"""Clock: the time a service reads and the sleep it waits with, one shape, injected.

A service's build takes one `Clock` and hands it to every part that reads the time or waits (leaders, lease
keepers, watch loops, periodic passes, the pool dispatcher, the servicers), instead of each calling
`time.monotonic`, `datetime.now` or `asyncio.sleep`, so a test advances time instead of waiting for it
(tests/fixtures/clock.py has the manual one) and asserts exact counts rather than ranges that hold only on an
idle machine. Production passes `SYSTEM_CLOCK`. Time judged by another system stays with that system: a
lease's expiry (the database clock), a pool job id's mint time (the row's), an HTTP timeout, the wake's polls
of a RunPod boot. The typed client (thermostat.client) keeps callables of its own: it is installed without
the chassis.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock"]


class Clock(Protocol):
    """Clock is what a waiting component reads: a monotonic reading, the wall time, and a sleep on the same
    clock (a sleep of `s` returns once `monotonic()` has moved on by `s`)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back; only differences mean anything."""
        ...

    def now(self) -> datetime:
        """The wall time, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` on this clock (zero or less: just yield)."""
        ...


class SystemClock:
    """SystemClock is the process's own clocks and the event loop's sleep."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


SYSTEM_CLOCK: Clock = SystemClock()
