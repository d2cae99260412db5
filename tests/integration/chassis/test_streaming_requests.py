"""The chassis's interceptors on a streaming-request method, over real gRPC: auth refuses the call without waiting
for a message, and the text-field check screens every message, the handler reading a Refused in its place."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from thermostat.chassis.auth import TokenRule
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.chassis.text_fields import Refused
from thermostat.pool.v1 import pool_pb2

CHAT = "/test.Echo/Chat"
Message = pool_pb2.CancelJobRequest  # two string fields: one can be refused while the other is still read


async def chat(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Message]:
    async for request in requests:
        if isinstance(request, Refused):
            kept = "nothing" if request.request is None else request.request.id
            yield Message(id=kept, build_id=f"refused: {request.detail}")
        else:
            yield Message(id=request.id, build_id=f"echo {request.build_id}")


def register(server: grpc.aio.Server) -> None:
    handler = grpc.stream_stream_rpc_method_handler(
        chat, request_deserializer=Message.FromString, response_serializer=Message.SerializeToString
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Echo", {"Chat": handler}),))


@pytest.fixture
async def chat_call() -> AsyncIterator[Any]:
    host = ServiceHost(
        ServiceSpec(
            name="echo",
            service_names=["test.Echo"],
            register=register,
            auth_rules={CHAT: TokenRule(tokens=("stream-secret",))},
        )
    )
    port = await host.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel.stream_stream(
                CHAT, request_serializer=lambda data: data, response_deserializer=Message.FromString
            )
    finally:
        await host.stop(0.1)


async def test_auth_refuses_a_streaming_request_call_before_any_message(chat_call: Any) -> None:
    call = chat_call(metadata=())  # nothing written, nor half-closed
    assert await asyncio.wait_for(call.code(), 10) == grpc.StatusCode.UNAUTHENTICATED
    wrong = chat_call(metadata=(("authorization", "Bearer not-it"),))
    assert await asyncio.wait_for(wrong.code(), 10) == grpc.StatusCode.PERMISSION_DENIED


async def test_every_message_of_the_stream_is_checked_and_the_handler_answers_each_refusal(chat_call: Any) -> None:
    call = chat_call(metadata=(("authorization", "Bearer stream-secret"),))

    async def say(data: bytes) -> Message:
        await call.write(data)
        answer: Message = await call.read()
        return answer

    assert (await say(Message(id="1", build_id="a").SerializeToString())).build_id == "echo a"
    nul = await say(Message(id="2", build_id="b\x00").SerializeToString())
    assert (nul.id, nul.build_id) == ("2", "refused: build_id: must not contain a NUL character (U+0000)")
    not_utf8 = Message(id="3", build_id="\u00e9").SerializeToString().replace("\u00e9".encode(), b"\xff\xfe")
    bad = await say(not_utf8)
    assert (bad.id, bad.build_id) == ("3", "refused: build_id: is not valid UTF-8")  # the rest still read
    garbage = await say(b"\xff\xff\xff")
    assert (garbage.id, garbage.build_id) == ("nothing", "refused: the request is not a valid message of its type")
    assert (await say(Message(id="4", build_id="d").SerializeToString())).build_id == "echo d"
    await call.done_writing()
    assert await call.code() == grpc.StatusCode.OK
