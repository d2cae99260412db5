"""Periodic: a background loop that runs one pass every `every_seconds` until stopped.

The orphan sweeps and the budget reaper each run one. The loop waits before every pass, the first included,
and a pass that raises is logged ("<what> failed; retrying on the next pass", under the owner's logger) and
the loop carries on: one unreadable listing or store error must not end the sweeping for the life of the
process. `stop` cancels the loop wherever it is, asleep or mid-pass. The sleep is injected so a test steps
the passes instead of waiting for them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

__all__ = ["Periodic"]


class Periodic:
    """Periodic runs `one_pass` every `every_seconds` in one named task between `start` and `stop`."""

    def __init__(
        self,
        name: str,
        every_seconds: float,
        one_pass: Callable[[], Awaitable[object]],
        *,
        log: logging.Logger,
        what: str,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.name = name
        self.every_seconds = every_seconds
        self._one_pass = one_pass
        self._log = log
        self._what = what
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Start the loop; a loop already running is left alone (never two)."""
        if not self.running:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Cancel the loop and wait for it to end; nothing to do before `start`."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # waited for, not awaited: a CancelledError here would be this stop's own, never to be suppressed
            await asyncio.wait({task})

    async def _run(self) -> None:
        # Runs while it is the loop `start` made: a pass that swallows its cancellation and returns (as Python
        # 3.11's wait_for does when the awaited call had just finished) ends the loop there, not never.
        this = asyncio.current_task()
        while self._task is this:
            await self._sleep(self.every_seconds)
            try:
                await self._one_pass()
            except Exception:
                self._log.exception("%s failed; retrying on the next pass", self._what)
