"""Who may call the pool: its token and tenant rules, declared for the chassis to enforce (chassis/auth.py).

The worker-pool seed's order: the token (UNAUTHENTICATED, 401) before the tenant header (INVALID_ARGUMENT,
400), both before anything of the request is read. A token that is missing or matches neither the API token
(STRATA_POOL_TOKEN) nor the admin token (STRATA_POOL_ADMIN_TOKEN) is 401, as in the seed's service; the admin
token is accepted wherever the API token is, and the servicer reads that it was the admin's
(`chassis.auth.caller().elevated`). Every method of the service has a rule unless it is named open here, so
a method added later is guarded (token and tenant) until it says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from thermostat.chassis.auth import TokenRule, method_name
from thermostat.chassis.tenancy import Denial, TenantRule
from thermostat.pool.v1 import pool_pb2

SERVICE = pool_pb2.DESCRIPTOR.services_by_name["PoolDispatcher"]
TENANT_HEADER = "x-strata-tenant"
MAX_TENANT_LENGTH = 256

OPEN = frozenset({"GetPoolHealth", "GetPoolHealthJson"})
"""No token: the edge's GET /health shows the pool's machines to anyone."""
WITHOUT_TENANT = frozenset({"GetMachineTypes", "ListMachineTypes", "PutMachineTypes", "ListOrphans"})
"""The catalogue and the orphans are the deployment's, not a tenant's."""
TENANT_OR_ADMIN = frozenset({"ListWorkers", "ListWorkersJson", "ListUsage", "ListUsageJson"})
"""Listings: the caller's own tenant, unless the admin token names one or asks for all (no header needed)."""

NO_VALID_TOKEN = Denial(grpc.StatusCode.UNAUTHENTICATED, "a valid bearer token is required", 401)
NO_TENANT = Denial(grpc.StatusCode.INVALID_ARGUMENT, "the X-Strata-Tenant header is required", 400)
TENANT_TOO_LONG = Denial(
    grpc.StatusCode.INVALID_ARGUMENT, f"X-Strata-Tenant: at most {MAX_TENANT_LENGTH} characters", 400
)
NO_ADMIN_TOKEN = Denial(
    grpc.StatusCode.PERMISSION_DENIED, "catalogue writes are disabled: no admin token is configured", 403
)
ADMIN_ONLY = {
    "PutMachineTypes": Denial(grpc.StatusCode.PERMISSION_DENIED, "replacing the catalogue needs the admin token", 403),
    "ListOrphans": Denial(grpc.StatusCode.PERMISSION_DENIED, "listing orphans needs the admin token", 403),
}


@dataclass(frozen=True, slots=True)
class Tokens:
    """The pool's configured tokens (None: unset, which admits no one)."""

    api: str | None
    admin: str | None


def auth_rules(tokens: Tokens) -> dict[str, TokenRule]:
    """Every guarded method's token rule: a bearer token, the API or the admin one; the admin one alone for the
    admin's calls. With no admin token configured a catalogue write says so (403), rather than that the caller
    lacks it."""
    rules: dict[str, TokenRule] = {}
    for method in SERVICE.methods:
        if method.name in OPEN:
            continue
        only = ADMIN_ONLY.get(method.name)
        if method.name == "PutMachineTypes" and tokens.admin is None:
            only = NO_ADMIN_TOKEN
        rules[method_name(SERVICE.full_name, method.name)] = TokenRule(
            tokens=(tokens.api,),
            elevated=(tokens.admin,),
            elevated_only=only,
            missing=NO_VALID_TOKEN,
            wrong=NO_VALID_TOKEN,
        )
    return rules


def tenant_rules() -> dict[str, TenantRule]:
    """Every method acting for a tenant requires the X-Strata-Tenant header; the listings let the admin go without."""
    rules: dict[str, TenantRule] = {}
    for method in SERVICE.methods:
        if method.name in OPEN or method.name in WITHOUT_TENANT:
            continue
        rules[method_name(SERVICE.full_name, method.name)] = TenantRule(
            header=TENANT_HEADER,
            max_length=MAX_TENANT_LENGTH,
            missing=NO_TENANT,
            too_long=TENANT_TOO_LONG,
            elevated_exempt=method.name in TENANT_OR_ADMIN,
        )
    return rules
