"""Request id and W3C trace context, carried from incoming metadata into logs and outgoing calls.

A request id that arrives (x-request-id, as Envoy sets it) is kept; one that does not is minted, so every
log line of an RPC can be tied together. traceparent/tracestate pass through unchanged when OpenTelemetry is not
installed; with it, the chassis' tracing (chassis/tracing.py) opens spans and sends each call's own context.
"""

from __future__ import annotations

import contextvars
import itertools
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from grpc import aio

from thermostat.chassis.internal_auth import InternalTokenInterceptor
from thermostat.chassis.tracing import client_interceptors
from thermostat.chassis.unexpected_errors import guarded_handler

REQUEST_ID = "x-request-id"
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

_TRACEPARENT_SHAPE = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
_REQUEST_ID_SHAPE = re.compile(r"^[\w.:-]{1,128}$")

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
traceparent_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("traceparent", default=None)
tracestate_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("tracestate", default=None)


def outgoing_metadata() -> tuple[tuple[str, str], ...]:
    """The metadata an outgoing call carries so the callee logs under the same request and trace."""
    pairs: list[tuple[str, str]] = []
    for key, var in ((REQUEST_ID, request_id_var), (TRACEPARENT, traceparent_var), (TRACESTATE, tracestate_var)):
        value = var.get()
        if value:
            pairs.append((key, value))
    return tuple(pairs)


_MINTED_PREFIX = uuid.uuid4().hex[:16]
_minted = itertools.count()


def mint_request_id() -> str:
    """A request id unique across processes (a random prefix per process, then a count): 32 hex digits like a
    uuid4's, without a uuid4's read of the kernel's random source on every call."""
    return f"{_MINTED_PREFIX}{next(_minted) & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def adopt(metadata: Sequence[tuple[str, str | bytes]] | None) -> None:
    """Set this task's request context from incoming metadata, minting a request id when absent."""
    found = {k.lower(): v for k, v in (metadata or ()) if isinstance(v, str)}
    rid = found.get(REQUEST_ID, "")
    request_id_var.set(rid if _REQUEST_ID_SHAPE.match(rid) else mint_request_id())
    tp = found.get(TRACEPARENT, "")
    traceparent_var.set(tp if _TRACEPARENT_SHAPE.match(tp) else None)
    traceparent_ok = traceparent_var.get() is not None
    tracestate_var.set(found.get(TRACESTATE) if traceparent_ok else None)


_GUARDED_HANDLERS = 1024
"""Guarded handlers kept for reuse: one per method, plus the few per-call ones a refusal builds (auth's denials)."""


class RequestContextInterceptor(aio.ServerInterceptor):  # type: ignore[misc]
    """Adopts the caller's request id and trace context for the duration of each RPC, and answers an unexpected
    exception of its handler with a fixed detail, logged under that request id (chassis/unexpected_errors.py).

    The guard is here rather than in an interceptor of its own: every interceptor costs each call its own
    coroutine and continuation (the pool's hot path), while this one runs anyway. Each guarded handler is built
    once per handler the services registered and reused."""

    def __init__(self, service: str = "the service") -> None:
        self.service = service
        self._guarded: dict[int, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        # grpc.aio runs each RPC in its own task, so a context variable set here is scoped to the RPC.
        adopt(handler_call_details.invocation_metadata)
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        known = self._guarded.get(id(handler))
        if known is not None and known[0] is handler:  # the id of a handler still alive (kept in the entry)
            return known[1]
        guarded = guarded_handler(handler, handler_call_details.method, self.service, request_id_var.get)
        if len(self._guarded) >= _GUARDED_HANDLERS:
            self._guarded.clear()
        self._guarded[id(handler)] = (handler, guarded)
        return guarded


class _Propagate(aio.UnaryUnaryClientInterceptor, aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    async def _with_context(self, details: Any) -> Any:
        metadata = list(details.metadata or ())
        present = {k for k, _ in metadata}
        metadata.extend(p for p in outgoing_metadata() if p[0] not in present)
        return aio.ClientCallDetails(
            details.method, details.timeout, tuple(metadata), details.credentials, details.wait_for_ready
        )

    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(await self._with_context(client_call_details), request)

    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(await self._with_context(client_call_details), request)


def insecure_channel(
    target: str, *, max_reconnect_seconds: float | None = None, internal_token: str | None = None
) -> aio.Channel:
    """A client channel whose calls carry the current request id and trace context, and the deployment's
    internal token when one is given (a channel to another service's internal RPCs).

    `max_reconnect_seconds` caps gRPC's reconnect backoff (120 s by default): while it lasts every call fails at
    once, so a peer that comes up after a long absence would otherwise go unnoticed for up to two minutes.
    """
    options: list[tuple[str, int]] = []
    if max_reconnect_seconds is not None:
        cap = max(1, round(max_reconnect_seconds * 1000))
        first = min(1000, cap)
        options = [
            ("grpc.initial_reconnect_backoff_ms", first),
            ("grpc.min_reconnect_backoff_ms", first),
            ("grpc.max_reconnect_backoff_ms", cap),
        ]
    # tracing first (none without OpenTelemetry): its traceparent, naming this call, is the one the callee gets
    hooks: list[Any] = [*client_interceptors(), _Propagate()]
    if internal_token:
        hooks.append(InternalTokenInterceptor(internal_token))
    # grpc.aio files an interceptor under the first call kind it implements only (an if/elif on its classes),
    # so a hook for both unary and server-streaming calls is given again, wrapped, for the streaming ones.
    interceptors = [*hooks, *(_StreamSide(h) for h in hooks if isinstance(h, aio.UnaryStreamClientInterceptor))]
    return aio.insecure_channel(target, options=options, interceptors=interceptors)


class _StreamSide(aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """A hook's server-streaming side, as its own interceptor (see insecure_channel)."""

    def __init__(self, hook: aio.UnaryStreamClientInterceptor) -> None:
        self.hook = hook

    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await self.hook.intercept_unary_stream(continuation, client_call_details, request)
