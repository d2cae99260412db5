"""Who may read and set the pool's spend and budgets: the pool's own tokens, as rules the chassis enforces
(chassis/auth.py), scoped like the pool's usage feed (GET /v1/usage).

The API token (`authorization: Bearer`, `x-strata-tenant`) sees its own tenant; the admin token every tenant,
or one with `tenant_id` (chassis.tenancy.scope). Setting a tenant's budget takes the admin token; none
configured refuses every write. Tokens are compared in constant time and never echoed.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from thermostat.chassis.auth import TokenRule, method_name
from thermostat.chassis.tenancy import Denial, TenantRule
from thermostat.metering.v1 import metering_pb2

PUBLIC = metering_pb2.DESCRIPTOR.services_by_name["Metering"].full_name
TENANT_HEADER = "x-strata-tenant"
MAX_TENANT_LENGTH = 128
READS = ("GetTenantBudget", "GetPoolSpend")
WRITES = ("SetTenantBudget", "SetTenantBudgetJson")

NO_READ_TOKEN = Denial(grpc.StatusCode.UNAUTHENTICATED, "a valid pool bearer token is required")
NO_TENANT = Denial(
    grpc.StatusCode.INVALID_ARGUMENT, f"the X-Strata-Tenant header is required (at most {MAX_TENANT_LENGTH})"
)
NO_ADMIN_TOKEN = Denial(grpc.StatusCode.UNAUTHENTICATED, "the pool admin token is required")
NOT_ADMIN = Denial(grpc.StatusCode.PERMISSION_DENIED, "setting a tenant budget takes the pool admin token")


@dataclass(frozen=True, slots=True)
class PoolTokens:
    api: str | None = None
    admin: str | None = None


def pool_auth_rules(tokens: PoolTokens) -> dict[str, TokenRule]:
    """Reads take either pool token, writes the admin one (the API token is told it is not enough)."""
    read = TokenRule(tokens=(tokens.api,), elevated=(tokens.admin,), missing=NO_READ_TOKEN, wrong=NO_READ_TOKEN)
    write = TokenRule(
        tokens=(tokens.api,),
        elevated=(tokens.admin,),
        elevated_only=NOT_ADMIN,
        missing=NO_ADMIN_TOKEN,
        wrong=NO_ADMIN_TOKEN,
    )
    return {
        **{method_name(PUBLIC, name): read for name in READS},
        **{method_name(PUBLIC, name): write for name in WRITES},
    }


def pool_tenant_rules() -> dict[str, TenantRule]:
    """A read is of the caller's tenant (its header); the admin token names the tenant in the request instead."""
    rule = TenantRule(
        header=TENANT_HEADER,
        max_length=MAX_TENANT_LENGTH,
        missing=NO_TENANT,
        too_long=NO_TENANT,
        elevated_exempt=True,
    )
    return {method_name(PUBLIC, name): rule for name in READS}
