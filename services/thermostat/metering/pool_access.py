"""Who may read the pool's spend: the pool's own tokens, scoped like its usage feed (GET /v1/usage).

The API token (`authorization: Bearer`, `x-strata-tenant`) sees its own tenant; the admin token every tenant,
or one with `tenant_id`. Tokens are compared in constant time and never echoed.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

import grpc

TENANT_HEADER = "x-strata-tenant"
MAX_TENANT_LENGTH = 128


@dataclass(frozen=True, slots=True)
class PoolTokens:
    api: str | None = None
    admin: str | None = None


def _same(presented: str, token: str | None) -> bool:
    # always compare, so timing does not reveal which token is configured
    return hmac.compare_digest(presented.encode(), (token or "\0unset").encode()) and token is not None


async def tenant_scope(tokens: PoolTokens, requested: str, context: grpc.aio.ServicerContext) -> str | None:
    """The tenant a spend read shows (None: every tenant, admin only); aborts an unauthorized caller."""
    metadata = {k.lower(): v for k, v in context.invocation_metadata() if isinstance(v, str)}
    auth = metadata.get("authorization", "")
    presented = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    admin = _same(presented, tokens.admin)
    api = _same(presented, tokens.api)
    if not presented or not (admin or api):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a valid pool bearer token is required")
    if admin:
        return requested.strip() or None
    tenant = metadata.get(TENANT_HEADER, "").strip()
    if not tenant or len(tenant) > MAX_TENANT_LENGTH:
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT, f"the X-Strata-Tenant header is required (at most {MAX_TENANT_LENGTH})"
        )
    return tenant


async def require_admin(tokens: PoolTokens, context: grpc.aio.ServicerContext) -> None:
    """Writes (a tenant's budget) take the pool admin token; none configured refuses every write."""
    metadata = {k.lower(): v for k, v in context.invocation_metadata() if isinstance(v, str)}
    auth = metadata.get("authorization", "")
    presented = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    if _same(presented, tokens.admin):
        return
    if presented and _same(presented, tokens.api):
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "setting a tenant budget takes the pool admin token")
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "the pool admin token is required")
