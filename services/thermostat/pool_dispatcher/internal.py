"""PoolDispatcherInternal: what other services of the deployment call (metering's usage and machine-life feeds).

The internal token guards it (chassis/internal_auth.py), so metering needs neither of the pool's tokens to
read every tenant's events. Kept apart from the public servicer: it reads only the two event tables, and records how
far the reader acknowledged each (retention deletes only what metering's ledger has taken).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import grpc

from thermostat.policy.pool.machine_type import Catalogue
from thermostat.policy.pool.usage_feed import Recorded, readable_count
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc

from .metering_repository import EventPage, PoolMeteringRepository
from .replies import abort
from .repository import usage_event_id

DEFAULT_PAGE = 100
MAX_PAGE = 5000


class PoolInternalServicer(pool_pb2_grpc.PoolDispatcherInternalServicer):  # type: ignore[misc]
    def __init__(
        self, repository: PoolMeteringRepository, catalogue: Callable[[], Catalogue], *, settle_seconds: float
    ) -> None:
        self.repository = repository
        self.catalogue = catalogue
        self.settle = timedelta(seconds=settle_seconds)

    async def _page(
        self,
        request: pool_pb2.ListUsageEventsRequest | pool_pb2.ListMachineEventsRequest,
        context: grpc.aio.ServicerContext,
        read: Callable[[int, int], Awaitable[EventPage]],
        feed: str,
    ) -> tuple[tuple[dict[str, Any], ...], int]:
        """The rows a reader may take after its position (never past a position still in flight), and the head.
        The reader's acknowledgement is recorded first (retention deletes only what the ledger has taken)."""
        if request.after_position < 0 or request.page_size < 0 or request.acknowledged_position < 0:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "after_position, page_size and acknowledged_position must not be negative",
            )
        if request.acknowledged_position > request.after_position:
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "acknowledged_position must not pass after_position: a reader has landed no more than it read",
            )
        if request.acknowledged_position:
            await self.repository.acknowledge(feed, request.acknowledged_position)
        page = await read(request.after_position, min(request.page_size or DEFAULT_PAGE, MAX_PAGE))
        visible = [Recorded(position=r["position"], recorded_at=r["recorded_at"]) for r in page.rows]
        take = readable_count(after=request.after_position, rows=visible, now=page.now, settle=self.settle)
        last = page.rows[-1]["position"] if page.rows else 0
        return page.rows[:take], max(page.head, request.after_position, last)

    async def ListUsageEvents(
        self, request: pool_pb2.ListUsageEventsRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.ListUsageEventsResponse:
        rows, head = await self._page(request, context, self.repository.usage_page, "usage")
        response = pool_pb2.ListUsageEventsResponse(head_position=head)
        for r in rows:
            response.events.add(
                position=r["position"],
                job_id=str(r["job_id"]),
                tenant_id=r["tenant_id"],
                machine_type=r["machine_type"],
                worker_id=str(r["worker_id"]),
                terminal_state=r["terminal_state"],
                duration_seconds=r["duration_seconds"],
                started_at=r["started_at"].timestamp(),
                ended_at=r["ended_at"].timestamp(),
                id=usage_event_id(str(r["job_id"])),
                duration_ms=r["duration_seconds"] * 1000.0,
                completed_at=r["ended_at"].timestamp(),
            )
        return response

    async def ListMachineEvents(
        self, request: pool_pb2.ListMachineEventsRequest, context: grpc.aio.ServicerContext
    ) -> pool_pb2.ListMachineEventsResponse:
        rows, head = await self._page(request, context, self.repository.machine_events_page, "machines")
        catalogue = self.catalogue()
        response = pool_pb2.ListMachineEventsResponse(head_position=head)
        for r in rows:
            event = response.events.add(
                position=r["position"],
                machine_id=str(r["machine_id"]),
                tenant_id=r["tenant_id"],
                machine_type=r["machine_type"],
                event=r["event"],
                at=r["at"].timestamp(),
            )
            machine_type = catalogue.get(r["machine_type"])
            if machine_type is not None and machine_type.price_per_hour is not None:
                event.price_per_hour = machine_type.price_per_hour
        return response
