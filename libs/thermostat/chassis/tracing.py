"""Optional OpenTelemetry traces: one trace per request across the edge, every service, the calls between them
and the provider calls, carried as W3C `traceparent` / `tracestate` in gRPC metadata and HTTP headers.

The tracing extra (requirements-tracing.txt) is OpenTelemetry's API, SDK and exporter and its own
instrumentation for the gRPC aio server and client and for httpx, which record a SERVER span per RPC under the
caller's context, a CLIENT span per call on a channel from `request_context.insecure_channel` and per request
through `http_transport` (RunPod, Fly, Docker), each sending its own context on. What this module adds is
Thermostat's:
- the off switch. Unless the extra is importable and a tracer provider is set up when a server, channel or HTTP
  client is built (`enabled()`), every hook is absent rather than idle (no interceptor, the transport as given,
  `hop_spans()` None, span helpers that record nothing), so a request pays nothing and the caller's context
  passes through unchanged (request_context; tests/integration/chassis/test_tracing_absent.py);
- only a recorded trace opens spans below it: a call or request made outside one (a ledger's poll, a machine's
  health probe, a request sampled out) opens none, so background chatter does not flood the trace; health
  checks and reflection are never traced (Envoy probes every second);
- spans read as the RPC and HTTP conventions say: `package.Service/Method` (the instrumentation keeps the
  path's slash), a SERVER span's `rpc.grpc.status_code` and status the RPC's end (an exception UNKNOWN, a
  cancellation CANCELLED, the description the servicer's own words), a cancelled call cancelled on the wire,
  the stable HTTP attributes (`url.full` without its query string, `http.response.status_code`);
- the worker hop's span (`hop_spans`, whichever HTTP client makes the hop), the spans a service opens itself
  (`span`, `start_span`: the monitor's tick, the pool's queue / boot / execute) and the exporter from the
  standard OTEL_* variables (`configure_from_environment`; a process may set up its own provider before its
  services start, as the tests do with an in-memory exporter).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from datetime import datetime
from typing import Any, NamedTuple

import grpc
import httpx

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate
    from opentelemetry import trace as otel
    from opentelemetry.instrumentation._semconv import _StabilityMode
    from opentelemetry.instrumentation.grpc._aio_client import (
        UnaryStreamAioClientInterceptor,
        UnaryUnaryAioClientInterceptor,
    )
    from opentelemetry.instrumentation.grpc._aio_server import OpenTelemetryAioServerInterceptor
    from opentelemetry.instrumentation.grpc.version import __version__ as _GRPC_INSTRUMENTATION_VERSION
    from opentelemetry.instrumentation.httpx import AsyncOpenTelemetryTransport
except ImportError:  # the optional extra is not installed: tracing is off
    otel = None  # type: ignore[assignment]

log = logging.getLogger("thermostat.chassis.tracing")

TRACER_NAME = "thermostat"
TRACE_HEADERS = ("traceparent", "tracestate")
UNTRACED_SERVICES = ("grpc.health.", "grpc.reflection.")  # probes and tooling, by package
# gRPC codes that are the server's failure, not the caller's (OpenTelemetry's RPC conventions)
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
_CODES = {code.value[0]: code for code in grpc.StatusCode}

Span = Any
"""An OpenTelemetry span, or None when tracing is off."""


def enabled() -> bool:
    """Whether spans can be recorded: the extra is importable and a tracer provider was set up (by
    `configure_from_environment`, or by the process before its services start: an SDK of its own, a test's).
    The API alone records nothing, so without a provider the hooks are left out too and a request pays nothing;
    the caller's context then passes through unchanged (request_context)."""
    return otel is not None and not isinstance(
        otel.get_tracer_provider(), (otel.ProxyTracerProvider, otel.NoOpTracerProvider)
    )


def _tracer() -> Any:
    return otel.get_tracer(TRACER_NAME)


def _in_a_trace(*_: object) -> bool:
    """Whether a recording span is current. A non-recording one (the API's no-op provider, a trace sampled out)
    opens nothing below it: the caller's context then passes through as without OpenTelemetry."""
    return bool(otel.get_current_span().is_recording())


def _fail(span: Span, description: str) -> None:
    span.set_status(otel.Status(otel.StatusCode.ERROR, description))


def server_interceptors() -> list[grpc.aio.ServerInterceptor]:
    """The interceptors a service's server needs for tracing: none unless `enabled()` when it is built."""
    return [_ServerSpans()] if enabled() else []


def client_interceptors() -> list[Any]:
    """The interceptors a channel to another service needs for tracing: none unless `enabled()` when it is made."""
    return [_ClientSpans()] if enabled() else []


def http_transport(
    transport: httpx.AsyncBaseTransport | None = None, **defaults: Any
) -> httpx.AsyncBaseTransport | None:
    """The transport an httpx client of a provider should use: `transport` itself unless `enabled()` (None
    lets httpx build its default), else it — or the default built from `defaults` (verify, limits…), which
    httpx ignores once a transport is given — wrapped to open a CLIENT span per request inside a trace."""
    if not enabled():
        return transport
    return _TracedTransport(transport or httpx.AsyncHTTPTransport(**defaults))


# ------------------------------------------------------------------------- gRPC: how a served RPC ended


def _traced_service(details: grpc.HandlerCallDetails) -> bool:
    return not str(details.method).lstrip("/").startswith(UNTRACED_SERVICES)


class _Method(NamedTuple):
    """Call details naming only the method, all the instrumentation's server span reads of them."""

    method: str


@contextlib.contextmanager
def _ending_rpc(context: grpc.aio.ServicerContext[Any, Any]) -> Iterator[None]:
    """Records on the current (SERVER) span how the RPC ended: the status the servicer set on the context (an
    abort raises, having set it), else what the handler's ending means (an exception is UNKNOWN to the caller, a
    cancellation CANCELLED). The instrumentation sees only aborts and set codes, and words their descriptions
    `StatusCode.X:details`; this status, set last, is the servicer's own words."""
    span = otel.get_current_span()
    ended = grpc.StatusCode.OK
    try:
        yield
    except asyncio.CancelledError:
        ended = grpc.StatusCode.CANCELLED
        raise
    except Exception:
        ended = grpc.StatusCode.UNKNOWN
        raise
    finally:
        code = context.code() or ended
        if isinstance(code, int):
            code = _CODES.get(code, grpc.StatusCode.UNKNOWN)
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code in _SERVER_ERRORS:
            _fail(span, str(context.details() or code.name))


def _ended(behaviour: Callable[..., Any]) -> Callable[..., Any]:
    async def ended(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        with _ending_rpc(context):
            return await behaviour(request, context)

    return ended


def _ended_stream(behaviour: Callable[..., Any]) -> Callable[..., Any]:
    if not inspect.isasyncgenfunction(behaviour):
        # a handler writing with context.write() returns like a unary one; the instrumentation iterates it
        unary = _ended(behaviour)

        async def written(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            await unary(request, context)
            return
            yield  # an async generator that yields nothing

        return written

    async def ended(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        with _ending_rpc(context):
            async for response in behaviour(request, context):
                yield response

    return ended


if otel is not None:

    def _grpc_tracer() -> Any:
        return otel.get_tracer("opentelemetry.instrumentation.grpc", _GRPC_INSTRUMENTATION_VERSION)

    class _ServerSpans(OpenTelemetryAioServerInterceptor):  # type: ignore[misc]
        """OpenTelemetry's SERVER span per RPC, under the caller's context from the metadata, named
        `package.Service/Method` and ended with the RPC's status (`_ending_rpc`)."""

        def __init__(self) -> None:
            super().__init__(_grpc_tracer(), filter_=_traced_service)

        def _start_span(self, details: Any, context: Any, set_status_on_exception: bool = False) -> Any:
            return super()._start_span(_Method(details.method.lstrip("/")), context, set_status_on_exception)

        def _intercept_aio_server_unary(self, behaviour: Any, details: Any) -> Any:
            return super()._intercept_aio_server_unary(_ended(behaviour), details)

        def _intercept_aio_server_stream(self, behaviour: Any, details: Any) -> Any:
            return super()._intercept_aio_server_stream(_ended_stream(behaviour), details)

    class _ClientSpans(UnaryUnaryAioClientInterceptor, UnaryStreamAioClientInterceptor):  # type: ignore[misc]
        """OpenTelemetry's CLIENT span per unary or server-streaming call made inside a recorded trace (a stream's
        ends with its reading), its context sent in the metadata in place of a passed-through caller's
        traceparent (the callee's parent is this call, which is under the caller)."""

        def __init__(self) -> None:
            super().__init__(_grpc_tracer(), filter_=_in_a_trace)

        def _start_span(self, method: str, **kwargs: Any) -> Any:
            return super()._start_span(method.lstrip("/"), **kwargs)

        async def _wrap_unary_response(self, continuation: Callable[[], Awaitable[Any]], span: Span) -> Any:
            made: list[Any] = []

            async def call() -> Any:
                made.append(await continuation())
                return made[0]

            try:
                return await super()._wrap_unary_response(call, span)
            except BaseException as error:
                # The instrumentation ends a unary call's span when its answer is read. The caller cancelled while
                # this hook waited for it (grpc cancels this hook's task, not the call it made), or it failed.
                if isinstance(error, asyncio.CancelledError):
                    for started in made:
                        started.cancel()
                    _fail(span, "cancelled")
                elif not isinstance(error, grpc.RpcError):
                    _fail(span, type(error).__name__)
                span.end()
                raise

    class _TracedTransport(AsyncOpenTelemetryTransport):
        """OpenTelemetry's httpx transport, opening a span only inside a recorded trace and recording the stable
        HTTP conventions (`url.full`, `http.response.status_code`; the instrumentation's default is still the
        old names unless OTEL_SEMCONV_STABILITY_OPT_IN says otherwise) with the URL's query string left out (a
        container name or a filter, never needed in a trace). A provider request's headers carry its credentials
        (Authorization, Docker's X-Registry-Auth): none is captured, whatever the instrumentation's
        OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST says."""

        def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
            super().__init__(inner, request_hook=_without_query)
            self._sem_conv_opt_in_mode = _StabilityMode.HTTP
            self._captured_request_headers: list[str] = []

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if not _in_a_trace():
                return await self._transport.handle_async_request(request)
            response: httpx.Response = await super().handle_async_request(request)
            return response


async def _without_query(span: Span, request: Any) -> None:
    url = request.url  # an httpx.URL: credentials and the query string left out, as in no other attribute
    span.set_attribute("url.full", f"{url.scheme}://{url.host}{'' if url.port is None else f':{url.port}'}{url.path}")


# --------------------------------------------------------------------------------------------- the worker hop


def hop_spans() -> HopSpans | None:
    """CLIENT spans for the hop to the pool's workers and the monitor's scrapes, whichever HTTP client makes them
    (it calls `start` before the request and `answered` or `failed` after): None unless `enabled()`. Thermostat's
    own rather than an instrumentation's, so the hop keeps one span shape whatever speaks it."""
    return HopSpans() if enabled() else None


class HopSpans:
    """Opens a CLIENT span per request made inside a trace and sends its context in the request's headers,
    replacing a passed-through caller's `traceparent` (the worker's parent is this hop, under the job's span)."""

    @staticmethod
    def start(method: str, host: str, url: str, headers: dict[str, str]) -> Span:
        """The request's span, its context put into `headers`; None outside a trace (`headers` left as given)."""
        if not _in_a_trace():
            return None
        attributes = {"http.request.method": method, "server.address": host, "url.full": url}
        span = _tracer().start_span(method, kind=otel.SpanKind.CLIENT, attributes=attributes)
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=otel.set_span_in_context(span))
        headers.update(carrier)
        return span

    @staticmethod
    def answered(span: Span, status: int) -> None:
        span.set_attribute("http.response.status_code", status)
        if status >= 500:
            _fail(span, str(status))
        span.end()

    @staticmethod
    def failed(span: Span, error: str) -> None:
        _fail(span, error)
        span.end()


# ------------------------------------------------------------------------------------ a service's own spans


@contextlib.contextmanager
def span(name: str, attributes: Mapping[str, str] | None = None) -> Iterator[Span]:
    """A span around a block, current inside it (a root one when no trace is current): the monitor's tick."""
    if otel is None:
        yield None
        return
    with _tracer().start_as_current_span(name, attributes=dict(attributes or {})) as opened:
        yield opened


def start_span(
    name: str, parent: Mapping[str, str], attributes: Mapping[str, str], *, start_time: datetime | None = None
) -> Span:
    """A span named `name` under the context the W3C headers in `parent` name (a root one when they name none),
    for work that outlives the request that asked for it (a pool job, kept with its trace headers). None
    without a tracer provider: the API's no-op span would cost a pool job its header parsing for nothing."""
    if not enabled():
        return None
    started = None if start_time is None else int(start_time.timestamp() * 1_000_000_000)
    return _tracer().start_span(
        name, context=propagate.extract(dict(parent)), start_time=started, attributes=dict(attributes)
    )


def end_span(span: Span, error: str | None = None) -> None:
    if span is None:
        return
    if error is not None:
        _fail(span, error)
    span.end()


@contextlib.contextmanager
def activated(span: Span) -> Iterator[None]:
    """`span` is the current one inside the block, so the calls made there sit under it."""
    if span is None:
        yield
        return
    token = otel_context.attach(otel.set_span_in_context(span))
    try:
        yield
    finally:
        otel_context.detach(token)


def current_headers(fallback: Mapping[str, str]) -> dict[str, str]:
    """The W3C headers naming the current span (a job's submit, kept for its later spans), or `fallback` (the
    caller's, as received) when tracing is off or the current span records nothing."""
    if otel is None or not _in_a_trace():
        return dict(fallback)
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {k: v for k, v in carrier.items() if k in TRACE_HEADERS} or dict(fallback)


# --------------------------------------------------------------------------------------------- the exporter


def export_asked(environ: Mapping[str, str]) -> bool:
    """Whether the standard variables ask for OTLP export (see `configure_from_environment`)."""
    if not (environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "otlp":
        return False
    return environ.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"


def configure_from_environment(
    service_name: str, environ: Mapping[str, str] = os.environ
) -> Callable[[], Awaitable[None]] | None:
    """Install an SDK tracer provider exporting over OTLP when the environment asks for one; its shutdown (which
    flushes what is batched) for the service's stop hooks, or None when nothing was installed.

    Asked for: OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set and OTEL_TRACES_EXPORTER
    is unset or `otlp`, and OTEL_SDK_DISABLED is not true. The exporter reads the rest of the standard
    variables itself (headers, timeout, protocol details); OTEL_SERVICE_NAME names the service, defaulting to
    the registry's name. A provider installed before (a test's, another SDK setup) is kept.
    """
    if not export_asked(environ):
        return None
    try:
        if otel is None:  # the API or the instrumentation is missing
            raise ImportError("opentelemetry")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the tracing extra (OpenTelemetry's SDK, OTLP exporter and "
            "instrumentation) is not installed (pip install -r requirements-tracing.txt): no spans are exported"
        )
        return None
    current = otel.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return None
    name = environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    otel.set_tracer_provider(provider)
    log.info("tracing: exporting spans over OTLP as %s", name)

    async def shutdown() -> None:
        # flushes the batch (blocking HTTP, off the loop): a stopping service's last spans still leave
        await asyncio.to_thread(provider.shutdown)

    return shutdown
