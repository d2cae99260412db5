"""Token auth declared per RPC beside the servicer, enforced by one interceptor.

A servicer declares, per method name, which configured tokens admit a caller and in which headers they may
arrive. Comparison is constant-time. No token presented → UNAUTHENTICATED; a token that matches none →
PERMISSION_DENIED. A rule whose tokens are all unconfigured refuses everyone (fail closed: a missing
secret must not open a cost-incurring route).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc import aio


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenRule:
    """TokenRule admits a caller presenting any of `tokens` in one of `headers` (or as a bearer token)."""

    tokens: tuple[str | None, ...]
    headers: tuple[str, ...] = ()
    bearer: bool = True

    def presented(self, metadata: Mapping[str, str]) -> list[str]:
        values = [metadata[h] for h in self.headers if metadata.get(h)]
        auth = metadata.get("authorization", "")
        if self.bearer and auth[:7].lower() == "bearer " and auth[7:].strip():
            values.append(auth[7:].strip())
        return values

    def admits(self, presented: Sequence[str]) -> bool:
        configured = [t.encode() for t in self.tokens if t]
        ok = False
        for value in presented:
            for token in configured:
                # evaluate every pair: timing must not reveal which token or how much matched
                ok |= hmac.compare_digest(value.encode(), token)
        return ok


AuthRules = Mapping[str, TokenRule]  # full method name ("/pkg.Svc/Method") → rule
ServiceRules = Mapping[str, TokenRule]  # full service name ("pkg.Svc") → the rule for every method it has

log = logging.getLogger("thermostat.chassis.auth")


class AuthInterceptor(aio.ServerInterceptor):  # type: ignore[misc]
    """Enforces the rules for the methods that declare one (a method's own rule, else its service's); other
    methods are open. A refusal is logged with the method and the reason, never with what was presented."""

    def __init__(self, rules: AuthRules, service_rules: ServiceRules | None = None) -> None:
        self._rules = dict(rules)
        self._service_rules = dict(service_rules or {})

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method
        rule = self._rules.get(method) or self._service_rules.get(method.strip("/").partition("/")[0])
        if rule is None:
            return await continuation(handler_call_details)
        metadata = {k.lower(): v for k, v in handler_call_details.invocation_metadata or () if isinstance(v, str)}
        presented = rule.presented(metadata)
        if not presented:
            log.warning("refused %s: no token presented (UNAUTHENTICATED)", method)
            return _deny(
                await continuation(handler_call_details), grpc.StatusCode.UNAUTHENTICATED, "a token is required"
            )
        if not rule.admits(presented):
            log.warning("refused %s: the token presented is not valid for it (PERMISSION_DENIED)", method)
            return _deny(
                await continuation(handler_call_details),
                grpc.StatusCode.PERMISSION_DENIED,
                "the token is not valid for this call",
            )
        return await continuation(handler_call_details)


def _deny(handler: grpc.RpcMethodHandler | None, code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    async def unary(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(code, message)

    async def stream(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(code, message)
        yield  # pragma: no cover - abort raises

    deserializer = handler.request_deserializer if handler else None
    serializer = handler.response_serializer if handler else None
    # of the method's own kind: a unary handler on a streaming-request call would first wait for a message
    if handler is not None and handler.stream_stream:
        return grpc.stream_stream_rpc_method_handler(stream, deserializer, serializer)
    if handler is not None and handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary, deserializer, serializer)
    if handler is not None and handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(stream, deserializer, serializer)
    return grpc.unary_unary_rpc_method_handler(unary, deserializer, serializer)


def method_name(service_full_name: str, method: str) -> str:
    return f"/{service_full_name}/{method}"
