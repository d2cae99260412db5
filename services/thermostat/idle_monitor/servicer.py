"""GetMonitorState: what the monitor believes about a pod after its last tick, and when it would stop it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

import grpc

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.lookup import found_or_abort
from thermostat.chassis.request_context import outgoing_metadata
from thermostat.chassis.timestamps import stamp
from thermostat.monitor.v1 import monitor_pb2, monitor_pb2_grpc
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.common.echo import quoted
from thermostat.policy.common.pod_options import PodOptions, find_pod
from thermostat.policy.common.warm_hours import WarmHours, inside_warm_hours
from thermostat.policy.idle.idle_phase import Phase
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_watch import Watch, watch_reason
from thermostat.policy.idle.projected_stop import project_stop
from thermostat.store.connections import STORE_ERRORS

from .repository import MonitorRepository

# the pod-control seed's spelling of the signals and phases (RunPodIdlePolicy), whatever the policy's enums are called
SIGNAL_NAMES = {
    "BUSY": "Busy",
    "IDLE": "Idle",
    "UNREACHABLE_BUT_RUNNING": "UnreachableButRunning",
    "BOOTING": "Booting",
    "NOT_RUNNING": "NotRunning",
    "UNKNOWN": "Unknown",
}
PHASE_NAMES = {Phase.DOWN: "Down", Phase.BOOTING: "Booting", Phase.READY: "Ready"}


class IdleMonitorServicer(monitor_pb2_grpc.IdleMonitorServicer):  # type: ignore[misc]
    def __init__(
        self,
        pods: Sequence[PodOptions],
        states: MonitorRepository,
        options: MonitorOptions,
        controller: pods_pb2_grpc.PodControllerStub,
        controller_timeout: float,
        *,
        watch_of: Callable[[str], Watch],
        store_read_timeout: float = 1.5,
        warm_hours: Mapping[str, WarmHours | None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.pods = pods
        self.warm_hours = warm_hours or {}
        self.clock = clock
        self.watch_of = watch_of  # pod name -> whether this replica watches it
        self.states = states
        self.options = options
        self.controller = controller
        self.controller_timeout = controller_timeout
        self.store_read_timeout = store_read_timeout

    async def GetMonitorState(
        self, request: monitor_pb2.GetMonitorStateRequest, context: grpc.aio.ServicerContext
    ) -> monitor_pb2.GetMonitorStateResponse:
        pod = await found_or_abort(
            find_pod(self.pods, request.name), context, f"unknown pod name {quoted(request.name)}"
        )
        try:  # bounded as the controller's reads are: a frozen store answers 503 now, not 500 after 30 s
            async with asyncio.timeout(self.store_read_timeout):
                saved = await self.states.load(pod.name)
        except STORE_ERRORS:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the store could not be read; no state to show")
        o, state = self.options, saved.state
        response = monitor_pb2.GetMonitorStateResponse(
            name=pod.name,
            phase=PHASE_NAMES[state.phase],
            idle_streak=state.counters.idle_streak,
            idle_threshold=o.idle_threshold,
            booting_ticks=state.counters.booting_ticks,
            boot_grace_threshold=o.boot_grace_threshold,
            last_signal=SIGNAL_NAMES.get(saved.last_signal, saved.last_signal),
            last_signal_pod_id=saved.last_signal_pod_id,
            runtime_cap_minutes=o.max_runtime_minutes,
            check_seconds=o.check_seconds,
        )
        watch = self.watch_of(pod.name)
        response.watch, response.watch_reason = str(watch), watch_reason(watch)
        for field, value in (("runtime_cap_start", state.cap_started_at), ("last_tick_at", saved.last_tick_at)):
            if value is not None:
                stamp(getattr(response, field), value)
        ready = [t for t in state.readiness.values()]
        if ready:
            stamp(response.ready_since, min(ready))
        stalled_pod, response.stall_ticks = state.stall
        response.stall_threshold, response.stalled_pod_id = o.stall_threshold, stalled_pod or ""
        hours = self.warm_hours.get(pod.name)
        if hours is not None:
            now = self.clock.now()
            response.warm_hours = hours.text
            response.in_warm_hours = inside_warm_hours(hours, now, lead=o.idle_window)
            window = hours.upcoming(now) if response.in_warm_hours else None
            if window is not None:
                stamp(response.warm_until, window.end)
        projected = project_stop(
            state,
            watch=watch,
            last_tick_at=saved.last_tick_at,
            last_signal=saved.last_signal,
            options=o,
            warm_hours=hours,
        )
        if projected is not None:
            stamp(response.projected_stop_at, projected.at)
            response.projected_stop_trigger = str(projected.trigger)
        if state.phase is Phase.BOOTING:
            try:
                view = await self.controller.GetPod(
                    pods_pb2.GetPodRequest(name=pod.name), timeout=self.controller_timeout, metadata=outgoing_metadata()
                )
                if view.HasField("eta_seconds"):
                    response.eta_seconds = view.eta_seconds
            except grpc.aio.AioRpcError:
                pass  # the estimate is a nicety; the state itself is served without it
        return response
