"""A NUL in any string field of a request is found and named, however deep or repeated."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace

import grpc

from thermostat.chassis.text_fields import (
    Refused,
    TextFieldInterceptor,
    Undecodable,
    bad_utf8_field,
    nul_field,
    refusal,
)
from thermostat.metering.v1 import metering_pb2
from thermostat.pods.v1 import pods_pb2
from thermostat.pool.v1 import pool_pb2


def test_a_request_without_a_nul_names_no_field() -> None:
    assert nul_field(pool_pb2.ListUsageJsonRequest(tenant_id="acme", page_size=3)) is None
    assert nul_field(b"raw bytes") is None


def test_a_nul_in_a_top_level_string_names_that_field() -> None:
    assert nul_field(pool_pb2.ListUsageJsonRequest(tenant_id="ac\x00me")) == "tenant_id"


def test_a_nul_in_a_nested_or_repeated_string_names_its_path() -> None:
    response = pods_pb2.StopPodResponse(
        name="qwen", pods=[pods_pb2.PodResult(pod_id="a"), pods_pb2.PodResult(pod_id="\x00")]
    )
    assert nul_field(response) == "pods.pod_id"


def test_a_nul_in_bytes_is_data_not_text() -> None:
    request = pool_pb2.SubmitJobRequest(machine_type="local")
    request.payload.data = b"\x00\x01"
    assert nul_field(request) is None


def test_the_refusal_names_the_field_and_the_character() -> None:
    assert refusal("tenant_id") == "tenant_id: must not contain a NUL character (U+0000)"
    assert nul_field(metering_pb2.SetTenantBudgetRequest(tenant_id="\x00")) == "tenant_id"


def test_a_string_field_that_is_not_utf8_is_named_from_the_wire_bytes() -> None:
    """Envoy copies a percent-decoded path segment (`%ff%fe`) into a string field unchecked."""
    good = pods_pb2.GetPodRequest(name="qwen").SerializeToString()
    assert bad_utf8_field(good, pods_pb2.GetPodRequest.DESCRIPTOR) is None
    assert bad_utf8_field(b"\x0a\x02\xff\xfe", pods_pb2.GetPodRequest.DESCRIPTOR) == "name"


def test_a_bad_string_inside_a_nested_message_is_named_by_its_path() -> None:
    inner = b"\x0a\x01\xff"  # PodResult.pod_id = b"\xff"
    outer = b"\x0a\x04qwen" + b"\x1a" + bytes([len(inner)]) + inner  # StopPodResponse.pods[0]
    assert bad_utf8_field(outer, pods_pb2.StopPodResponse.DESCRIPTOR) == "pods.pod_id"


def test_truncated_wire_bytes_name_no_field() -> None:
    assert bad_utf8_field(b"\x0a\x09\xff", pods_pb2.GetPodRequest.DESCRIPTOR) == "name"
    assert bad_utf8_field(b"\x0a", pods_pb2.GetPodRequest.DESCRIPTOR) is None


async def test_the_checked_handler_is_built_once_per_registered_handler_and_reused() -> None:
    """grpc runs interceptors on every call: a registered method's checked handler is the same object each time,
    and a different handler (another method, or a per-call one) gets its own."""

    async def echo(request: object, context: object) -> object:
        return request

    registered = grpc.unary_unary_rpc_method_handler(echo, pool_pb2.GetJobRequest.FromString)
    other = grpc.unary_unary_rpc_method_handler(echo, pool_pb2.GetJobRequest.FromString)
    interceptor = TextFieldInterceptor()
    details = SimpleNamespace(method="/thermostat.pool.v1.PoolDispatcher/GetJob", invocation_metadata=())

    async def continuation_to(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        async def continuation(_details: object) -> grpc.RpcMethodHandler:
            return handler

        return await interceptor.intercept_service(continuation, details)

    first, again, another = [await continuation_to(h) for h in (registered, registered, other)]
    assert first is again and another is not first
    assert first.unary_unary is not echo  # wrapped: the check runs before the servicer
    request = pool_pb2.GetJobRequest(id="job-1")
    assert await first.unary_unary(request, SimpleNamespace()) is request


async def test_a_streaming_request_reads_a_refused_in_place_of_each_bad_message() -> None:
    """NUL: the message as parsed; not UTF-8: the message without the field that is not, so its other fields
    (a stream's tag) are still read; nothing parsing at all: no message."""
    seen: list[object] = []

    async def chat(requests: AsyncIterator[object], context: object) -> AsyncIterator[object]:
        async for request in requests:
            seen.append(request)
            yield request

    handler = grpc.stream_stream_rpc_method_handler(chat, pool_pb2.RunJobsRequest.FromString)
    details = SimpleNamespace(method="/thermostat.pool.v1.PoolDispatcher/RunJobs", invocation_metadata=())

    async def continuation(_details: object) -> grpc.RpcMethodHandler:
        return handler

    checked = await TextFieldInterceptor().intercept_service(continuation, details)
    parse = checked.request_deserializer
    good = pool_pb2.RunJobsRequest(tag=1)
    with_nul = pool_pb2.RunJobsRequest(tag=2, job=pool_pb2.SubmitJobSyncRequest(session_id="a\x00"))
    marker = "\u00e9\u00e9"
    not_utf8 = pool_pb2.RunJobsRequest(tag=3, job=pool_pb2.SubmitJobSyncRequest(machine_type=marker))
    raw = not_utf8.SerializeToString().replace(marker.encode(), b"\xff\xfe\xff\xfe")

    async def arriving() -> AsyncIterator[object]:
        for message in (good.SerializeToString(), with_nul.SerializeToString(), raw, b"\xff\xff"):
            yield parse(message)

    _ = [item async for item in checked.stream_stream(arriving(), SimpleNamespace())]
    first, nul, bad, garbage = seen
    assert first == good
    assert nul == Refused("job.session_id: must not contain a NUL character (U+0000)", with_nul)
    assert isinstance(bad, Refused) and bad.detail == "job.machine_type: is not valid UTF-8"
    assert bad.request == pool_pb2.RunJobsRequest(tag=3)
    assert garbage == Refused("the request is not a valid message of its type", None)


async def test_the_checked_handler_parses_a_nul_in_a_string_as_a_refusal_and_zero_bytes_in_bytes_as_data() -> None:
    """The NUL check runs as the request is parsed: a string holding one parses to the refusal naming its field
    (nested ones too), while a payload of zero bytes, or wire bytes with no zero byte at all, parse to the message."""

    async def echo(request: object, context: object) -> object:
        return request

    interceptor = TextFieldInterceptor()
    details = SimpleNamespace(method="/thermostat.pool.v1.PoolDispatcher/SubmitJobSync", invocation_metadata=())
    registered = grpc.unary_unary_rpc_method_handler(echo, pool_pb2.SubmitJobSyncRequest.FromString)

    async def continuation(_details: object) -> grpc.RpcMethodHandler:
        return registered

    parse = (await interceptor.intercept_service(continuation, details)).request_deserializer
    clean = pool_pb2.SubmitJobSyncRequest(machine_type="echo", wait_seconds="60")
    clean.payload.data = b'{"job": 1}'
    binary = pool_pb2.SubmitJobSyncRequest(machine_type="echo")
    binary.payload.data = b"\x00\x01\x00"
    nested = pool_pb2.SubmitJobSyncRequest(machine_type="echo")
    nested.payload.content_type = "text/\x00plain"
    top = pool_pb2.SubmitJobSyncRequest(machine_type="ec\x00ho")

    assert b"\x00" not in clean.SerializeToString()
    assert parse(clean.SerializeToString()) == clean
    assert parse(binary.SerializeToString()) == binary
    assert parse(nested.SerializeToString()) == Undecodable(refusal("payload.content_type"), nested)
    assert parse(top.SerializeToString()) == Undecodable(refusal("machine_type"), top)


async def test_a_transcoded_rest_request_opening_with_an_empty_payload_is_still_checked_past_it() -> None:
    """Envoy's transcoder opens a REST request bound to a body field with that field empty (`\\n\\x00`), then the
    filled one: that zero is a length, not text, and a NUL in a string after it is still refused."""

    async def echo(request: object, context: object) -> object:
        return request

    interceptor = TextFieldInterceptor()
    details = SimpleNamespace(method="/thermostat.pool.v1.PoolDispatcher/SubmitJobSync", invocation_metadata=())
    registered = grpc.unary_unary_rpc_method_handler(echo, pool_pb2.SubmitJobSyncRequest.FromString)

    async def continuation(_details: object) -> grpc.RpcMethodHandler:
        return registered

    parse = (await interceptor.intercept_service(continuation, details)).request_deserializer
    body = pool_pb2.SubmitJobSyncRequest(machine_type="echo", wait_seconds="60")
    body.payload.data = b'{"job": 1}'
    body.payload.content_type = "application/octet-stream"
    as_transcoded = b"\n\x00" + body.SerializeToString()
    bad = b"\n\x00" + pool_pb2.SubmitJobSyncRequest(machine_type="ec\x00ho").SerializeToString()

    assert parse(as_transcoded) == body
    assert parse(bad) == Undecodable(refusal("machine_type"), pool_pb2.SubmitJobSyncRequest.FromString(bad))
    assert parse(b"\n\x00") == pool_pb2.SubmitJobSyncRequest(payload={})
