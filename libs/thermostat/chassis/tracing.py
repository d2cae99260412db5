"""Optional OpenTelemetry traces: one trace per request across the edge, every service, the calls between them
and the provider calls, carried as W3C `traceparent` / `tracestate` in gRPC metadata and HTTP headers.

OpenTelemetry is an optional extra (requirements-tracing.txt). Unless its API is importable and a tracer
provider is set up when a server, channel or HTTP client is built (`enabled()`), every hook here is absent
rather than idle: `server_interceptors()` and `client_interceptors()` are empty, `hop_spans()` is None,
`http_transport()` hands back the transport it was given and the span helpers record nothing, so a request
pays nothing and the caller's context passes through unchanged (request_context), as
tests/integration/chassis/test_tracing_absent.py checks in a service process.

The provider: `configure_from_environment` sets up the SDK from the standard OTEL_* variables when the SDK and
the OTLP exporter are installed; a process may set up its own before its services start (tests install one
with an in-memory exporter).

What is recorded:
- a SERVER span per RPC (named `package.Service/Method`, gRPC status as `rpc.grpc.status_code`) under the
  caller's context from the metadata; health checks and reflection are not traced (Envoy probes every second);
- a CLIENT span per call on a channel from `request_context.insecure_channel`, whose context the callee
  receives; a CLIENT span per HTTP request through `http_transport` (httpx: RunPod, Fly, Docker, the vLLM
  scrape) and `hop_spans` (the pool's own HTTP/1.1 client to its workers), which send `traceparent` on;
- spans a service opens itself (`span`, `start_span`): the monitor's tick, the pool's queue / boot / execute.
Outgoing calls and HTTP requests made outside a recorded trace (a ledger's poll, a machine's health probe, a
request sampled out) open no span: only a request or a service's own root span starts a trace, so background
chatter does not flood it, and an unrecorded request's traceparent passes through as without OpenTelemetry.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

import grpc
import httpx
from grpc import aio

from thermostat.chassis.method_handlers import rewrapped

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate
    from opentelemetry import trace as otel
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

Span = Any
"""An OpenTelemetry span, or None when tracing is off."""


def enabled() -> bool:
    """Whether spans can be recorded: the OpenTelemetry API is importable and a tracer provider was set up (by
    `configure_from_environment`, or by the process before its services start: an SDK of its own, a test's).
    The API alone records nothing, so without a provider the hooks are left out too and a request pays nothing;
    the caller's context then passes through unchanged (request_context)."""
    return otel is not None and not isinstance(
        otel.get_tracer_provider(), (otel.ProxyTracerProvider, otel.NoOpTracerProvider)
    )


def _tracer() -> Any:
    return otel.get_tracer(TRACER_NAME)


def _in_a_trace() -> bool:
    """Whether a recording span is current. A non-recording one (the API's no-op provider, a trace sampled out)
    opens nothing below it: the caller's context then passes through as without OpenTelemetry."""
    return bool(otel.get_current_span().is_recording())


def _carrier(metadata: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in (metadata or ()) if isinstance(v, str)}


def _rpc_attributes(method: str) -> dict[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


def _fail(span: Span, description: str) -> None:
    span.set_status(otel.Status(otel.StatusCode.ERROR, description))


# --------------------------------------------------------------------------------------------- gRPC server


def server_interceptors() -> list[aio.ServerInterceptor]:
    """The interceptors a service's server needs for tracing: none unless `enabled()` when it is built."""
    return [_ServerSpans()] if enabled() else []


class _ServerSpans(aio.ServerInterceptor):  # type: ignore[misc]
    """Opens a SERVER span around each RPC's handler, under the caller's context from the metadata."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method: str = details.method
        if handler is None or method.lstrip("/").startswith(UNTRACED_SERVICES):
            return handler
        parent = propagate.extract(_carrier(details.invocation_metadata))
        return _traced_handler(handler, method, parent)


def _traced_handler(handler: grpc.RpcMethodHandler, method: str, parent: Any) -> grpc.RpcMethodHandler:
    name = method.lstrip("/")
    attributes = _rpc_attributes(method)

    @contextlib.contextmanager
    def spanned(context: aio.ServicerContext[Any, Any]) -> Iterator[None]:
        with _tracer().start_as_current_span(
            name,
            context=parent,
            kind=otel.SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            # the status the servicer set on the context (an abort raises, having set it), else what the
            # handler's ending means: an exception is UNKNOWN to the caller, a cancellation CANCELLED
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

    def unary(behaviour: Any) -> Any:
        async def traced(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
            with spanned(context):
                return await behaviour(request, context)

        return traced

    def streaming(behaviour: Any) -> Any:
        if not inspect.isasyncgenfunction(behaviour):
            return unary(behaviour)  # a handler writing with context.write() returns like a unary one

        async def traced(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            with spanned(context):
                async for response in behaviour(request, context):
                    yield response

        return traced

    return rewrapped(handler, unary=unary, streaming=streaming)


_CODES = {code.value[0]: code for code in grpc.StatusCode}


# --------------------------------------------------------------------------------------------- gRPC client


def client_interceptors() -> list[Any]:
    """The interceptors a channel to another service needs for tracing: none unless `enabled()` when it is made."""
    return [_ClientSpans()] if enabled() else []


class _ClientSpans(aio.UnaryUnaryClientInterceptor, aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """Opens a CLIENT span per call made inside a trace and sends its context in the metadata, replacing a
    passed-through caller's traceparent (the callee's parent is this call, which is under the caller)."""

    def _start(self, details: Any) -> tuple[Span, Any]:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        span = _tracer().start_span(method.lstrip("/"), kind=otel.SpanKind.CLIENT, attributes=_rpc_attributes(method))
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=otel.set_span_in_context(span))
        metadata = [(k, v) for k, v in (details.metadata or ()) if k not in carrier]
        metadata.extend(carrier.items())
        return span, aio.ClientCallDetails(
            details.method, details.timeout, tuple(metadata), details.credentials, details.wait_for_ready
        )

    @staticmethod
    async def _finish(span: Span, call: Any) -> None:
        code = await call.code()
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code is not grpc.StatusCode.OK:
            _fail(span, str(await call.details() or code.name))
        span.end()

    async def _open(self, continuation: Any, client_call_details: Any, request: Any) -> tuple[Span, Any]:
        """The call started under its own span; a call that cannot even start ends the span failed."""
        span, details = self._start(client_call_details)
        try:
            return span, await continuation(details, request)
        except BaseException as error:
            _fail(span, type(error).__name__)
            span.end()
            raise

    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        if not _in_a_trace():
            return await continuation(client_call_details, request)
        span, call = await self._open(continuation, client_call_details, request)
        try:
            await self._finish(span, call)  # the call's end: it is over before its caller reads the answer
        except asyncio.CancelledError:
            # The caller cancelled while this hook waited: grpc cancels this hook's task, not the call it made.
            call.cancel()
            _fail(span, "cancelled")
            span.end()
            raise
        return call

    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        if not _in_a_trace():
            return await continuation(client_call_details, request)
        span, call = await self._open(continuation, client_call_details, request)
        # the stream ends when its reader is done with it; the span with it
        call.add_done_callback(lambda done: _spawn(self._finish(span, done)))
        return call


_finishing: set[Any] = set()


def _spawn(work: Any) -> None:
    task = asyncio.get_running_loop().create_task(work)
    _finishing.add(task)  # held until done: the loop keeps only a weak reference to a task
    task.add_done_callback(_finishing.discard)


# --------------------------------------------------------------------------------------------- HTTP clients


def http_transport(
    transport: httpx.AsyncBaseTransport | None = None, **defaults: Any
) -> httpx.AsyncBaseTransport | None:
    """The transport an httpx client of a provider should use: `transport` itself unless `enabled()` (None
    lets httpx build its default), else it — or the default built from `defaults` (verify, limits…), which
    httpx ignores once a transport is given — wrapped to open a CLIENT span per request inside a trace."""
    if not enabled():
        return transport
    return _TracedTransport(transport or httpx.AsyncHTTPTransport(**defaults))


def _url(scheme: str, host: str, port: int | None, path: str) -> str:
    """The request's URL without its query string (a container name or a filter, never needed in a trace)."""
    return f"{scheme}://{host}{'' if port is None else f':{port}'}{path}"


class _TracedTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not _in_a_trace():
            return await self._inner.handle_async_request(request)
        url = request.url
        attributes = {
            "http.request.method": request.method,
            "server.address": url.host,
            "url.full": _url(url.scheme, url.host, url.port, url.path),
        }
        with _tracer().start_as_current_span(
            request.method, kind=otel.SpanKind.CLIENT, attributes=attributes, record_exception=False
        ) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            request.headers.update(carrier)
            try:
                response = await self._inner.handle_async_request(request)
            except Exception as error:
                _fail(span, type(error).__name__)
                raise
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 500:
                _fail(span, str(response.status_code))
            return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def hop_spans() -> HopSpans | None:
    """CLIENT spans for the pool's own HTTP/1.1 client (providers/pool/http1.py): None unless `enabled()`."""
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
    if otel is None or not export_asked(environ):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK or its OTLP exporter is not installed "
            "(pip install -r requirements-tracing.txt): no spans are exported"
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
