"""How the pool's calls end when they do not simply return: statuses gRPC has no code for, refusals, strict bodies.

Statuses gRPC has no code for are named with `x-http-code`, which the edge's Lua filter applies (202, 413, 422,
502, 504, 409 with a body); `x-json-nulls` names the fields the edge writes as null.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

import grpc

from thermostat.policy.common.strict_json import BodyError, BodyField, read_json_object


async def status(
    context: grpc.aio.ServicerContext,
    code: int | None,
    *,
    nulls: tuple[str, ...] = (),
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    metadata = list(extra)
    if code is not None:
        metadata.append(("x-http-code", str(code)))
    if nulls:
        metadata.append(("x-json-nulls", ",".join(nulls)))
    if metadata:
        await context.send_initial_metadata(tuple(metadata))


async def abort(
    context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str, http: int | None = None
) -> NoReturn:
    """The pool's one way a call ends in error: `http` names the REST status (None: a gRPC-only call, or a stream
    whose initial metadata went out with its first answers)."""
    if http is not None:
        await context.send_initial_metadata((("x-http-code", str(http)),))
    await context.abort(code, message)
    raise AssertionError("unreachable")  # abort raises


async def read_body(
    data: bytes, fields: tuple[BodyField, ...], bound: Mapping[str, str], context: grpc.aio.ServicerContext
) -> Mapping[str, float | str]:
    """A REST route's JSON body read strictly (policy/common/strict_json.py): 400 naming what was wrong, before
    anything acts (the transcoder would have dropped an unknown field and acted on the rest)."""
    read = read_json_object(data, fields, bound=bound)
    if isinstance(read, BodyError):
        await abort(context, grpc.StatusCode.INVALID_ARGUMENT, read.detail, 400)
    return read.values
