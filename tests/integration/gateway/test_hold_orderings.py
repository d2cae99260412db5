"""A held request against the orderings of the controller's watch and the wake's answer (CI, stop 39: a request right
after the idle stop was refused 503 pod_stopped while its own wake was bringing the pod up).

The controller's watch sends a pod's view once per interval, so a request can arrive while the view still shows the
pod's previous boot (RUNNING, the idle stop not in it yet), and the stale EXITED view can arrive after the wake has
answered. A scripted controller over real gRPC sends the views in each order; the test steps it with barriers (the
hold has read the view, the wake was asked), never sleeps:

    views seen by the held request                           history, newest first     answer
    stale RUNNING, wake answers, stale EXITED, STARTING, ready   start, wake, idle stop    forwarded
    stale RUNNING, wake answers, STARTING, EXITED            idle stop, start, wake    503 pod_stopped naming it
    EXITED, wake answers, STARTING, ready                    start, wake, idle stop    forwarded
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from thermostat.chassis.auth import TokenRule
from thermostat.gateway.activity import ActivityReporter
from thermostat.gateway.app import Gateway, HoldLimits
from thermostat.gateway.engine import Engines
from thermostat.gateway.views import PodViews
from thermostat.monitor.v1 import monitor_pb2_grpc
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.common.pod_options import PodOptions
from thermostat.policy.gateway.hold import PodSnapshot
from thermostat.policy.gateway.openai_errors import Refusal

pytestmark = pytest.mark.timeout(60)

STALE_RUNNING = pods_pb2.GetPodResponse(name="qwen", status="RUNNING", is_running=True, proxy_url="http://p")
EXITED = pods_pb2.GetPodResponse(name="qwen", status="EXITED")
STARTING = pods_pb2.GetPodResponse(name="qwen", status="STARTING")
READY = pods_pb2.GetPodResponse(name="qwen", status="RUNNING", is_running=True, proxy_url="http://p")
READY.ready_since.GetCurrentTime()
IDLE_STOP = pods_pb2.HistoryEntry(action=pods_pb2.PodAction(action="Stop", trigger="idle", pod_id="p1", ok=True))
START = pods_pb2.HistoryEntry(action=pods_pb2.PodAction(action="Start", trigger="request", pod_id="p1", ok=True))
WAKE = pods_pb2.HistoryEntry(wake=pods_pb2.WakeRecord(pod_name="qwen", trigger="request", outcome="Succeeded"))


class _Controller(pods_pb2_grpc.PodControllerServicer, pods_pb2_grpc.PodControllerInternalServicer):  # type: ignore[misc]
    """Sends the views the test puts in `views`; answers a wake when the test sets `answer`."""

    def __init__(self) -> None:
        self.views: asyncio.Queue[pods_pb2.GetPodResponse] = asyncio.Queue()
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()
        self.history: list[pods_pb2.HistoryEntry] = []

    async def WatchPod(self, request: pods_pb2.WatchPodRequest, context: object) -> AsyncIterator[object]:
        while True:
            yield pods_pb2.WatchPodResponse(pod=await self.views.get())

    async def WakePod(self, request: pods_pb2.WakePodRequest, context: object) -> pods_pb2.StartPodResponse:
        self.asked.set()
        await self.answer.wait()
        return pods_pb2.StartPodResponse(name=request.name, outcome="Started", pod_id="p1")

    async def GetPodHistory(self, request: object, context: object) -> pods_pb2.GetPodHistoryResponse:
        return pods_pb2.GetPodHistoryResponse(name="qwen", entries=self.history)


class _Recording(PodViews):
    """PodViews that tells the test each time the held request reads a view: the barrier between two steps."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.reads: list[int] = []
        self.read = asyncio.Condition()

    def snapshot(self, name: str) -> PodSnapshot:
        self.reads.append(self.version(name))
        asyncio.get_running_loop().create_task(self._tell())
        return super().snapshot(name)

    async def _tell(self) -> None:
        async with self.read:
            self.read.notify_all()

    async def stepped(self, after_reads: int, at_version: int = 0) -> None:
        """Wait until the held request read a view more than `after_reads` times, the last at `at_version` or later."""
        async with self.read:
            await asyncio.wait_for(
                self.read.wait_for(lambda: len(self.reads) > after_reads and self.reads[-1] >= at_version), 30
            )


