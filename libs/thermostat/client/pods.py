"""Model pods: the pod controller (wake, stop, status, watch, history), the idle monitor's view, and the pod's
spend and budget from metering."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

import grpc

from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc
from thermostat.monitor.v1 import monitor_pb2, monitor_pb2_grpc
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc

from . import errors
from ._calls import Calls, bearer
from .progress import Phase, WakeProgress, goes_forward, progress_of

WAITING = "Waiting"  # the wake ran out of polls before the pod ran: the seed's "poll again"


class AsyncPods:
    def __init__(self, calls: Calls) -> None:
        self._calls = calls
        self._pods = pods_pb2_grpc.PodControllerStub(calls.channel("pods"))
        self._monitor = monitor_pb2_grpc.IdleMonitorStub(calls.channel("monitor"))
        self._metering = metering_pb2_grpc.MeteringStub(calls.channel("metering"))

    def _waker(self) -> str | None:
        config = self._calls.config
        return config.wake_token or config.operator_token

    async def start(self, name: str, *, timeout: float | None = None) -> pods_pb2.StartPodResponse:
        """Wake the pod (StartPod): the wake token, else the operator token. It may bill, so it is retried only
        when it never reached the server; a refused wake (a budget, no GPU under the cap) is errors.WakeFailed.
        The controller answers once the pod runs (or Waiting when its polls run out), so the default deadline
        is the config's wait_timeout."""
        try:
            response: pods_pb2.StartPodResponse = await self._calls.transport.unary(
                self._pods.StartPod,
                pods_pb2.StartPodRequest(name=name),
                metadata=bearer(self._waker()),
                timeout=self._calls.wait_deadline(timeout),
                may_bill=True,
            )
        except errors.Conflict as error:
            raise errors.WakeFailed(error.code, error.detail) from None
        return response

    async def stop(self, name: str, *, timeout: float | None = None) -> pods_pb2.StopPodResponse:
        """Stop every pod on the pod's volume (StopPod, the operator token)."""
        response: pods_pb2.StopPodResponse = await self._calls.transport.unary(
            self._pods.StopPod,
            pods_pb2.StopPodRequest(name=name),
            metadata=bearer(self._calls.config.operator_token),
            timeout=self._calls.deadline(timeout),
        )
        return response

    async def status(self, name: str, *, timeout: float | None = None) -> pods_pb2.GetPodResponse:
        response: pods_pb2.GetPodResponse = await self._calls.transport.unary(
            self._pods.GetPod, pods_pb2.GetPodRequest(name=name), metadata=(), timeout=self._calls.deadline(timeout)
        )
        return response

    def watch(self, name: str, *, timeout: float | None = None) -> AsyncGenerator[pods_pb2.WatchPodResponse, None]:
        """WatchPod: the pod's view each time it changes, until `timeout` (default the config's wait_timeout)."""
        return self._calls.transport.stream(
            self._pods.WatchPod,
            pods_pb2.WatchPodRequest(name=name),
            metadata=(),
            timeout=self._calls.wait_deadline(timeout),
        )

    async def history(
        self, name: str, page_size: int = 20, page_token: str = "", *, timeout: float | None = None
    ) -> pods_pb2.GetPodHistoryResponse:
        response: pods_pb2.GetPodHistoryResponse = await self._calls.transport.unary(
            self._pods.GetPodHistory,
            pods_pb2.GetPodHistoryRequest(name=name, page_size=page_size, page_token=page_token),
            metadata=(),
            timeout=self._calls.deadline(timeout),
        )
        return response

    async def monitor(self, name: str, *, timeout: float | None = None) -> monitor_pb2.GetMonitorStateResponse:
        """The idle monitor's view of the pod (phase, streaks, projected stop)."""
        response: monitor_pb2.GetMonitorStateResponse = await self._calls.transport.unary(
            self._monitor.GetMonitorState,
            monitor_pb2.GetMonitorStateRequest(name=name),
            metadata=(),
            timeout=self._calls.deadline(timeout),
        )
        return response

    async def spend(self, name: str, *, timeout: float | None = None) -> metering_pb2.GetPodSpendResponse:
        response: metering_pb2.GetPodSpendResponse = await self._calls.transport.unary(
            self._metering.GetPodSpend,
            metering_pb2.GetPodSpendRequest(name=name),
            metadata=(),
            timeout=self._calls.deadline(timeout),
        )
        return response

    async def budget(self, name: str, *, timeout: float | None = None) -> metering_pb2.PodBudget:
        response: metering_pb2.PodBudget = await self._calls.transport.unary(
            self._metering.GetPodBudget,
            metering_pb2.GetPodBudgetRequest(name=name),
            metadata=(),
            timeout=self._calls.deadline(timeout),
        )
        return response

    async def set_budget(
        self,
        name: str,
        daily_usd: float | None = None,
        monthly_usd: float | None = None,
        *,
        timeout: float | None = None,
    ) -> metering_pb2.PodBudget:
        """Set both ceilings (one left None clears it), the operator token."""
        request = metering_pb2.SetPodBudgetRequest(name=name)
        if daily_usd is not None:
            request.daily_usd = daily_usd
        if monthly_usd is not None:
            request.monthly_usd = monthly_usd
        response: metering_pb2.PodBudget = await self._calls.transport.unary(
            self._metering.SetPodBudget,
            request,
            metadata=bearer(self._calls.config.operator_token),
            timeout=self._calls.deadline(timeout),
        )
        return response

    async def ensure_ready(self, name: str, timeout: float = 900) -> AsyncIterator[WakeProgress]:
        """Wake the pod and follow it until the model answers, yielding each change of phase.

        The first step is `waking` (no outcome yet), at once. StartPod and WatchPod then run side by side: the
        wake answers once the pod runs (a step `waking` with the wake's `outcome`), while the watch reports
        provisioning, starting and loading with the controller's ETA. Ends after yielding `ready`. Raises
        errors.WakeFailed when the wake is refused or the pod is down after it, errors.DeadlineExceeded past
        `timeout` seconds. A wake that answered Waiting (its polls ran out before the pod ran) is asked again
        once the pod is seen down, as the seed says; a down view is confirmed with a fresh GetPod first, since
        the watch may hand over a view built before the wake answered.
        """
        clock = self._calls.transport.clock
        deadline = clock() + self._calls.wait_deadline(timeout)

        def left() -> float:
            remaining = deadline - clock()
            if remaining <= 0:
                raise errors.DeadlineExceeded(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"{name} was not ready within {timeout:g} s"
                )
            return remaining

        async def fresh() -> pods_pb2.GetPodResponse:
            return await self.status(name, timeout=min(self._calls.config.timeout, left()))

        yield WakeProgress(Phase.WAKING, f"waking {name}", None, None)
        wakes = 1
        start: asyncio.Task[pods_pb2.StartPodResponse] | None = asyncio.create_task(self.start(name, timeout=left()))
        woke: pods_pb2.StartPodResponse | None = None
        stream = self.watch(name, timeout=left())
        view: asyncio.Task[pods_pb2.WatchPodResponse | None] | None = None
        last: WakeProgress | None = None
        reached: str = Phase.WAKING  # the furthest phase reported: none earlier follows it (progress.goes_forward)
        try:
            while True:
                if view is None:
                    view = asyncio.create_task(_next(stream))
                done, _ = await asyncio.wait(
                    {view} if start is None else {view, start}, timeout=left(), return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    continue  # left() raises once the deadline has passed
                if start is not None and start in done:
                    woke, start = start.result(), None  # a refused wake raises here (WakeFailed, Unauthenticated...)
                    yield _woken(name, woke, reached)
                    # the pod as it is now: the watch says nothing until the view changes again
                    step = progress_of(await fresh())
                else:
                    message, view = view.result(), None
                    if message is None:  # the controller ended the stream (a restart, a drain): watch again
                        await stream.aclose()
                        stream = self.watch(name, timeout=left())
                        continue
                    step = progress_of(message.pod)
                    if step.phase == Phase.DOWN and start is not None:
                        continue  # the wake has not taken effect yet
                    if step.phase == Phase.DOWN:
                        step = progress_of(await fresh())  # the watch may hand over a view older than the wake
                if step.phase == Phase.DOWN:
                    if woke is None or woke.outcome != WAITING or wakes >= MAX_WAKES:
                        outcome = woke.outcome if woke is not None else "no answer"
                        raise errors.WakeFailed(grpc.StatusCode.ABORTED, f"{step.detail} after the wake ({outcome})")
                    wakes += 1
                    start = asyncio.create_task(self.start(name, timeout=left()))
                    continue
                if step.phase == Phase.READY and start is not None:
                    # ready before the wake answered (it found the pod up): its answer comes first, for order
                    await asyncio.wait({start}, timeout=left())
                    if not start.done():
                        left()
                        continue
                    woke, start = start.result(), None
                    yield _woken(name, woke, reached)
                if not goes_forward(reached, step.phase):
                    continue  # a view of an earlier phase than one reported (a wake asked again): not shown
                if last is None or _shown(step) != _shown(last):
                    yield step
                    reached = step.phase
                last = step
                if step.phase == Phase.READY:
                    return
        finally:
            running = [task for task in (view, start) if task is not None]
            for task in running:
                task.cancel()
            # the view task may be inside the stream: it must have let go before the stream can be closed
            await asyncio.gather(*running, return_exceptions=True)
            await stream.aclose()


def _shown(step: WakeProgress) -> tuple[str, bool]:
    """What makes a step worth yielding: a new phase, or an ETA where there was none."""
    return step.phase, step.eta_seconds is None


MAX_WAKES = 3  # a Waiting wake asked again at most twice: a pod that never holds is a failed wake


async def _next(stream: AsyncIterator[pods_pb2.WatchPodResponse]) -> pods_pb2.WatchPodResponse | None:
    """The stream's next message, None at its end (a task cannot carry StopAsyncIteration)."""
    try:
        return await anext(stream)
    except StopAsyncIteration:
        return None


def _woken(name: str, woke: pods_pb2.StartPodResponse, reached: str) -> WakeProgress:
    """The wake's answer, in the furthest phase reported: after the watch showed the boot it is no step back."""
    detail = f"{name}: {woke.outcome}" + (f" ({woke.message})" if woke.message else "")
    return WakeProgress(reached, detail, None, None, outcome=woke.outcome)
