"""Every string field of a request is UTF-8 without a NUL character: else refused at the door, naming the field.

Both reached the services through the edge as unhandled errors (500s), found by issue 14's fuzzing:
- Envoy's transcoder copies a percent-decoded path segment into a string field without checking it is UTF-8
  (`GET /api/pods/%ff`); the message then fails to parse in the service, before any servicer code runs.
- Postgres text cannot hold U+0000, so a NUL in an id, name or tenant fails in the query
  (`GET /v1/usage?tenantId=%00`). No name, id or tenant Thermostat knows contains one.
So every service refuses either with INVALID_ARGUMENT (a 400 through the edge) naming the field, before its
servicer runs, for every RPC present and future.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor, message
from grpc import aio


def nul_field(request: object, prefix: str = "") -> str | None:
    """The dotted name of the first string field (nested and repeated ones included) holding a NUL, else None."""
    if not isinstance(request, message.Message):
        return None
    for field, value in request.ListFields():
        name = f"{prefix}{field.name}"
        values = list(value) if field.is_repeated and not _is_map(field) else [value]
        if _is_map(field):
            values = [*value.keys(), *value.values()]
        for item in values:
            if isinstance(item, str) and "\x00" in item:
                return name
            if isinstance(item, message.Message):
                nested = nul_field(item, f"{name}.")
                if nested is not None:
                    return nested
    return None


def bad_utf8_field(raw: bytes, desc: descriptor.Descriptor, prefix: str = "") -> str | None:
    """The dotted name of the first string field in the wire bytes `raw` (of type `desc`) that is not UTF-8."""
    try:
        position = 0
        while position < len(raw):
            key, position = _varint(raw, position)
            number, wire_type = key >> 3, key & 7
            if wire_type == 0:
                _, position = _varint(raw, position)
            elif wire_type in (1, 5):
                position += 8 if wire_type == 1 else 4
            elif wire_type == 2:
                length, position = _varint(raw, position)
                chunk, position = raw[position : position + length], position + length
                field = desc.fields_by_number.get(number)
                found = None if field is None else _bad_chunk(chunk, field, prefix)
                if found is not None:
                    return found
            else:
                return None
    except IndexError:
        return None
    return None


def _bad_chunk(chunk: bytes, field: descriptor.FieldDescriptor, prefix: str) -> str | None:
    name = f"{prefix}{field.name}"
    if field.type == descriptor.FieldDescriptor.TYPE_STRING:
        try:
            chunk.decode("utf-8")
        except UnicodeDecodeError:
            return name
    elif field.message_type is not None:
        return bad_utf8_field(chunk, field.message_type, f"{name}.")
    return None


def _varint(raw: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = raw[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def _is_map(field: descriptor.FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def refusal(field: str) -> str:
    return f"{field}: must not contain a NUL character (U+0000)"


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A request refused as it was parsed: what the servicer is refused with instead of the message. `salvaged`
    is the message (without its fields whose text is not UTF-8, when the rest parses; whole when it holds a NUL),
    which a stream answers by."""

    detail: str
    salvaged: Any = None


@dataclass(frozen=True, slots=True)
class Refused:
    """What a streaming-request handler reads in place of a message of its stream that the check refused:
    `detail` names the field, `request` is the message (without its undecodable fields), None when nothing of
    it parsed. The handler answers it and reads on: one bad message need not end a stream. (The handler reads the
    request iterator it is given: `context.read()` would bypass the check.)"""

    detail: str
    request: Any


