"""Service-to-service calls: every internal gRPC service of the registry requires the deployment's internal token.

One rule for the house, applied by the chassis to whatever process serves an internal service
(registry.ServiceDef.internal_services), so a service added later is covered without a line of its own:
the caller sends THERMOSTAT_INTERNAL_TOKEN in the `x-thermostat-internal-token` metadata, the server
compares it in constant time (auth.TokenRule). No token → UNAUTHENTICATED, another token → PERMISSION_DENIED,
both logged without the value. Unset on the server → every internal call is refused (fail closed): a missing
secret must not open StopPods to whoever reaches the port. A shared token rather than mTLS: the services
already read secrets from one Kubernetes Secret, and rotating a token is a Secret edit and a rollout, not a
certificate authority to run (docs/api.md, "Internal calls").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from grpc import aio

from thermostat.chassis.auth import TokenRule
from thermostat.chassis.registry import SERVICES, ServiceDef

INTERNAL_TOKEN_ENV: Final = "THERMOSTAT_INTERNAL_TOKEN"  # noqa: S105 -- the variable's name, not a token
INTERNAL_TOKEN_HEADER: Final = "x-thermostat-internal-token"  # noqa: S105 -- a header's name


def internal_service_names(services: Iterable[ServiceDef] = SERVICES) -> frozenset[str]:
    """Every internal gRPC service of the house: what only callers holding the internal token may call."""
    return frozenset(name for entry in services for name in entry.internal_services)


def internal_rule(token: str | None) -> TokenRule:
    """The internal token in its own header only: a public caller's bearer token never admits an internal call."""
    return TokenRule(tokens=(token,), headers=(INTERNAL_TOKEN_HEADER,), bearer=False)


class InternalTokenInterceptor(aio.UnaryUnaryClientInterceptor, aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """Adds the internal token to every call of a channel to another service."""

    def __init__(self, token: str) -> None:
        self._pair = (INTERNAL_TOKEN_HEADER, token)

    def _details(self, details: Any) -> Any:
        metadata = [pair for pair in (details.metadata or ()) if pair[0] != INTERNAL_TOKEN_HEADER]
        metadata.append(self._pair)
        return aio.ClientCallDetails(
            details.method, details.timeout, tuple(metadata), details.credentials, details.wait_for_ready
        )

    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(self._details(client_call_details), request)

    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(self._details(client_call_details), request)
