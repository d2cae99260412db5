"""The chassis's tenant rules and elevated tokens, over real gRPC: the token before the tenant, each refusal as its
rule words it (with the edge's HTTP status), the admitted caller handed to the handler, the request untouched."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import grpc
import pytest

from thermostat.chassis.auth import TokenRule, caller
from thermostat.chassis.server import ServiceHost, ServiceSpec
from thermostat.chassis.tenancy import Denial, TenantRule, scope

HANG_GUARD = 10.0
NO_TOKEN = Denial(grpc.StatusCode.UNAUTHENTICATED, "a valid bearer token is required", 401)
NO_TENANT = Denial(grpc.StatusCode.INVALID_ARGUMENT, "the X-Tenant header is required", 400)
TOO_LONG = Denial(grpc.StatusCode.INVALID_ARGUMENT, "X-Tenant: at most 8 characters", 400)
ADMIN_ONLY = Denial(grpc.StatusCode.PERMISSION_DENIED, "this needs the admin token", 403)
TOKEN = TokenRule(tokens=("api",), elevated=("admin",), missing=NO_TOKEN, wrong=NO_TOKEN)
TENANT = TenantRule(header="x-tenant", max_length=8, missing=NO_TENANT, too_long=TOO_LONG)
METHODS = ("Tenant", "Listing", "Admin", "Stream", "Unruled")


def method(name: str) -> str:
    return f"/test.Tenants/{name}"


def handlers() -> grpc.GenericRpcHandler:
    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        found = caller()
        # the handler reads the caller and the request exactly as sent, with the scope an elevated caller may ask
        return json.dumps({
            "elevated": found.elevated,
            "tenant": found.tenant,
            "request": request.decode(),
            "scope": scope(found, request.decode()),
        }).encode()  # fmt: skip

    async def unruled(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            caller()
        except LookupError:
            return b"no caller"
        return b"a caller"

    async def stream(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request

    table: dict[str, grpc.RpcMethodHandler] = {
        name: grpc.unary_unary_rpc_method_handler(echo) for name in ("Tenant", "Listing", "Admin")
    }
    table["Unruled"] = grpc.unary_unary_rpc_method_handler(unruled)
    table["Stream"] = grpc.stream_stream_rpc_method_handler(stream)
    return grpc.method_handlers_generic_handler("test.Tenants", table)


@pytest.fixture
async def port() -> AsyncIterator[int]:
    host = ServiceHost(
        ServiceSpec(
            name="tenants",
            service_names=["test.Tenants"],
            register=lambda server: server.add_generic_rpc_handlers((handlers(),)),
            auth_rules={
                method("Tenant"): TOKEN,
                method("Listing"): TOKEN,
                method("Stream"): TOKEN,
                method("Admin"): TokenRule(
                    tokens=("api",), elevated=("admin",), elevated_only=ADMIN_ONLY, missing=NO_TOKEN, wrong=NO_TOKEN
                ),
            },
            tenant_rules={
                method("Tenant"): TENANT,
                method("Stream"): TENANT,
                method("Listing"): TenantRule(
                    header="x-tenant", max_length=8, missing=NO_TENANT, too_long=TOO_LONG, elevated_exempt=True
                ),
            },
        )
    )
    yield await host.start()
    await host.stop(0.1)


def metadata(token: str | None = "api", tenant: str | None = "acme") -> tuple[tuple[str, str], ...]:  # noqa: S107
    pairs = [] if token is None else [("authorization", f"Bearer {token}")]
    return tuple(pairs + ([] if tenant is None else [("x-tenant", tenant)]))


async def call(port: int, name: str, sent: tuple[tuple[str, str], ...], request: bytes = b"") -> tuple[object, ...]:
    """(code, detail, x-http-code, answer) of one unary call."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        rpc = channel.unary_unary(method(name))
        try:
            answer = await rpc(request, metadata=sent, timeout=HANG_GUARD)
        except grpc.aio.AioRpcError as error:
            http = dict(error.initial_metadata() or ()).get("x-http-code")
            return error.code(), error.details(), http, None
        return grpc.StatusCode.OK, "", None, answer


def refused(denial: Denial) -> tuple[object, ...]:
    return denial.code, denial.message, str(denial.http), None


