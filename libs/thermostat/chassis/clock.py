"""Clock: the time a waiting component reads and the sleep it waits with, injected.

Leaders, lease keepers and watch loops take a `Clock` instead of calling `time.monotonic`, `datetime.now` or
`asyncio.sleep`, so a test advances time instead of waiting for it (tests/fixtures/clock.py has the manual
one) and asserts exact counts rather than ranges that hold only on an idle machine. Production passes
`SYSTEM_CLOCK`. Only what a component *waits on* is injected: deadlines judged by another system (a lease's
expiry by the database clock, an HTTP timeout) stay with that system.
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
