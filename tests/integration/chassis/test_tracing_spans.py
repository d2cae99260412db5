"""The chassis' spans over real gRPC on loopback: a server span per RPC with its status, a client span per call
inside a trace (the callee's parent), streams spanned to their end, a cancelled call cancelled on the wire."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from tests.fixtures.tracing import Spans, finished
from thermostat.chassis import tracing
from thermostat.chassis.request_context import insecure_channel
from thermostat.chassis.server import ServiceHost, ServiceSpec

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Echo:
    def __init__(self) -> None:
        self.released = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.entered = asyncio.Event()
        self.stream_metadata: dict[str, str] = {}

    async def ok(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def missing(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
        raise AssertionError("abort returned")

    async def broken(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.INTERNAL, "it broke")
        raise AssertionError("abort returned")

    async def crashed(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise RuntimeError("a bug")

    async def held(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        self.entered.set()
        try:
            await self.released.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return request

    async def stream(self, request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        self.stream_metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        for part in (b"a", b"b", b"c"):
            yield part

    def handlers(self) -> grpc.GenericRpcHandler:
        unary = {
            n: grpc.unary_unary_rpc_method_handler(getattr(self, n))
            for n in ("ok", "missing", "broken", "crashed", "held")
        }
        return grpc.method_handlers_generic_handler(
            "test.Echo", {**unary, "stream": grpc.unary_stream_rpc_method_handler(self.stream)}
        )


@pytest.fixture
async def echo() -> AsyncIterator[tuple[Echo, str]]:
    service = Echo()
    host = ServiceHost(
        ServiceSpec(
            name="echo",
            service_names=["test.Echo"],
            register=lambda s: s.add_generic_rpc_handlers((service.handlers(),)),
        )
    )
    port = await host.start()
    try:
        yield service, f"127.0.0.1:{port}"
    finally:
        await host.stop(0.1)


async def test_a_server_span_per_rpc_under_the_callers_context_with_its_status(
    echo: tuple[Echo, str], spans: Spans
) -> None:
    _, address = echo
    async with grpc.aio.insecure_channel(address) as channel:
        metadata = (("traceparent", TRACEPARENT),)
        assert await channel.unary_unary("/test.Echo/ok")(b"x", metadata=metadata) == b"x"
        for method in ("missing", "broken", "crashed"):
            with pytest.raises(grpc.aio.AioRpcError):
                await channel.unary_unary(f"/test.Echo/{method}")(b"x", metadata=metadata)
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    ok, missing, broken, crashed = (spans.one(f"test.Echo/{m}") for m in ("ok", "missing", "broken", "crashed"))
    assert all(
        s.kind is SpanKind.SERVER and format(s.parent.span_id, "016x") == "00f067aa0ba902b7"
        for s in (ok, missing, broken)
    )
    assert [s.attributes["rpc.grpc.status_code"] for s in (ok, missing, broken, crashed)] == [0, 5, 13, 2]
    # the caller's mistake is not the server's error; a server failure is
    assert missing.status.status_code is StatusCode.UNSET
    assert broken.status.status_code is StatusCode.ERROR and broken.status.description == "it broke"
    assert crashed.status.status_code is StatusCode.ERROR  # an exception in the handler: UNKNOWN
    assert not [s for s in spans.all() if "Health" in s.name]  # probes are not traced


async def test_a_call_inside_a_trace_is_a_client_span_the_callee_sits_under(
    echo: tuple[Echo, str], spans: Spans
) -> None:
    service, address = echo
    async with insecure_channel(address, internal_token="internal") as channel:
        await channel.unary_unary("/test.Echo/ok")(b"outside")  # no trace current: no client span
        with tracing.span("caller"):
            await channel.unary_unary("/test.Echo/ok")(b"inside")
            parts = [p async for p in channel.unary_stream("/test.Echo/stream")(b"")]
    assert parts == [b"a", b"b", b"c"]
    # a stream's client span ends once its call is done, just after its reader finished
    stream_client = await finished(spans, "test.Echo/stream", SpanKind.CLIENT)
    caller = spans.one("caller")
    clients = [s for s in spans.all() if s.kind is SpanKind.CLIENT]
    assert {s.name for s in clients} == {"test.Echo/ok", "test.Echo/stream"}
    assert all(s.parent.span_id == caller.context.span_id for s in clients)
    servers = [s for s in spans.all() if s.kind is SpanKind.SERVER]
    [outside] = [s for s in servers if s.parent is None]
    assert outside.name == "test.Echo/ok"  # a root server span: the call came with no context
    for client in clients:
        [served] = [s for s in servers if s.parent is not None and s.parent.span_id == client.context.span_id]
        assert served.name == client.name and served.context.trace_id == caller.context.trace_id
    assert stream_client.attributes["rpc.grpc.status_code"] == 0
    # a streaming call carries what a unary one does: the call's context and the internal token
    assert service.stream_metadata["x-thermostat-internal-token"] == "internal"
    assert service.stream_metadata["traceparent"].split("-")[2] == format(stream_client.context.span_id, "016x")


async def test_a_cancelled_call_is_cancelled_on_the_wire_and_its_span_says_so(
    echo: tuple[Echo, str], spans: Spans
) -> None:
    service, address = echo
    async with insecure_channel(address) as channel:
        with tracing.span("caller"):
            call = asyncio.ensure_future(channel.unary_unary("/test.Echo/held")(b"x"))
            await asyncio.wait_for(service.entered.wait(), timeout=10)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        await asyncio.wait_for(service.cancelled.wait(), timeout=10)  # the server saw the cancellation
    [client] = [s for s in spans.named("test.Echo/held") if s.kind is SpanKind.CLIENT]
    assert client.status.status_code is StatusCode.ERROR and client.status.description == "cancelled"
    server = await finished(spans, "test.Echo/held", SpanKind.SERVER)  # it ends as its handler unwinds
    assert server.attributes["rpc.grpc.status_code"] == grpc.StatusCode.CANCELLED.value[0]
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing leaked into this task's context
