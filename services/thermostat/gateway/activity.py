"""Exact activity for the idle monitor: this gateway replica's requests per pod, reported as they start and end.

The monitor reads the engine's gauges once a tick, so a chat turn between two ticks is invisible to them (#2075).
The gateway reports its own counts (IdleMonitorInternal.ReportRequests; policy/idle/request_activity.py): in flight
now and every start and end seen. A start is reported in the background a moment after the request goes up (a report is
a gRPC call on the event loop that forwards: made at once it would delay the answer's first byte); an end
is reported before the request's handler returns, so a turn that ended is on the record before anything else can
happen. Reports to one pod go one at a time, each carrying the counts as they are when it is sent, and the monitor
keeps the largest count it was sent: a late report never rolls one back. While requests are in flight the counts are
reported again every third of their live time, so a gateway that dies keeps no pod up for long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass, field

import grpc

from thermostat.chassis.request_context import outgoing_metadata
from thermostat.monitor.v1 import monitor_pb2, monitor_pb2_grpc

log = logging.getLogger("thermostat.gateway")


@dataclass
class _Counts:
    in_flight: int = 0
    events: int = 0
    sent: tuple[int, int] = (0, 0)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: asyncio.Task[None] | None = None


class ActivityReporter:
    def __init__(self, stub: monitor_pb2_grpc.IdleMonitorInternalStub, *, live_seconds: float, timeout: float) -> None:
        self.stub = stub
        self.reporter = f"gateway-{uuid.uuid4().hex[:12]}"
        self.live_seconds = live_seconds
        self.timeout = timeout
        self._counts: dict[str, _Counts] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._warned = False

    def in_flight(self, pod: str) -> int:
        return self._counts[pod].in_flight if pod in self._counts else 0

    def started(self, pod: str) -> None:
        """Count a start now; `announce` reports it (after the answer's first byte: off the first byte's path)."""
        counts = self._counts.setdefault(pod, _Counts())
        counts.in_flight += 1
        counts.events += 1

    def announce(self, pod: str) -> None:
        """Report the pod's counts in the background."""
        self._schedule(pod, self._counts[pod])

    def finished(self, pod: str) -> asyncio.Task[None]:
        """Count the end now; the report's task, which the handler awaits (a cancelled one does not)."""
        counts = self._counts[pod]
        counts.in_flight -= 1
        counts.events += 1
        return self._schedule(pod, counts)

    def _schedule(self, pod: str, counts: _Counts) -> asyncio.Task[None]:
        task = asyncio.create_task(self._push(pod, counts), name=f"gateway-report:{pod}")
        counts.pending = task
        return task

    async def _push(self, pod: str, counts: _Counts) -> None:
        async with counts.lock:
            now = (counts.in_flight, counts.events)
            if now == counts.sent and counts.in_flight == 0:
                return  # an earlier report already carried these counts
            request = monitor_pb2.ReportRequestsRequest(
                name=pod,
                reporter=self.reporter,
                in_flight=now[0],
                events=now[1],
                live_seconds=self.live_seconds,
            )
            try:
                await self.stub.ReportRequests(
                    request, timeout=self.timeout, metadata=outgoing_metadata(), wait_for_ready=True
                )
            except grpc.aio.AioRpcError as error:
                if not self._warned:
                    self._warned = True
                    log.warning(
                        "pod %s: request activity not reported to the idle monitor (%s); it reads /metrics alone "
                        "until a report lands",
                        pod,
                        error.code().name,
                    )
                return
            counts.sent = now
            self._warned = False

    async def start(self) -> None:
        self._renewer = asyncio.create_task(self._renew(), name="gateway-report-renewal")

    async def stop(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.live_seconds / 3)
            for pod, counts in self._counts.items():
                if counts.in_flight > 0:
                    counts.sent = (-1, -1)  # a renewal is sent even when nothing changed
                    self._schedule(pod, counts)
