"""Token auth and tenancy declared per RPC beside the servicer, enforced by one interceptor.

A servicer declares, per method name, which configured tokens admit a caller and in which headers they may
arrive. Comparison is constant-time. No token presented → UNAUTHENTICATED; a token that matches none →
PERMISSION_DENIED (a rule may word either refusal its own way, the pool's seed answers both 401). A rule
whose tokens are all unconfigured refuses everyone (fail closed: a missing secret must not open a
cost-incurring route). A rule may name `elevated` tokens (the pool's admin token): they admit too, and the
servicer reads from `caller()` that it was one of them; `elevated_only` refuses everyone else.

A method may also declare a tenant rule (chassis/tenancy.py), checked once its token passed: the tenant is
read from its header and handed to the servicer by `caller()`. Neither rule reads or writes the request:
a field a REST path binds stays the path's (no query parameter or body overrides it, policy/common/
strict_json.py), and the tenant is never a request field at all.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

import grpc
from grpc import aio

from thermostat.chassis.tenancy import Denial, TenantRule

NO_TOKEN = Denial(grpc.StatusCode.UNAUTHENTICATED, "a token is required")
WRONG_TOKEN = Denial(grpc.StatusCode.PERMISSION_DENIED, "the token is not valid for this call")

TOKEN_HINT_ENV = "THERMOSTAT_TOKEN_HINT"  # noqa: S105 - a variable's name, not a secret
"""Where a caller's tokens come from in this deployment (the dev stack sets it: the file it keeps them in). A
refused token's message ends with it, so a shell holding a stale token learns where the current one is. Never a
token."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenRule:
    """TokenRule admits a caller presenting any of `tokens` or `elevated` in one of `headers` (or as a bearer
    token); `missing` and `wrong` are its refusals, `elevated_only` (when set) its refusal of a caller whose
    token is not an elevated one."""

    tokens: tuple[str | None, ...]
    headers: tuple[str, ...] = ()
    bearer: bool = True
    elevated: tuple[str | None, ...] = ()
    elevated_only: Denial | None = None
    missing: Denial = NO_TOKEN
    wrong: Denial = WRONG_TOKEN
    _plain: tuple[bytes, ...] = field(init=False, repr=False, compare=False)
    _elevated: tuple[bytes, ...] = field(init=False, repr=False, compare=False)

    def presented(self, metadata: Mapping[str, str]) -> list[str]:
        values = [metadata[h] for h in self.headers if metadata.get(h)]
        auth = metadata.get("authorization", "")
        if self.bearer and auth[:7].lower() == "bearer " and auth[7:].strip():
            values.append(auth[7:].strip())
        return values

    def admits(self, presented: Sequence[str]) -> bool:
        return self.grant(presented) is not None

    def __post_init__(self) -> None:
        # encoded once, not per call (the pool's hot path runs its rule on every job); unset tokens admit no one
        object.__setattr__(self, "_plain", tuple(t.encode() for t in self.tokens if t))
        object.__setattr__(self, "_elevated", tuple(t.encode() for t in self.elevated if t))

    def grant(self, presented: Sequence[str]) -> bool | None:
        """None: no token presented is valid for the rule; else whether one of them is an elevated token."""
        ok = high = False
        for value in presented:
            raw = value.encode()
            # evaluate every pair: timing must not reveal which token or how much matched
            for token in self._plain:
                ok |= hmac.compare_digest(raw, token)
            for token in self._elevated:
                high |= hmac.compare_digest(raw, token)
        return high if ok or high else None


class Caller(NamedTuple):
    """Caller is who the rules admitted: whether by an elevated token, and the tenant its tenant rule read (None
    when the method has no tenant rule, or its elevated caller is exempt from it). A tuple, not a frozen
    dataclass: one is built on every guarded call, the pool's hot path, and a tuple is built in a fifth the time."""

    elevated: bool
    tenant: str | None


_caller: ContextVar[Caller | None] = ContextVar("thermostat_caller", default=None)


def caller() -> Caller:
    """The current call's admitted caller. A method without a rule has none: asking is a wiring error, never an
    open door."""
    found = _caller.get()
    if found is None:
        raise LookupError("no auth rule admitted this call: declare one for its method")
    return found


