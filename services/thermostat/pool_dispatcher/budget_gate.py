"""The pool obeys tenant budgets (issue 12): with METERING_ADDR set, a submit or a hint of a tenant over its
budget starts nothing and queues nothing.

Metering judges (MeteringInternal.CheckTenantBudget, the tenant's machine spend today and this month against
its ceilings); this module only asks and words the refusal. Fail closed: metering unreachable, or not
answering within METERING_TIMEOUT_SECONDS, refuses as a reached budget does — a ceiling that cannot be read is
not "no ceiling". A refused submit is recorded as a job that failed before it was queued, its error carrying
the numbers; a refused hint is logged with them.

The check waits for metering's channel to be ready, within the same timeout (wait_for_ready): a channel between
reconnect attempts (metering restarted, or started after the pool) would otherwise fail the call at once with
UNAVAILABLE, refusing a submit that metering, back a moment later, would have allowed.
"""

from __future__ import annotations

import grpc

from thermostat.chassis.request_context import outgoing_metadata
from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc


class BudgetGate:
    """Asks metering whether a tenant may start more; `stub` None (no METERING_ADDR): every tenant may."""

    def __init__(self, stub: metering_pb2_grpc.MeteringInternalStub | None, *, timeout: float = 2.0) -> None:
        self.stub = stub
        self.timeout = timeout

    async def refusal(self, tenant_id: str) -> str | None:
        """Why the tenant may start nothing now, with the numbers; None when it may."""
        if self.stub is None:
            return None
        try:
            reply = await self.stub.CheckTenantBudget(
                metering_pb2.CheckTenantBudgetRequest(tenant_id=tenant_id),
                timeout=self.timeout,
                metadata=outgoing_metadata(),
                wait_for_ready=True,
            )
        except grpc.aio.AioRpcError as error:
            return (
                f"tenant {tenant_id}: budget unreadable, metering answered {error.code().name}; "
                "refused (fail closed: a ceiling that cannot be read is not no ceiling)"
            )
        if reply.allowed:
            return None
        return (
            f"{reply.reason} [budget={reply.budget} limit_usd={reply.limit_usd:.4f} spent_usd={reply.spent_usd:.4f} "
            f"today_usd={reply.today_usd:.4f} month_usd={reply.month_usd:.4f}]"
        )

    async def exhausted(self, tenant_id: str) -> str | None:
        """Why the tenant's warm machines should go now (its spend has reached a ceiling); None otherwise.

        Unlike a start, an unreadable budget reaps nothing: a metering blip must not stop machines that jobs
        are about to reuse (a start is still refused meanwhile, so nothing new bills)."""
        if self.stub is None:
            return None
        try:
            reply = await self.stub.CheckTenantBudget(
                metering_pb2.CheckTenantBudgetRequest(tenant_id=tenant_id),
                timeout=self.timeout,
                metadata=outgoing_metadata(),
                wait_for_ready=True,
            )
        except grpc.aio.AioRpcError:
            return None
        return reply.reason if reply.exhausted else None
