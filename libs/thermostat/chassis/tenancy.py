"""Tenancy declared per RPC beside its token rule (chassis/auth.py), checked by the same interceptor.

A tenant rule names the header a caller's tenant arrives in, how long it may be, and how a call without a
valid one is refused; the interceptor checks it once the call's token passed (the token before the tenant,
as the worker-pool seed orders them) and hands the tenant to the servicer (`auth.caller().tenant`). The
tenant is read from the header alone, never from the request: a field a REST path binds is the path's, and
no query parameter or body can stand in for the header.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from thermostat.chassis.auth import Caller


@dataclass(frozen=True, slots=True)
class Denial:
    """Denial is how a refused call ends: its status and message and, for a REST route whose status gRPC has no
    code for (the pool's 401s and 403s), the HTTP status the edge answers, sent as `x-http-code` first."""

    code: grpc.StatusCode
    message: str
    http: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantRule:
    """TenantRule requires a tenant in `header` (stripped, 1 to `max_length` characters): `missing` and
    `too_long` are its refusals. `elevated_exempt`: a caller admitted by an elevated token is not held to it
    (its tenant is then None, and it names the tenants it reads itself, `scope`)."""

    header: str
    max_length: int
    missing: Denial
    too_long: Denial
    elevated_exempt: bool = False

    def tenant(self, metadata: Mapping[str, str]) -> str | Denial:
        tenant = metadata.get(self.header, "").strip()
        if not tenant:
            return self.missing
        if len(tenant) > self.max_length:
            return self.too_long
        return tenant


def scope(caller: Caller, requested: str) -> str | None:
    """The tenant a read shows: the caller's own; an elevated caller's `requested` one, or every tenant (None)."""
    if caller.elevated:
        return requested.strip() or None
    return caller.tenant