@pytest.mark.parametrize(
    ("name", "sent", "expected"),
    [
        pytest.param("Tenant", metadata(None, None), refused(NO_TOKEN), id="no-token-before-no-tenant"),
        pytest.param("Tenant", metadata("wrong", None), refused(NO_TOKEN), id="a-wrong-token-before-no-tenant"),
        pytest.param("Tenant", metadata(tenant=None), refused(NO_TENANT), id="no-tenant-header"),
        pytest.param("Tenant", metadata(tenant="   "), refused(NO_TENANT), id="a-blank-tenant-is-none"),
        pytest.param("Tenant", metadata(tenant="x" * 9), refused(TOO_LONG), id="a-tenant-over-its-length"),
        pytest.param("Tenant", metadata("admin", None), refused(NO_TENANT), id="the-elevated-token-needs-a-tenant-too"),
        pytest.param("Admin", metadata(None), refused(NO_TOKEN), id="admin-only-no-token-first"),
        pytest.param("Admin", metadata("api"), refused(ADMIN_ONLY), id="admin-only-refuses-the-plain-token"),
    ],
)
async def test_refusals_in_the_rules_order(port: int, name: str, sent: tuple[tuple[str, str], ...], expected) -> None:
    assert await call(port, name, sent) == expected


@pytest.mark.parametrize(
    ("name", "sent", "request_body", "expected"),
    [
        pytest.param(
            "Tenant",
            metadata(tenant=" acme "),
            b"globex",
            {"elevated": False, "tenant": "acme", "request": "globex", "scope": "acme"},
            id="the-tenant-is-the-headers-stripped-never-the-requests",
        ),
        pytest.param(
            "Tenant",
            metadata("admin"),
            b"",
            {"elevated": True, "tenant": "acme", "request": "", "scope": None},
            id="the-elevated-token-admits-and-says-so",
        ),
        pytest.param(
            "Listing",
            metadata("admin", None),
            b"globex",
            {"elevated": True, "tenant": None, "request": "globex", "scope": "globex"},
            id="an-exempt-elevated-caller-names-its-scope",
        ),
        pytest.param(
            "Listing",
            metadata("admin", "x" * 20),
            b"",
            {"elevated": True, "tenant": None, "request": "", "scope": None},
            id="an-exempt-elevated-caller-is-not-held-to-the-header",
        ),
        pytest.param(
            "Listing",
            metadata("api", "acme"),
            b"globex",
            {"elevated": False, "tenant": "acme", "request": "globex", "scope": "acme"},
            id="a-plain-caller-reads-its-own-tenant-whatever-it-asks",
        ),
        pytest.param(
            "Admin",
            metadata("admin", None),
            b"",
            {"elevated": True, "tenant": None, "request": "", "scope": None},
            id="admin-only-admits-the-elevated-token",
        ),
    ],
)
async def test_the_admitted_caller_reaches_the_handler(
    port: int, name: str, sent: tuple[tuple[str, str], ...], request_body: bytes, expected: dict[str, object]
) -> None:
    code, _, _, answer = await call(port, name, sent, request_body)
    assert code is grpc.StatusCode.OK and isinstance(answer, bytes)
    assert json.loads(answer) == expected


async def test_a_method_without_rules_is_open_and_has_no_caller(port: int) -> None:
    assert (await call(port, "Unruled", ()))[3] == b"no caller"


@pytest.mark.parametrize(
    ("sent", "denial"),
    [
        pytest.param(metadata(None, None), NO_TOKEN, id="no-token"),
        pytest.param(metadata(tenant=None), NO_TENANT, id="no-tenant"),
    ],
)
async def test_a_stream_is_refused_before_any_request_is_read(
    port: int, sent: tuple[tuple[str, str], ...], denial: Denial
) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stream = channel.stream_stream(method("Stream"))(metadata=sent, timeout=HANG_GUARD)
        # no request written: the refusal comes anyway, with its HTTP status in the response's headers
        assert await stream.code() == denial.code
        assert await stream.details() == denial.message
        # The header goes out as initial metadata just before the status; when both are still unwritten, gRPC's
        # transport sends them as one trailers-only HEADERS frame (seen once in CI), which this client reports as
        # trailing metadata: the edge's filter reads that same frame, the response's only headers, either way.
        headers = dict(await stream.initial_metadata()) or dict(await stream.trailing_metadata())
        assert headers.get("x-http-code") == str(denial.http)
