"""An unexpected exception in a handler is answered with a fixed detail and logged, never sent.

Left to itself grpc.aio answers UNKNOWN with `Unexpected <class 'X'>: <the exception's text>`, and that text may
hold a DSN, a token or a provider's answer (through the edge it becomes the problem+json `detail`). Every
service's handlers are wrapped here instead (by the request-context interceptor, which already runs on every
call): the caller reads `internal error (logged by <service>)` with the code the handler had set, else UNKNOWN,
and the service's log holds the traceback with the method and the request id.

What a handler means to send passes through untouched: an abort (`context.abort` raises AbortError having sent
its status), grpc's own errors (a write to a caller gone, a server stopping: their text is grpc's) and a
cancellation (a BaseException, never caught here).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NoReturn

import grpc
from grpc import aio
from grpc._cython import cygrpc

from thermostat.chassis.method_handlers import rewrapped

log = logging.getLogger("thermostat.chassis.unexpected_errors")

_GRPCS_OWN = cygrpc.BaseError
"""AbortError, UsageError, ExecuteBatchError, the server-stopped error: raised by grpc, with grpc's text."""

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def internal_error(service: str) -> str:
    """The detail an unexpected exception is answered with (the pool's RunJobs answers a message alike)."""
    return f"internal error (logged by {service})"


RequestId = Callable[[], str | None]


def guarded_handler(
    handler: grpc.RpcMethodHandler, method: str, service: str, request_id: RequestId
) -> grpc.RpcMethodHandler:
    """`handler` with each of its behaviours answering an unexpected exception by `internal_error(service)`;
    `request_id` reads the call's, for the log."""
    detail = internal_error(service)

    async def answer(error: Exception, context: aio.ServicerContext[Any, Any]) -> NoReturn:
        if isinstance(error, _GRPCS_OWN):
            raise error
        log.error(
            "%s: unexpected %s (request %s); answered %r",
            method,
            type(error).__name__,
            request_id(),
            detail,
            exc_info=error,
        )
        # grpc.aio keeps a code the handler set before raising; so does this
        code = context.code()
        code = _CODES.get(code, grpc.StatusCode.UNKNOWN) if isinstance(code, int) else code
        await context.abort(code if code not in (None, grpc.StatusCode.OK) else grpc.StatusCode.UNKNOWN, detail)
        raise AssertionError("unreachable")  # abort raises

    def unary(behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def guarded(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
            try:
                result = behaviour(request, context)
                return await result if inspect.isawaitable(result) else result
            except Exception as error:
                await answer(error, context)

        return guarded

    def streaming(behaviour: Callable[..., Any]) -> Callable[..., Any]:
        if not inspect.isasyncgenfunction(behaviour):
            return unary(behaviour)  # a handler writing with context.write() returns like a unary one

        async def guarded(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            try:
                async for response in behaviour(request, context):
                    yield response
            except Exception as error:
                await answer(error, context)

        return guarded

    return rewrapped(handler, unary=unary, streaming=streaming)