def _lenient(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """The handler's deserializer, answering Undecodable for bytes its message type cannot parse and for a message
    holding a NUL in a string field."""
    if deserializer is None:
        return None
    desc = getattr(getattr(deserializer, "__self__", None), "DESCRIPTOR", None)

    def parse(raw: bytes) -> Any:
        try:
            request = deserializer(raw)
        except message.DecodeError:
            field = bad_utf8_field(raw, desc) if isinstance(desc, descriptor.Descriptor) else None
            if field is not None:
                assert isinstance(desc, descriptor.Descriptor)
                salvaged = None
                with contextlib.suppress(message.DecodeError, IndexError):  # IndexError: cut short further on
                    salvaged = deserializer(_without_bad_text(raw, desc))
                return Undecodable(f"{field}: is not valid UTF-8", salvaged)
            return Undecodable("the request is not a valid message of its type")
        # A string field holds its UTF-8 bytes verbatim on the wire, and U+0000 is the byte 0: wire bytes without
        # one hold no NUL anywhere, and the walk over every field (the costlier part, on every call) is skipped.
        if raw.find(b"\x00", _text_from(raw)) != -1:
            field = nul_field(request)
            if field is not None:
                return Undecodable(refusal(field), request)
        return request

    return parse


def _text_from(raw: bytes) -> int:
    """Where a zero byte in `raw` may be text: past an empty leading length-delimited field (a one-byte key, then
    length 0), which is how Envoy's transcoder opens every REST request bound to a body field (`\\n\\x00`, an empty
    HttpBody, before the one it fills); its zero is that length. Else from the start."""
    return 2 if len(raw) >= 2 and raw[0] < 0x80 and raw[0] & 7 == 2 and raw[1] == 0 else 0


def _without_bad_text(raw: bytes, desc: descriptor.Descriptor) -> bytes:
    """The wire bytes less every top-level field holding text that is not UTF-8 (itself or nested)."""
    kept = bytearray()
    position = 0
    while position < len(raw):
        start = position
        key, position = _varint(raw, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, position = _varint(raw, position)
        elif wire_type in (1, 5):
            position += 8 if wire_type == 1 else 4
        elif wire_type == 2:
            length, position = _varint(raw, position)
            chunk, position = raw[position : position + length], position + length
            field = desc.fields_by_number.get(number)
            if field is not None and _bad_chunk(chunk, field, "") is not None:
                continue
        else:
            return bytes(kept)
        kept += raw[start:position]
    return bytes(kept)


async def _refused(request: Any, context: aio.ServicerContext[Any, Any]) -> None:
    """Abort when the request did not parse or holds a NUL in a string field (found as it was parsed)."""
    if isinstance(request, Undecodable):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.detail)


_CHECKED_HANDLERS = 1024
"""Checked handlers kept for reuse: one per method, plus the few per-call ones a refusal builds (auth's denials)."""


class TextFieldInterceptor(aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses a unary request (unary or server-streaming answer) whose string fields are not UTF-8 or hold a NUL.
    A streaming request is checked message by message: the handler reads a Refused in place of a bad one.

    The checked handler is built once per handler the services registered and reused, not rebuilt per call:
    grpc runs the interceptors on every call, on the hot path of a pool job."""

    def __init__(self) -> None:
        self._checked: dict[int, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        known = self._checked.get(id(handler))
        if known is not None and known[0] is handler:  # the id of a handler still alive (kept in the entry)
            return known[1]
        checked = _checked_handler(handler)
        if len(self._checked) >= _CHECKED_HANDLERS:
            self._checked.clear()
        self._checked[id(handler)] = (handler, checked)
        return checked


def _checked_handler(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            _checked_unary(handler.unary_unary),
            _lenient(handler.request_deserializer),
            handler.response_serializer,
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            _checked_stream(handler.unary_stream),
            _lenient(handler.request_deserializer),
            handler.response_serializer,
        )
    if handler.stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(
            _screened_stream(handler.stream_stream),
            _lenient(handler.request_deserializer),
            handler.response_serializer,
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            _screened_unary(handler.stream_unary),
            _lenient(handler.request_deserializer),
            handler.response_serializer,
        )
    return handler


def _checked_unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def checked(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        await _refused(request, context)
        result = behavior(request, context)
        return await result if inspect.isawaitable(result) else result

    return checked


def _checked_stream(behavior: Callable[..., Any]) -> Callable[..., AsyncIterator[Any]]:
    async def checked(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        await _refused(request, context)
        result = behavior(request, context)
        if hasattr(result, "__aiter__"):
            async for item in result:
                yield item
        else:
            # a servicer that writes to the context itself returns a coroutine instead of yielding
            await result

    return checked


async def _screened(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """The stream's messages, each one refused as it was parsed replaced by a Refused naming its field."""
    async for request in requests:
        yield Refused(request.detail, request.salvaged) if isinstance(request, Undecodable) else request


def _screened_stream(behavior: Callable[..., Any]) -> Callable[..., AsyncIterator[Any]]:
    async def screened(requests: AsyncIterator[Any], context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        result = behavior(_screened(requests), context)
        if hasattr(result, "__aiter__"):
            async for item in result:
                yield item
        else:
            await result

    return screened


def _screened_unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def screened(requests: AsyncIterator[Any], context: aio.ServicerContext[Any, Any]) -> Any:
        result = behavior(_screened(requests), context)
        return await result if inspect.isawaitable(result) else result

    return screened
