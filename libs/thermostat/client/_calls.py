"""What every sub-client shares: the transport, the config, and the metadata a call carries."""

from __future__ import annotations

from dataclasses import dataclass

from grpc import aio

from .config import ClientConfig
from .transport import Metadata, Transport

TENANT_HEADER = "x-strata-tenant"


def bearer(token: str | None) -> Metadata:
    """An Authorization header for `token` (none when there is no token: the server then says UNAUTHENTICATED)."""
    return (("authorization", f"Bearer {token}"),) if token else ()


@dataclass(frozen=True, slots=True)
class Calls:
    transport: Transport
    config: ClientConfig

    def channel(self, service: str) -> aio.Channel:
        return self.transport.channel(self.config.target_of(service))

    def deadline(self, timeout: float | None) -> float:
        """A unary call's deadline: the call's own, else the config's."""
        return self.config.timeout if timeout is None else _positive("timeout", timeout)

    def wait_deadline(self, timeout: float | None) -> float:
        """A stream's or a job wait's deadline: the call's own, else the config's wait_timeout."""
        return self.config.wait_timeout if timeout is None else _positive("timeout", timeout)

    def tenant(self, tenant: str | None) -> str:
        chosen = (tenant or "").strip() or self.config.tenant
        if not chosen:
            raise ValueError("tenant: pass tenant= or set STRATA_TENANT (the pool scopes every job to a tenant)")
        return chosen

    def listing(self, tenant_id: str | None, tenant: str | None, all_tenants: bool) -> tuple[Metadata, str]:
        """A pool listing's metadata and `tenant_id` (listed_tenant): the admin token when configured, else the API
        token with the caller's tenant."""
        config = self.config
        admin = bool(config.pool_admin_token)
        chosen = (tenant or "").strip() or config.tenant
        scope = listed_tenant(admin=admin, tenant_id=tenant_id, tenant=chosen, all_tenants=all_tenants)
        if admin:
            return bearer(config.pool_admin_token), scope
        return (*bearer(config.pool_token), (TENANT_HEADER, self.tenant(tenant))), scope


def listed_tenant(*, admin: bool, tenant_id: str | None, tenant: str | None, all_tenants: bool) -> str:
    """The `tenant_id` a listing (workers, usage, pool spend) asks for; "" is every tenant the token sees.

    The pool answers an admin listing for every tenant and ignores X-Strata-Tenant, so with README's exports (the
    admin token beside STRATA_TENANT) `thermostat workers` listed every tenant's machines as "the tenant's"
    (issue 35). A tenant given (the argument, else STRATA_TENANT) therefore scopes an admin listing too, unless
    `all_tenants` asks for every one; the API token's listing is its own tenant's whatever is asked (the pool
    scopes it), so `all_tenants` with it is refused rather than silently narrowed.
    """
    tenant_id = (tenant_id or "").strip()
    if all_tenants and tenant_id:
        raise ValueError("all_tenants: every tenant, or tenant_id's alone; not both")
    if all_tenants and not admin:
        raise ValueError("all_tenants: every tenant is the pool admin token's (STRATA_POOL_ADMIN_TOKEN)")
    if tenant_id or all_tenants or not admin:
        return tenant_id
    return (tenant or "").strip()


def _positive(name: str, value: float) -> float:
    if not value > 0:
        raise ValueError(f"{name}: seconds above 0 (got {value!r})")
    return value
