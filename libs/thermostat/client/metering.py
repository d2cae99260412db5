"""Metering (thermostat.metering.v1.Metering): the pool's spend and tenant budgets (the pool's tokens), and the
ledger's state. A pod's spend and budget are on `pods`."""

from __future__ import annotations

from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc

from ._calls import TENANT_HEADER, Calls, bearer
from .transport import Metadata


class AsyncMetering:
    def __init__(self, calls: Calls) -> None:
        self._calls = calls
        self._stub = metering_pb2_grpc.MeteringStub(calls.channel("metering"))

    def _pool_metadata(self, tenant: str | None) -> Metadata:
        """The admin token when configured (every tenant), else the API token with the caller's tenant."""
        config = self._calls.config
        if config.pool_admin_token:
            return bearer(config.pool_admin_token)
        return (*bearer(config.pool_token), (TENANT_HEADER, self._calls.tenant(tenant)))

    async def pool_spend(
        self,
        tenant_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
        page_size: int = 0,
        page_token: str = "",
        *,
        tenant: str | None = None,
        all_tenants: bool = False,
        timeout: float | None = None,
    ) -> metering_pb2.GetPoolSpendResponse:
        """Machine and job time per tenant and machine type in [since, until) (epoch seconds; default this UTC
        month to now); scoped as the pool's workers (`tenant_id`, else the tenant, else with `all_tenants` every
        tenant's for the admin token)."""
        metadata, scope = self._calls.listing(tenant_id, tenant, all_tenants)
        request = metering_pb2.GetPoolSpendRequest(
            tenant_id=scope,
            since=since or 0.0,
            until=until or 0.0,
            page_size=page_size,
            page_token=page_token,
        )
        response: metering_pb2.GetPoolSpendResponse = await self._calls.transport.unary(
            self._stub.GetPoolSpend,
            request,
            metadata=metadata,
            timeout=self._calls.deadline(timeout),
        )
        return response

    async def tenant_budget(self, tenant_id: str, *, timeout: float | None = None) -> metering_pb2.TenantBudget:
        """A tenant's ceilings and spend (the admin token, or the tenant's own API token)."""
        response: metering_pb2.TenantBudget = await self._calls.transport.unary(
            self._stub.GetTenantBudget,
            metering_pb2.GetTenantBudgetRequest(tenant_id=tenant_id),
            metadata=self._pool_metadata(tenant_id),
            timeout=self._calls.deadline(timeout),
        )
        return response

    async def set_tenant_budget(
        self,
        tenant_id: str,
        daily_usd: float | None = None,
        monthly_usd: float | None = None,
        *,
        timeout: float | None = None,
    ) -> metering_pb2.TenantBudget:
        """Set both ceilings (one left None clears it); the pool admin token (PermissionDenied with the API
        token alone)."""
        request = metering_pb2.SetTenantBudgetRequest(tenant_id=tenant_id)
        if daily_usd is not None:
            request.daily_usd = daily_usd
        if monthly_usd is not None:
            request.monthly_usd = monthly_usd
        config = self._calls.config
        response: metering_pb2.TenantBudget = await self._calls.transport.unary(
            self._stub.SetTenantBudget,
            request,
            metadata=bearer(config.pool_admin_token or config.pool_token),
            timeout=self._calls.deadline(timeout),
        )
        return response

    async def ledger(self, *, timeout: float | None = None) -> metering_pb2.GetLedgerStatusResponse:
        """Each feed's position, head, lag and last read error."""
        response: metering_pb2.GetLedgerStatusResponse = await self._calls.transport.unary(
            self._stub.GetLedgerStatus,
            metering_pb2.GetLedgerStatusRequest(),
            metadata=(),
            timeout=self._calls.deadline(timeout),
        )
        return response
