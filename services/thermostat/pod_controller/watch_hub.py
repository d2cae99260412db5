"""One poller per pod however many callers watch it.

Every watcher polling RunPod on its own would multiply list and observe calls by the number of watchers; the
account's rate limit is shared with the wake (a 429 there spends the create walk's retry budget). So a pod's
view is built once per interval while anyone watches, and each watcher gets every new view: one build when the
first watcher arrives, then one per interval of the injected clock, however many watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.pods.v1 import pods_pb2

log = logging.getLogger("thermostat.pod_controller.watch")

BuildView = Callable[[], Awaitable[pods_pb2.GetPodResponse]]


def _comparable(view: pods_pb2.GetPodResponse) -> bytes:
    copy = pods_pb2.GetPodResponse()
    copy.CopyFrom(view)
    copy.ClearField("eta_seconds")  # a countdown alone is not a change worth a message
    return copy.SerializeToString(deterministic=True)


@dataclass
class _Feed:
    watchers: int = 0
    version: int = 0
    latest: pods_pb2.GetPodResponse | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    task: asyncio.Task[None] | None = None


class WatchHub:
    def __init__(self, poll_seconds: float, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.poll_seconds = poll_seconds
        self.clock = clock
        self._feeds: dict[str, _Feed] = {}

    async def watch(self, key: str, build: BuildView) -> AsyncIterator[pods_pb2.GetPodResponse]:
        """Every distinct view of the pod, starting with the current one, until the caller stops iterating."""
        feed = self._feeds.setdefault(key, _Feed())
        feed.watchers += 1
        if feed.task is None or feed.task.done():
            feed.task = asyncio.create_task(self._poll(feed, build), name=f"watch:{key}")
        seen = 0

        def newer() -> bool:
            return feed.version > seen

        try:
            while True:
                async with feed.changed:
                    await feed.changed.wait_for(newer)
                    seen, view = feed.version, feed.latest
                assert view is not None
                yield view
        finally:
            feed.watchers -= 1
            if feed.watchers == 0:
                self._feeds.pop(key, None)
                if feed.task is not None:
                    feed.task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await feed.task

    async def _poll(self, feed: _Feed, build: BuildView) -> None:
        last: bytes | None = None
        while True:
            try:
                view = await build()
            except Exception:
                log.exception("building the watched view failed; retrying")
            else:
                encoded = _comparable(view)
                if encoded != last:
                    last = encoded
                    async with feed.changed:
                        feed.latest, feed.version = view, feed.version + 1
                        feed.changed.notify_all()
            await self.clock.sleep(self.poll_seconds)
