"""Each pod's view as the gateway decides on it: the pod controller's watch, kept open per pod, and the wake.

One WatchPod stream per pod and gateway replica (the controller builds a pod's view once per interval however many
watch it): a request for a ready pod reads memory, never RunPod. A stream that breaks is opened again after a
pause; meanwhile the last view stands, and a forward that finds it stale (the pod stopped since) falls back to a
wake. A held request waits on `changed`, which wakes at each new view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from thermostat.chassis.request_context import outgoing_metadata
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.common.pod_options import PodOptions
from thermostat.policy.gateway.hold import HistoryMark, PodSnapshot, stop_since_wake

log = logging.getLogger("thermostat.gateway")


@dataclass
class _Feed:
    view: pods_pb2.GetPodResponse | None = None
    received: float = 0.0  # monotonic, when `view` arrived (the ETA counts down from it)
    version: int = 0
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)


@dataclass(frozen=True, slots=True, kw_only=True)
class WakeAnswer:
    """WakeAnswer is the wake RPC's answer: the gRPC code's name (OK on success), its message and outcome."""

    code: str
    message: str = ""
    outcome: str = ""


class PodViews:
    def __init__(
        self,
        pods: Sequence[PodOptions],
        public: pods_pb2_grpc.PodControllerStub,
        internal: pods_pb2_grpc.PodControllerInternalStub,
        *,
        timeout: float,
        retry_seconds: float = 1.0,
    ) -> None:
        self.pods = pods
        self.public = public
        self.internal = internal
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self._feeds = {pod.name: _Feed() for pod in pods}
        self._tasks: list[asyncio.Task[None]] = []

    def snapshot(self, name: str) -> PodSnapshot:
        feed = self._feeds[name]
        view = feed.view
        if view is None:
            return PodSnapshot(name=name)
        eta = None
        if view.HasField("eta_seconds"):
            eta = max(0.0, view.eta_seconds - (time.monotonic() - feed.received))
        return PodSnapshot(
            name=name,
            status=view.status or "UNKNOWN",
            is_running=view.is_running,
            ready=view.HasField("ready_since"),
            proxy_url=view.proxy_url,
            wake_in_flight=view.HasField("last_wake") and not view.last_wake.outcome,
            eta_seconds=eta,
        )

    def version(self, name: str) -> int:
        return self._feeds[name].version

    async def changed(self, name: str, after: int, timeout: float) -> int:
        """Wait up to `timeout` for a view newer than version `after`; the version now."""
        feed = self._feeds[name]
        async with feed.changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(feed.changed.wait_for(lambda: feed.version > after), timeout)
            return feed.version

    async def _set(self, name: str, view: pods_pb2.GetPodResponse) -> None:
        feed = self._feeds[name]
        async with feed.changed:
            feed.view, feed.received = view, time.monotonic()
            feed.version += 1
            feed.changed.notify_all()

    async def refresh(self, name: str) -> None:
        """Read the pod's view now (a forward found the watched one stale)."""
        try:
            view = await self.public.GetPod(
                pods_pb2.GetPodRequest(name=name),
                timeout=self.timeout,
                metadata=outgoing_metadata(),
                wait_for_ready=True,
            )
        except grpc.aio.AioRpcError as error:
            log.warning("pod %s: view not refreshed (%s)", name, error.code().name)
            return
        await self._set(name, view)

    async def wake(self, name: str) -> WakeAnswer:
        """Run or join the pod's wake with trigger `request` (the controller gates it across replicas)."""
        try:
            # wait_for_ready: a controller between two connection attempts (starting, restarting) is waited for
            # within the timeout rather than refused at once
            answer = await self.internal.WakePod(
                pods_pb2.WakePodRequest(name=name, trigger=pods_pb2.WAKE_TRIGGER_REQUEST),
                timeout=self.timeout,
                metadata=outgoing_metadata(),
                wait_for_ready=True,
            )
        except grpc.aio.AioRpcError as error:
            return WakeAnswer(code=error.code().name, message=error.details() or "")
        return WakeAnswer(code="OK", message=answer.message, outcome=answer.outcome)

    async def stop_reason(self, name: str) -> str | None:
        """The words for a stop on the pod's record after its newest wake (stop_since_wake); None when there is none
        or the history cannot be read."""
        try:
            page = await self.public.GetPodHistory(
                pods_pb2.GetPodHistoryRequest(name=name, page_size=20),
                timeout=self.timeout,
                metadata=outgoing_metadata(),
            )
        except grpc.aio.AioRpcError:
            return None
        marks = [
            HistoryMark(wake=True)
            if entry.WhichOneof("entry") == "wake"
            else HistoryMark(
                stop=entry.action.action == "Stop", trigger=entry.action.trigger, detail=entry.action.detail
            )
            for entry in page.entries
        ]
        return stop_since_wake(marks)

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._watch(pod.name), name=f"gateway-watch:{pod.name}") for pod in self.pods
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self, name: str) -> None:
        failures = 0
        while True:
            try:
                async for message in self.public.WatchPod(
                    pods_pb2.WatchPodRequest(name=name), metadata=outgoing_metadata(), wait_for_ready=True
                ):
                    failures = 0
                    await self._set(name, message.pod)
            except grpc.aio.AioRpcError as error:
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("pod %s: watch broken (%s); reopening it", name, error.code().name)
            await asyncio.sleep(self.retry_seconds)
