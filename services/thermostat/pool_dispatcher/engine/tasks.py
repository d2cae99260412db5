"""The engine's background tasks (runs, boots, placement passes, batch statements), cancelled together at close."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


class Tasks:
    def __init__(self) -> None:
        self.running: set[asyncio.Task[Any]] = set()

    def spawn(self, coroutine: Awaitable[T], name: str) -> asyncio.Task[T]:
        task: asyncio.Task[T] = asyncio.ensure_future(coroutine)
        task.set_name(name)
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        return task

    def named(self, part: str) -> list[asyncio.Task[Any]]:
        """The running tasks whose name holds `part` (e.g. "pool-run")."""
        return [task for task in self.running if part in task.get_name()]

    async def cancel_all(self) -> None:
        for task in list(self.running):
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)
