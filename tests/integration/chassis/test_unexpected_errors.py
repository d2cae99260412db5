"""A handler's unexpected exception over real gRPC: the caller reads a fixed detail, never the exception's text
(grpc.aio's own answer would quote it), and the service's log has the traceback with the method and request id.
What a handler sends on purpose (an abort, a code it set) and a caller going away pass through untouched."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.pool.v1 import pool_pb2

Message = pool_pb2.CancelJobRequest
SECRET = "postgres://user:secret@host"
LOGGER = "thermostat.chassis.unexpected_errors"


class Handlers:
    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def fail(self, request: Message, context: grpc.aio.ServicerContext) -> Message:
        raise RuntimeError(SECRET)

    async def refuse(self, request: Message, context: grpc.aio.ServicerContext) -> Message:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "a chosen detail", (("x-chosen", "yes"),))
        raise AssertionError("unreachable")

    async def coded(self, request: Message, context: grpc.aio.ServicerContext) -> Message:
        context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
        raise RuntimeError(SECRET)

    async def hang(self, request: Message, context: grpc.aio.ServicerContext) -> Message:
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")

    async def stream_fail(self, request: Message, context: grpc.aio.ServicerContext) -> AsyncIterator[Message]:
        yield Message(id="first")
        raise RuntimeError(SECRET)

    async def stream_refuse(self, request: Message, context: grpc.aio.ServicerContext) -> AsyncIterator[Message]:
        yield Message(id="first")
        await context.abort(grpc.StatusCode.OUT_OF_RANGE, "a chosen stream detail")

    async def chat_fail(
        self, requests: AsyncIterator[Message], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Message]:
        async for request in requests:
            if request.id == "boom":
                raise RuntimeError(SECRET)
            yield Message(id=f"echo {request.id}")


def register(handlers: Handlers) -> Any:
    def add(server: grpc.aio.Server) -> None:
        codec = {"request_deserializer": Message.FromString, "response_serializer": Message.SerializeToString}
        methods = {
            "Fail": grpc.unary_unary_rpc_method_handler(handlers.fail, **codec),
            "Refuse": grpc.unary_unary_rpc_method_handler(handlers.refuse, **codec),
            "Coded": grpc.unary_unary_rpc_method_handler(handlers.coded, **codec),
            "Hang": grpc.unary_unary_rpc_method_handler(handlers.hang, **codec),
            "StreamFail": grpc.unary_stream_rpc_method_handler(handlers.stream_fail, **codec),
            "StreamRefuse": grpc.unary_stream_rpc_method_handler(handlers.stream_refuse, **codec),
            "ChatFail": grpc.stream_stream_rpc_method_handler(handlers.chat_fail, **codec),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", methods),))

    return add


@pytest.fixture
async def handlers() -> Handlers:
    return Handlers()


@pytest.fixture
async def channel(handlers: Handlers) -> AsyncIterator[grpc.aio.Channel]:
    host = ServiceHost(ServiceSpec(name="echo", service_names=["test.Echo"], register=register(handlers)))
    port = await host.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await host.stop(0.1)


def unary(channel: grpc.aio.Channel, method: str) -> Any:
    return channel.unary_unary(
        f"/test.Echo/{method}", request_serializer=Message.SerializeToString, response_deserializer=Message.FromString
    )


def server_stream(channel: grpc.aio.Channel, method: str) -> Any:
    return channel.unary_stream(
        f"/test.Echo/{method}", request_serializer=Message.SerializeToString, response_deserializer=Message.FromString
    )


async def test_an_unexpected_exception_answers_a_fixed_detail_and_logs_the_traceback(
    channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger=LOGGER), pytest.raises(grpc.aio.AioRpcError) as failed:
        await unary(channel, "Fail")(Message(), metadata=(("x-request-id", "req-fail-1"),))
    assert (failed.value.code(), failed.value.details()) == (grpc.StatusCode.UNKNOWN, "internal error (logged by echo)")
    assert "secret" not in str(failed.value) and "RuntimeError" not in str(failed.value)
    [record] = [r for r in caplog.records if r.name == LOGGER]
    assert record.getMessage().startswith("/test.Echo/Fail: unexpected RuntimeError (request req-fail-1)")
    assert "Traceback" in caplog.text and f"RuntimeError: {SECRET}" in caplog.text  # the operator's to read


async def test_a_code_the_handler_set_before_raising_is_kept_with_the_fixed_detail(channel: grpc.aio.Channel) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await unary(channel, "Coded")(Message())
    assert (failed.value.code(), failed.value.details()) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "internal error (logged by echo)",
    )


async def test_an_abort_passes_through_unchanged_and_is_not_logged(
    channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER), pytest.raises(grpc.aio.AioRpcError) as refused:
        await unary(channel, "Refuse")(Message())
    assert (refused.value.code(), refused.value.details()) == (grpc.StatusCode.FAILED_PRECONDITION, "a chosen detail")
    assert ("x-chosen", "yes") in tuple(refused.value.trailing_metadata() or ())
    assert not [r for r in caplog.records if r.name == LOGGER]


async def test_a_caller_going_away_cancels_the_handler_and_nothing_is_logged(
    channel: grpc.aio.Channel, handlers: Handlers, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        call = unary(channel, "Hang")(Message())
        await asyncio.wait_for(handlers.entered.wait(), 10)
        call.cancel()
        await asyncio.wait_for(handlers.cancelled.wait(), 10)
    assert await call.code() == grpc.StatusCode.CANCELLED
    assert not [r for r in caplog.records if r.name == LOGGER]


async def test_a_server_stream_failing_after_an_answer_ends_with_the_fixed_detail(
    channel: grpc.aio.Channel, caplog: pytest.LogCaptureFixture
) -> None:
    call = server_stream(channel, "StreamFail")(Message(), metadata=(("x-request-id", "req-stream-1"),))
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        assert (await call.read()).id == "first"
        assert await call.code() == grpc.StatusCode.UNKNOWN
    assert await call.details() == "internal error (logged by echo)"
    assert "/test.Echo/StreamFail: unexpected RuntimeError (request req-stream-1)" in caplog.text
    assert f"RuntimeError: {SECRET}" in caplog.text


async def test_a_server_stream_abort_passes_through_unchanged(channel: grpc.aio.Channel) -> None:
    call = server_stream(channel, "StreamRefuse")(Message())
    assert (await call.read()).id == "first"
    assert (await call.code(), await call.details()) == (grpc.StatusCode.OUT_OF_RANGE, "a chosen stream detail")


async def test_a_bidirectional_stream_failing_mid_way_ends_with_the_fixed_detail(channel: grpc.aio.Channel) -> None:
    chat = channel.stream_stream(
        "/test.Echo/ChatFail", request_serializer=Message.SerializeToString, response_deserializer=Message.FromString
    )
    call = chat()
    await call.write(Message(id="one"))
    assert (await call.read()).id == "echo one"
    await call.write(Message(id="boom"))
    assert (await call.code(), await call.details()) == (grpc.StatusCode.UNKNOWN, "internal error (logged by echo)")
