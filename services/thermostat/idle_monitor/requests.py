"""IdleMonitorInternal.ReportRequests: the inference gateway's exact activity per pod, kept in the store where every
monitor replica's tick reads it (policy/idle/request_activity.py)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import grpc

from thermostat.monitor.v1 import monitor_pb2, monitor_pb2_grpc
from thermostat.policy.common.pod_options import PodOptions, find_pod
from thermostat.store.connections import STORE_ERRORS

from .repository import MonitorRepository

log = logging.getLogger("thermostat.idle_monitor")

DEFAULT_LIVE_SECONDS = 60.0
MAX_LIVE_SECONDS = 3600.0


class RequestReports(monitor_pb2_grpc.IdleMonitorInternalServicer):  # type: ignore[misc]
    def __init__(self, pods: Sequence[PodOptions], states: MonitorRepository) -> None:
        self.pods = pods
        self.states = states

    async def ReportRequests(
        self, request: monitor_pb2.ReportRequestsRequest, context: grpc.aio.ServicerContext
    ) -> monitor_pb2.ReportRequestsResponse:
        pod = find_pod(self.pods, request.name)
        if pod is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no pod named {request.name!r}")
        assert pod is not None
        if not request.reporter.strip():
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "reporter must name the gateway process")
        if request.in_flight < 0 or request.events < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "in_flight and events must not be negative")
        live = request.live_seconds or DEFAULT_LIVE_SECONDS
        if not math.isfinite(live) or not 0 < live <= MAX_LIVE_SECONDS:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"live_seconds must be over 0 and at most {MAX_LIVE_SECONDS:g}"
            )
        try:
            await self.states.save_requests(
                pod.name, request.reporter, in_flight=request.in_flight, events=request.events, live_seconds=live
            )
        except STORE_ERRORS as error:
            log.warning("pod %s: request counts not recorded (%s)", pod.name, type(error).__name__)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the store could not be written; report again")
        return monitor_pb2.ReportRequestsResponse()