class _Scripted:
    def __init__(self, controller: _Controller, views: _Recording, gateway: Gateway) -> None:
        self.controller, self.views, self.gateway = controller, views, gateway

    async def show(self, view: pods_pb2.GetPodResponse) -> None:
        """Send a view and wait until the held request has stepped on it."""
        version, reads = self.views.version("qwen"), len(self.views.reads)
        await self.controller.views.put(view)
        await self.views.changed("qwen", version, 30)
        assert self.views.version("qwen") == version + 1
        if self.held is not None:
            await self.until_stepped(reads, version + 1)

    async def until_stepped(self, reads: int, version: int = 0) -> None:
        """Until the held request stepped past `reads` on a view of `version` or later, or ended."""
        assert self.held is not None
        stepped = asyncio.create_task(self.views.stepped(reads, version))
        await asyncio.wait({stepped, self.held}, return_when=asyncio.FIRST_COMPLETED)
        stepped.cancel()

    held: asyncio.Task[object] | None = None


@pytest.fixture
async def scripted() -> AsyncIterator[_Scripted]:
    controller = _Controller()
    server = grpc.aio.server()
    pods_pb2_grpc.add_PodControllerServicer_to_server(controller, server)
    pods_pb2_grpc.add_PodControllerInternalServicer_to_server(controller, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    pods = [PodOptions(name="qwen")]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        views = _Recording(
            pods, pods_pb2_grpc.PodControllerStub(channel), pods_pb2_grpc.PodControllerInternalStub(channel), timeout=20
        )
        reporter = ActivityReporter(monitor_pb2_grpc.IdleMonitorInternalStub(channel), live_seconds=60, timeout=5)
        gateway = Gateway(
            pods,
            views,
            Engines(user_agent="test", connect_timeout=1),
            reporter,
            tokens=TokenRule(tokens=("t",)),
            limits=HoldLimits(max_held=4, wait_bound_seconds=50, comment_seconds=50),
        )
        await views.start()
        try:
            yield _Scripted(controller, views, gateway)
        finally:
            await views.stop()
            await server.stop(None)


async def _held(s: _Scripted, first: pods_pb2.GetPodResponse) -> asyncio.Task[object]:
    """A request held on view `first`, its wake asked and answered, and the answer stepped on."""
    await s.show(first)
    s.held = asyncio.create_task(s.gateway._hold(PodOptions(name="qwen"), None))
    await asyncio.wait_for(s.controller.asked.wait(), 30)
    reads = len(s.views.reads)
    s.controller.answer.set()
    await s.until_stepped(reads)  # the hold woke on the answer (no view changed) and stepped on it
    return s.held


async def test_a_stale_down_view_after_the_wake_answered_is_the_old_stop_and_the_request_is_forwarded(
    scripted: _Scripted,
) -> None:
    scripted.controller.history = [START, WAKE, IDLE_STOP]  # newest first: the idle stop came before the wake
    held = await _held(scripted, STALE_RUNNING)
    await scripted.show(EXITED)
    assert not held.done(), held.result()
    await scripted.show(STARTING)
    await scripted.show(READY)
    assert await asyncio.wait_for(held, 30) is None


async def test_a_stop_after_the_pod_was_seen_booting_for_this_wake_refuses_the_request_naming_it(
    scripted: _Scripted,
) -> None:
    held = await _held(scripted, STALE_RUNNING)
    await scripted.show(STARTING)
    scripted.controller.history = [IDLE_STOP, START, WAKE]  # the stop came after the wake
    await scripted.show(EXITED)
    refusal = await asyncio.wait_for(held, 30)
    assert refusal is not None and refusal.refusal is Refusal.STOPPED_WHILE_HELD  # type: ignore[attr-defined]
    assert "stopped by the idle rule" in refusal.message  # type: ignore[attr-defined]


async def test_a_down_pod_woken_for_the_request_is_forwarded_once_ready(scripted: _Scripted) -> None:
    held = await _held(scripted, EXITED)
    await scripted.show(STARTING)
    await scripted.show(READY)
    assert await asyncio.wait_for(held, 30) is None
