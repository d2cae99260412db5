"""Model pods: the pod controller (wake, stop, status, watch, history), the idle monitor's view, and the pod's
spend and budget from metering."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc
from thermostat.monitor.v1 import monitor_pb2, monitor_pb2_grpc
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc

from . import errors
from ._calls import Calls, bearer
from .progress import Phase, WakeProgress, progress_of

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
        when it never reached the server; a refused wake (a budget, no GPU under the cap) is errors.WakeFailed."""
        try:
            response: pods_pb2.StartPodResponse = await self._calls.transport.unary(
                self._pods.StartPod,
                pods_pb2.StartPodRequest(name=name),
                metadata=bearer(self._waker()),
                timeout=self._calls.deadline(timeout),
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

    def watch(self, name: str, *, timeout: float | None = None) -> AsyncIterator[pods_pb2.WatchPodResponse]:
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
        """Wake the pod and follow it until the model answers, yielding each change of phase or ETA.

        Ends after yielding the `ready` step. Raises errors.WakeFailed when the wake is refused or the pod goes
        down while it boots, errors.DeadlineExceeded past `timeout` seconds. A wake that answered Waiting (it
        ran out of polls before the pod ran) is asked again once the pod is seen down, as the seed says.
        """
        loop_clock = self._calls.transport.clock
        deadline = loop_clock() + self._calls.wait_deadline(timeout)

        def left() -> float:
            remaining = deadline - loop_clock()
            if remaining <= 0:
                raise errors.DeadlineExceeded(
                    grpc.StatusCode.DEADLINE_EXCEEDED, f"{name} was not ready within {timeout:g} s"
                )
            return remaining

        woke = await self.start(name, timeout=min(self._calls.config.timeout, left()))
        yield WakeProgress(Phase.WAKING, f"{name}: {woke.outcome}. {woke.message}".strip(), None, None)
        last: WakeProgress | None = None
        while True:
            async for message in self.watch(name, timeout=left()):
                step = progress_of(message.pod)
                if step.phase == Phase.DOWN:
                    if woke.outcome != WAITING:
                        detail = f"{step.detail} after the wake ({woke.outcome})"
                        raise errors.WakeFailed(grpc.StatusCode.ABORTED, detail)
                    woke = await self.start(name, timeout=min(self._calls.config.timeout, left()))
                    yield WakeProgress(Phase.WAKING, f"{name}: {woke.outcome}. {woke.message}".strip(), None, None)
                    break  # watch again: the view before this wake is stale
                if last is None or (step.phase, step.eta_seconds) != (last.phase, last.eta_seconds):
                    yield step
                last = step
                if step.phase == Phase.READY:
                    return
            else:
                # the controller ended the stream (it restarted, or drained): watch again
                left()
