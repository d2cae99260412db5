"""A refused token's message says where tokens come from (THERMOSTAT_TOKEN_HINT, set by the dev stack), never a
token; an internal call's refusal does not (issue 35: every restart minted new tokens and other shells got 401/403
with no hint)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from thermostat.chassis.auth import TOKEN_HINT_ENV, TokenRule
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.chassis.tenancy import Denial

HINT = "make run printed this stack's tokens as export lines at start and keeps them in /x/.data/tokens.json"
NO_TOKEN = Denial(grpc.StatusCode.UNAUTHENTICATED, "a valid bearer token is required", 401)


def handlers() -> grpc.GenericRpcHandler:
    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    table = {"Call": grpc.unary_unary_rpc_method_handler(echo)}
    return grpc.method_handlers_generic_handler("test.Hinted", table)


def internal_handlers() -> grpc.GenericRpcHandler:
    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    table = {"Call": grpc.unary_unary_rpc_method_handler(echo)}
    return grpc.method_handlers_generic_handler("test.Inside", table)


@pytest.fixture
async def port(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[int]:
    monkeypatch.setenv(TOKEN_HINT_ENV, HINT)
    monkeypatch.setenv(INTERNAL_TOKEN_ENV, "internal-secret")
    host = ServiceHost(
        ServiceSpec(
            name="hinted",
            service_names=["test.Hinted", "test.Inside"],
            register=lambda server: server.add_generic_rpc_handlers((handlers(), internal_handlers())),
            auth_rules={
                "/test.Hinted/Call": TokenRule(tokens=("the-api-secret",), missing=NO_TOKEN, wrong=NO_TOKEN),
            },
            internal_token="internal-secret",
            internal_services=("test.Inside",),
        )
    )
    yield await host.start()
    await host.stop(0.1)


async def _refusal(port: int, path: str, metadata: tuple[tuple[str, str], ...]) -> grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await channel.unary_unary(path)(b"x", metadata=metadata, timeout=10)
    return refused.value


async def test_a_missing_token_is_refused_with_where_tokens_come_from(port: int) -> None:
    """401 as the rule words it, then the hint."""
    error = await _refusal(port, "/test.Hinted/Call", ())
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error.details() == f"a valid bearer token is required; {HINT}"


async def test_a_stale_token_is_refused_with_the_hint_and_no_token(port: int) -> None:
    """The token presented and the valid one appear nowhere in the message."""
    error = await _refusal(port, "/test.Hinted/Call", (("authorization", "Bearer stale-from-yesterday"),))
    details = error.details() or ""
    assert details.endswith(HINT)
    assert "stale-from-yesterday" not in details and "the-api-secret" not in details


async def test_an_internal_call_refused_gets_no_hint(port: int) -> None:
    """The internal token is not the quick starts' to fetch: its refusal stays as it was."""
    error = await _refusal(port, "/test.Inside/Call", ())
    assert HINT not in (error.details() or "")
