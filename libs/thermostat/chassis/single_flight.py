"""Single-flight: one in-flight call per key, and every caller of that key gets its result (style 14).

The shape of Go's `golang.org/x/sync/singleflight`, with one difference that matters for calls that bill:
the call runs as a task detached from the callers, so a caller that gives up (a disconnect, a deadline)
never aborts a half-done call, and a caller arriving meanwhile awaits the same task. `drain` lets the calls
in flight finish on shutdown, then interrupts those still running.

A result that must outlive the process (another replica joins it from the store) is stored through a
`Codec`: the flight's users pick one per result type, so what crosses the store is a typed value.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["Codec", "SingleFlight"]

V = TypeVar("V")

log = logging.getLogger("thermostat.chassis.single_flight")


class Codec(Protocol[V]):
    """How a flight's result is written to the store and read back: `decode(encode(v)) == v`."""

    def encode(self, value: V) -> str: ...

    def decode(self, text: str) -> V: ...


class SingleFlight(Generic[V]):
    """One detached task per key; callers of a key in flight share its result (or its exception)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: dict[str, asyncio.Task[V]] = {}

    async def do(self, key: str, call: Callable[[], Awaitable[V]]) -> V:
        """Run `call` for `key`, or join the one in flight. Cancelling the caller does not cancel the call."""
        task = self._calls.get(key)
        if task is None or task.done():
            task = asyncio.create_task(_run(call), name=f"{self.name}:{key}")
            self._calls[key] = task

            def forget(done: asyncio.Task[V], key: str = key) -> None:
                if self._calls.get(key) is done:
                    del self._calls[key]

            task.add_done_callback(forget)
        return await asyncio.shield(task)

    def in_flight(self) -> list[asyncio.Task[V]]:
        return [task for task in self._calls.values() if not task.done()]

    async def drain(self, seconds: float, *, interrupted_within: float) -> None:
        """Let the calls in flight finish within `seconds`; then cancel the rest and give them
        `interrupted_within` to wind down (each may record how it ended). Never waits longer than both."""
        pending = self.in_flight()
        if not pending:
            return
        log.info("%s: waiting up to %.1fs for %d call(s) in flight", self.name, seconds, len(pending))
        _, still = await asyncio.wait(pending, timeout=seconds)
        for task in still:
            task.cancel()
        if still:
            _, stuck = await asyncio.wait(still, timeout=interrupted_within)
            if stuck:
                log.error(
                    "%s: %d call(s) still running %.1fs after being interrupted; shutting down anyway",
                    self.name,
                    len(stuck),
                    interrupted_within,
                )


async def _run(call: Callable[[], Awaitable[V]]) -> V:
    return await call()
