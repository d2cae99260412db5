"""Find-or-abort: a servicer resolves what a request names before doing anything, or answers NOT_FOUND."""

from __future__ import annotations

from typing import Any, TypeVar

import grpc
from grpc import aio

T = TypeVar("T")


async def found_or_abort(found: T | None, context: aio.ServicerContext[Any, Any], message: str) -> T:
    """`found`, or abort the RPC with NOT_FOUND and `message` (the edge answers 404 with it as detail)."""
    if found is None:
        await context.abort(grpc.StatusCode.NOT_FOUND, message)
        raise AssertionError("context.abort returned")  # it raises; this line tells the type checker so
    return found
