"""The engine's background tasks (runs, boots, placement passes, batch statements), cancelled together at close."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable


class Tasks:
    def __init__(self) -> None:
        self.running: set[asyncio.Task[None]] = set()

    def spawn(self, coroutine: Awaitable[None], name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        task.set_name(name)
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        return task

    def named(self, part: str) -> list[asyncio.Task[None]]:
        """The running tasks whose name holds `part` (e.g. "pool-run")."""
        return [task for task in self.running if part in task.get_name()]

    async def cancel_all(self) -> None:
        for task in list(self.running):
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)