AuthRules = Mapping[str, TokenRule]  # full method name ("/pkg.Svc/Method") → rule
ServiceRules = Mapping[str, TokenRule]  # full service name ("pkg.Svc") → the rule for every method it has
TenantRules = Mapping[str, TenantRule]  # full method name → the tenant rule checked once its token passed

log = logging.getLogger("thermostat.chassis.auth")


class AuthInterceptor(aio.ServerInterceptor):  # type: ignore[misc]
    """Enforces the rules for the methods that declare one (a method's own rule, else its service's), then the
    method's tenant rule; other methods are open. A token refusal is logged with the method and the reason, never
    with what was presented; a tenant refusal is the caller's mistake and is not logged."""

    def __init__(
        self,
        rules: AuthRules,
        service_rules: ServiceRules | None = None,
        tenant_rules: TenantRules | None = None,
        *,
        token_hint: str | None = None,
    ) -> None:
        self._rules = dict(rules)
        self._hint = f"; {token_hint}" if token_hint else ""  # for the methods' own rules, not the internal token's
        self._service_rules = dict(service_rules or {})
        self._tenant_rules = dict(tenant_rules or {})

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = handler_call_details.method
        own = self._rules.get(method)
        rule = own or self._service_rules.get(method.strip("/").partition("/")[0])
        tenant_rule = self._tenant_rules.get(method)
        if rule is None and tenant_rule is None:
            return await continuation(handler_call_details)
        metadata = {k.lower(): v for k, v in handler_call_details.invocation_metadata or () if isinstance(v, str)}
        elevated = False
        if rule is not None:
            presented = rule.presented(metadata)
            grant = rule.grant(presented) if presented else None
            denial = rule.missing if not presented else rule.wrong if grant is None else None
            if denial is None and rule.elevated_only is not None and not grant:
                denial = rule.elevated_only
            if denial is not None:
                why = (
                    "no token presented"
                    if not presented
                    else "the token presented is not valid for it"
                    if grant is None
                    else "the token presented is not an elevated one"
                )
                log.warning("refused %s: %s (%s)", method, why, denial.code.name)
                if own is not None and self._hint:
                    denial = Denial(denial.code, denial.message + self._hint, denial.http)
                return _deny(await continuation(handler_call_details), denial)
            elevated = bool(grant)
        tenant: str | None = None
        if tenant_rule is not None and not (elevated and tenant_rule.elevated_exempt):
            read = tenant_rule.tenant(metadata)
            if isinstance(read, Denial):
                return _deny(await continuation(handler_call_details), read)
            tenant = read
        # grpc.aio runs each RPC in its own task, so the caller set here is the RPC's alone
        _caller.set(Caller(elevated=elevated, tenant=tenant))
        return await continuation(handler_call_details)


async def _refuse(context: aio.ServicerContext[Any, Any], denial: Denial) -> None:
    if denial.http is not None:  # the edge answers this HTTP status (its Lua filter reads x-http-code)
        await context.send_initial_metadata((("x-http-code", str(denial.http)),))
    await context.abort(denial.code, denial.message)


def _deny(handler: grpc.RpcMethodHandler | None, denial: Denial) -> grpc.RpcMethodHandler:
    async def unary(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        await _refuse(context, denial)

    async def stream(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        await _refuse(context, denial)
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


class HttpDenial(StrEnum):
    """Why a plain-HTTP caller was refused: no token presented, or none that the rule admits."""

    MISSING = "missing"
    WRONG = "wrong"


def http_denial(rule: TokenRule, headers: Mapping[str, str]) -> HttpDenial | None:
    """The token check of a service's own HTTP API (the gateway's OpenAI API, whose clients send OpenAI's api_key as
    a bearer token): the same constant-time rule as gRPC's, read from the Authorization header; None admits."""
    presented = rule.presented({"authorization": headers.get("Authorization", "")})
    if not presented:
        return HttpDenial.MISSING
    return HttpDenial.WRONG if rule.grant(presented) is None else None
