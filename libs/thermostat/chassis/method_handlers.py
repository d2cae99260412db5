"""Rebuilding a grpc method handler around its behaviour, whichever of grpc's four kinds it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]

# (attribute, constructor, whether it answers with a stream): grpc's handler constructors differ by kind
_KINDS = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler, False),
    ("unary_stream", grpc.unary_stream_rpc_method_handler, True),
    ("stream_unary", grpc.stream_unary_rpc_method_handler, False),
    ("stream_stream", grpc.stream_stream_rpc_method_handler, True),
)


def rewrapped(handler: grpc.RpcMethodHandler, *, unary: Wrap, streaming: Wrap) -> grpc.RpcMethodHandler:
    """`handler` with its behaviour wrapped by `unary` (the kinds answering once) or `streaming` (the kinds
    answering with a stream), its (de)serializers kept; a handler of no known kind is returned as it is."""
    for kind, build, streams in _KINDS:
        behaviour = getattr(handler, kind)
        if behaviour is not None:
            wrap = streaming if streams else unary
            rebuilt: grpc.RpcMethodHandler = build(
                wrap(behaviour),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
            return rebuilt
    return handler
