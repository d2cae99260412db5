"""The time a component waits on, injected so that a test advances it instead of waiting for it (style 15).

A component that sleeps or measures elapsed time takes a `Clock`; production passes `SYSTEM_CLOCK`, a
test a manual clock it steps (tests/fixtures/manual_clock.py).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock"]


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back: for intervals and deadlines."""
        ...

    def now(self) -> datetime:
        """The wall time, in UTC: for what is shown or stored, never for intervals."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` on this clock."""
        ...


class SystemClock:
    """The process's clocks and asyncio's sleep."""

    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK: Clock = SystemClock()
