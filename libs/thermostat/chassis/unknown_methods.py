"""The answer to a call of a method the process does not serve, in our words: grpcio's own is UNIMPLEMENTED
`Method not found!`, which names neither the method nor what is there instead (issue 38). Registered after every
service, so it answers only what no other handler took."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc
from google.protobuf import descriptor_pool
from grpc import aio


def unknown_method_message(method: str, served: Iterable[str]) -> str:
    """`method` is "/pkg.Service/Method"; `served` the gRPC services this port serves."""
    service, _, name = method.strip("/").partition("/")
    served = sorted(served)
    if service in served:
        try:
            methods = [m.name for m in descriptor_pool.Default().FindServiceByName(service).methods]
        except KeyError:
            return f"{service} has no method {name!r}"
        return f"{service} has no method {name!r}; its methods: {', '.join(methods)}"
    return f"this port serves no {service or method!r}; it serves {', '.join(served)} (grpcurl list names them)"


class UnknownMethods(grpc.GenericRpcHandler):  # type: ignore[misc]
    """UNIMPLEMENTED for every method no other handler serves, naming it and what the port serves."""

    def __init__(self, served: Iterable[str]) -> None:
        self._served = tuple(served)

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        message = unknown_method_message(handler_call_details.method, self._served)

        # a streaming handler answers a call of any kind: it refuses before reading a message
        async def refuse(requests: AsyncIterator[Any], context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)
            yield  # pragma: no cover (an async generator; abort raised)

        return grpc.stream_stream_rpc_method_handler(refuse)
