"""Periodic: a background loop that runs one pass every `every_seconds` until stopped.

The orphan sweeps and the budget reaper each run one. The loop waits before every pass, the first included,
and a pass that raises is logged ("<what> failed; retrying on the next pass", under the owner's logger) and
the loop carries on: one unreadable listing or store error must not end the sweeping for the life of the
process. It waits on the chassis `Clock` (chassis/clock.py), which its owner must pass (no default: a loop built
without its owner's clock would wait on real time while the owner's test steps a fake one), so a test steps the
passes instead of waiting for them.

`stop` is bounded, since it runs in a service's stop hooks after SIGTERM: a loop asleep is cancelled at once; a
pass in flight gets `stop_grace` seconds to end on its own (a clean stop: a sweep's provider stop and its record
are not cut apart), then it is cancelled (logged as a warning) and gets `stop_grace` more to unwind; a pass that
outlasts that too (one stuck in I/O that its cancellation cannot interrupt) is left behind with an error logged,
and the stop returns. The default grace fits the pool dispatcher's stop (two loops stopped in turn, up to
2 x 2 x 2.5 s) into what Kubernetes' default 30 s termination grace leaves after the gRPC drain
(SHUTDOWN_GRACE_SECONDS, 10 s, plus its 5 s margin), with room for the stop hooks after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from thermostat.chassis.clock import Clock

__all__ = ["DEFAULT_STOP_GRACE_SECONDS", "Periodic"]

DEFAULT_STOP_GRACE_SECONDS = 2.5


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
        clock: Clock,
        stop_grace: float = DEFAULT_STOP_GRACE_SECONDS,
    ) -> None:
        self.name = name
        self.every_seconds = every_seconds
        self._one_pass = one_pass
        self._log = log
        self._what = what
        self._clock = clock
        self.stop_grace = stop_grace
        self._task: asyncio.Task[None] | None = None
        self._in_pass: asyncio.Task[Any] | None = None  # the loop whose pass is running

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """Start the loop; a loop already running is left alone (never two)."""
        if not self.running:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """End the loop within the grace (see the module): nothing to do before `start`."""
        task, self._task = self._task, None
        if task is None:
            return
        # waited for, not awaited: a CancelledError here would be this stop's own, never to be suppressed
        in_pass = self._in_pass is task
        if in_pass:
            # the loop ends after this pass by itself: it runs only while it is the loop `start` made
            _, pending = await asyncio.wait({task}, timeout=self.stop_grace)
            if not pending:
                return
            self._log.warning("%s still running after the %g s stop grace; cancelling it", self._what, self.stop_grace)
        task.cancel()
        _, pending = await asyncio.wait({task}, timeout=self.stop_grace)
        if pending:
            self._log.error(
                "%s did not end within %g s of its cancellation; stopping without it", self._what, self.stop_grace
            )

    async def _run(self) -> None:
        # Runs while it is the loop `start` made: a pass that swallows its cancellation and returns (as Python
        # 3.11's wait_for does when the awaited call had just finished) ends the loop there, not never.
        this = asyncio.current_task()
        while self._task is this:
            await self._clock.sleep(self.every_seconds)
            self._in_pass = this
            try:
                await self._one_pass()
            except Exception:
                self._log.exception("%s failed; retrying on the next pass", self._what)
            finally:
                if self._in_pass is this:
                    self._in_pass = None
