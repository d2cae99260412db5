"""GetMonitorState: what the monitor believes about a pod after its last tick, and when it would stop it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import grpc

from thermostat.chassis.request_context import outgoing_metadata
from thermostat.monitor.v1 import monitor_pb2, monitor_pb2_grpc
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.policy.idle_phase import Phase, StopTrigger
from thermostat.policy.monitor_options import MonitorOptions
from thermostat.policy.monitor_watch import Watch, watch_reason
from thermostat.policy.pod_options import PodOptions, find_pod
from thermostat.policy.pod_signal import PodSignal

from .repository import MonitorRepository, SavedState

# the seed's spelling of the signals and phases (RunPodIdlePolicy), whatever the policy's enums are called
SIGNAL_NAMES = {"BUSY": "Busy", "IDLE": "Idle", "UNREACHABLE_BUT_RUNNING": "UnreachableButRunning",
                "BOOTING": "Booting", "NOT_RUNNING": "NotRunning", "UNKNOWN": "Unknown"}
PHASE_NAMES = {Phase.DOWN: "Down", Phase.BOOTING: "Booting", Phase.READY: "Ready"}


# signals on which a Ready pod's idle streak grows: read as every tick from now, they end in an idle stop
_IDLE_ACCRUING = frozenset({str(PodSignal.IDLE), str(PodSignal.UNREACHABLE_BUT_RUNNING)})


def projected_stop(saved: SavedState, options: MonitorOptions) -> tuple[datetime, StopTrigger] | None:
    """When the monitor would stop the pod if every tick from now read like the last one that counts.

    A busy Ready pod never idles under that reading, so only its cap projects. Stops happen on ticks, so a
    wall-clock deadline projects onto the first tick at or after it (a 12.5-minute cap fires on the 13th
    minute's tick at CHECK_SECONDS=60).
    """
    state, last = saved.state, saved.last_tick_at
    if last is None:
        return None
    candidates: list[tuple[datetime, StopTrigger]] = []
    check = timedelta(seconds=options.check_seconds)
    counters = state.counters
    # a Busy tick resets the streak; Unknown holds it, so a streak above 0 says the last counting tick accrued
    idle_accruing = counters.idle_streak > 0 or saved.last_signal in _IDLE_ACCRUING
    if state.phase is Phase.READY and idle_accruing:
        candidates.append((last + check * max(1, options.idle_threshold - counters.idle_streak), StopTrigger.IDLE))
    if state.phase is Phase.BOOTING and options.boot_grace_threshold:
        candidates.append((last + check * max(1, options.boot_grace_threshold - counters.booting_ticks),
                           StopTrigger.BOOT_GRACE))
    if state.cap_started_at is not None and options.max_runtime is not None:
        deadline = state.cap_started_at + options.max_runtime
        ticks_to_go = max(1, -((last - deadline) // check))  # ceil, in exact timedelta arithmetic
        candidates.append((last + check * ticks_to_go, StopTrigger.RUNTIME_CAP))
    return min(candidates, key=lambda c: c[0]) if candidates else None


class IdleMonitorServicer(monitor_pb2_grpc.IdleMonitorServicer):  # type: ignore[misc]
    def __init__(self, pods: Sequence[PodOptions], states: MonitorRepository, options: MonitorOptions,
                 controller: pods_pb2_grpc.PodControllerStub, controller_timeout: float, *,
                 watch_of: Callable[[str], Watch]) -> None:
        self.pods = pods
        self.watch_of = watch_of  # pod name -> whether this replica watches it
        self.states = states
        self.options = options
        self.controller = controller
        self.controller_timeout = controller_timeout

    async def GetMonitorState(self, request: monitor_pb2.GetMonitorStateRequest,
                              context: grpc.aio.ServicerContext) -> monitor_pb2.GetMonitorStateResponse:
        pod = find_pod(self.pods, request.name)
        if pod is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown pod name {request.name!r}")
        assert pod is not None
        saved = await self.states.load(pod.name)
        o, state = self.options, saved.state
        response = monitor_pb2.GetMonitorStateResponse(
            name=pod.name, phase=PHASE_NAMES[state.phase], idle_streak=state.counters.idle_streak,
            idle_threshold=o.idle_threshold, booting_ticks=state.counters.booting_ticks,
            boot_grace_threshold=o.boot_grace_threshold,
            last_signal=SIGNAL_NAMES.get(saved.last_signal, saved.last_signal),
            last_signal_pod_id=saved.last_signal_pod_id, runtime_cap_minutes=o.max_runtime_minutes,
            check_seconds=o.check_seconds)
        watch = self.watch_of(pod.name)
        response.watch, response.watch_reason = str(watch), watch_reason(watch)
        for field, value in (("runtime_cap_start", state.cap_started_at), ("last_tick_at", saved.last_tick_at)):
            if value is not None:
                getattr(response, field).FromDatetime(value.astimezone(UTC))
        ready = [t for t in state.readiness.values()]
        if ready:
            response.ready_since.FromDatetime(min(ready).astimezone(UTC))
        # an unwatched pod is stopped by no tick: no projection from a state that no tick moves
        projected = projected_stop(saved, o) if watch is Watch.WATCHING else None
        if projected is not None:
            response.projected_stop_at.FromDatetime(projected[0].astimezone(UTC))
            response.projected_stop_trigger = str(projected[1])
        if state.phase is Phase.BOOTING:
            try:
                view = await self.controller.GetPod(pods_pb2.GetPodRequest(name=pod.name),
                                                    timeout=self.controller_timeout, metadata=outgoing_metadata())
                if view.HasField("eta_seconds"):
                    response.eta_seconds = view.eta_seconds
            except grpc.aio.AioRpcError:
                pass  # the estimate is a nicety; the state itself is served without it
        return response
