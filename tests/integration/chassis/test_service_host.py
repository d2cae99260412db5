"""The chassis: health follows dependencies, reflection for grpcurl, auth, request context, graceful stop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.fixtures.polling import eventually
from thermostat.chassis.auth import TokenRule
from thermostat.chassis.ports import free_port
from thermostat.chassis.request_context import insecure_channel, outgoing_metadata, request_id_var
from thermostat.chassis.server import LIVENESS, ServiceHost, ServiceSpec

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# A deadline that only stops a hung call: a loopback call answers in milliseconds idle, seconds on loaded cores.
HANG_GUARD = 10.0


def _echo_handlers(seen: list[dict[str, str]]) -> grpc.GenericRpcHandler:
    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        seen.append({"request_id": request_id_var.get() or "", **dict(outgoing_metadata())})
        return request

    handlers = {name: grpc.unary_unary_rpc_method_handler(echo) for name in ("Open", "Guarded", "Wake")}
    return grpc.method_handlers_generic_handler("test.Echo", handlers)


async def _health(port: int, service: str = "") -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=HANG_GUARD
        )
        return int(reply.status)


async def _wait_for_status(port: int, status: int, service: str = "") -> None:
    async def reached() -> bool | None:
        return True if await _health(port, service) == status else None

    await eventually(reached, every=0.05)


@contextlib.asynccontextmanager
async def _probed_host(check: Callable[[], Awaitable[bool]]) -> AsyncIterator[int]:
    """A started host serving test.Echo whose health follows `check`, probed every 0.05 s; its port."""
    host = ServiceHost(
        ServiceSpec(name="t", service_names=["test.Echo"], register=lambda s: None, dependency_check=check),
        probe_seconds=0.05,
    )
    port = await host.start()
    try:
        yield port
    finally:
        await host.stop(0.1)


async def test_health_is_serving_only_while_the_dependency_answers() -> None:
    """The service turns NOT_SERVING when its store stops answering and SERVING again when it returns."""
    reachable = {"ok": True}

    async def check() -> bool:
        return reachable["ok"]

    async with _probed_host(check) as port:
        assert await _health(port) == SERVING
        assert await _health(port, "test.Echo") == SERVING
        reachable["ok"] = False
        await _wait_for_status(port, NOT_SERVING)
        await _wait_for_status(port, NOT_SERVING, "test.Echo")
        reachable["ok"] = True
        await _wait_for_status(port, SERVING)


async def test_liveness_stays_serving_while_the_dependency_is_down_so_a_store_outage_restarts_nothing() -> None:
    """Kubernetes' liveness probe asks for `liveness`: readiness (the service's name) follows the store, liveness
    only says the process answers, so an outage takes replicas out of rotation without a restart loop."""
    reachable = {"ok": True}

    async def check() -> bool:
        return reachable["ok"]

    async with _probed_host(check) as port:
        assert await _health(port, LIVENESS) == SERVING
        reachable["ok"] = False
        await _wait_for_status(port, NOT_SERVING, "test.Echo")
        assert await _health(port, LIVENESS) == SERVING


async def test_a_dependency_check_that_raises_reads_as_not_serving() -> None:
    """An exception from the store ping is 'not reachable', not a crash of the probe loop."""

    async def check() -> bool:
        raise OSError("connection refused")

    async with _probed_host(check) as port:
        assert await _health(port) == NOT_SERVING


async def _grpcurl(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    """grpcurl (installed beside this Python) against the host on `port`, in plaintext."""
    grpcurl = str(Path(sys.executable).parent / "grpcurl")
    return await asyncio.to_thread(
        subprocess.run, [grpcurl, "-plaintext", f"127.0.0.1:{port}", *args], capture_output=True, text=True, timeout=30
    )


async def test_grpcurl_lists_services_and_calls_health_by_reflection() -> None:
    """grpcurl (the dev dependency) lists what the port serves, health included and never an internal service, and
    calls health through server reflection."""
    seen: list[dict[str, str]] = []
    host = ServiceHost(
        ServiceSpec(
            name="t",
            service_names=["test.Echo", "test.Internal"],
            internal_services=["test.Internal"],
            register=lambda s: s.add_generic_rpc_handlers((_echo_handlers(seen),)),
        )
    )
    port = await host.start()
    try:
        listed = await _grpcurl(port, "list")
        assert listed.returncode == 0, listed.stderr
        names = listed.stdout.split()
        assert sorted(names) == ["grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection", "test.Echo"]
        called = await _grpcurl(port, "grpc.health.v1.Health/Check")
        assert called.returncode == 0, called.stderr
        assert json.loads(called.stdout) == {"status": "SERVING"}
    finally:
        await host.stop(0.1)


@pytest.fixture
async def guarded_host():
    seen: list[dict[str, str]] = []
    rules = {
        "/test.Echo/Guarded": TokenRule(tokens=("operator-secret",), headers=("x-rig-operator-token",)),
        "/test.Echo/Wake": TokenRule(tokens=("operator-secret", "wake-secret"), headers=("x-rig-operator-token",)),
    }
    host = ServiceHost(
        ServiceSpec(
            name="t",
            service_names=["test.Echo"],
            auth_rules=rules,
            register=lambda s: s.add_generic_rpc_handlers((_echo_handlers(seen),)),
        )
    )
    port = await host.start()
    yield port, seen
    await host.stop(0.1)


@pytest.mark.parametrize(
    ("method", "metadata", "expected"),
    [
        pytest.param("Open", (), grpc.StatusCode.OK, id="an-undeclared-method-is-open"),
        pytest.param("Guarded", (), grpc.StatusCode.UNAUTHENTICATED, id="missing-token-is-unauthenticated"),
        pytest.param(
            "Guarded",
            (("x-rig-operator-token", "nope"),),
            grpc.StatusCode.PERMISSION_DENIED,
            id="wrong-token-is-permission-denied",
        ),
        pytest.param(
            "Guarded", (("x-rig-operator-token", "operator-secret"),), grpc.StatusCode.OK, id="operator-header-admits"
        ),
        pytest.param("Guarded", (("authorization", "Bearer operator-secret"),), grpc.StatusCode.OK, id="bearer-admits"),
        pytest.param(
            "Guarded",
            (("authorization", "Bearer wake-secret"),),
            grpc.StatusCode.PERMISSION_DENIED,
            id="wake-token-does-not-admit-an-operator-route",
        ),
        pytest.param(
            "Wake",
            (("authorization", "Bearer wake-secret"),),
            grpc.StatusCode.OK,
            id="wake-token-admits-the-wake-route",
        ),
        pytest.param(
            "Guarded",
            (("authorization", "Basic operator-secret"),),
            grpc.StatusCode.UNAUTHENTICATED,
            id="a-non-bearer-scheme-is-no-token",
        ),
    ],
)
async def test_auth_rules_per_method(guarded_host, method, metadata, expected) -> None:
    """Each declared method admits exactly its tokens: none → UNAUTHENTICATED, wrong → PERMISSION_DENIED."""
    port, _ = guarded_host
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(f"/test.Echo/{method}")
        try:
            await call(b"x", metadata=metadata, timeout=5)
            code = grpc.StatusCode.OK
        except grpc.aio.AioRpcError as error:
            code = error.code()
    assert code == expected


async def test_a_rule_with_no_configured_token_refuses_everyone() -> None:
    """An unset secret fails closed: the route is refused rather than opened."""
    rule = TokenRule(tokens=(None, ""), headers=("x-rig-operator-token",))
    assert not rule.admits(["", "anything"])


async def test_request_id_and_traceparent_carry_into_outgoing_calls(guarded_host) -> None:
    """A caller's x-request-id and traceparent reach the handler and its outgoing calls unchanged."""
    port, seen = guarded_host
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        await channel.unary_unary("/test.Echo/Open")(
            b"x", metadata=(("x-request-id", "req-123"), ("traceparent", traceparent)), timeout=5
        )
    assert seen[-1] == {"request_id": "req-123", "x-request-id": "req-123", "traceparent": traceparent}

    # a hop through the propagating client channel keeps them
    request_id_var.set("req-456")
    from thermostat.chassis.request_context import traceparent_var

    traceparent_var.set(traceparent)
    async with insecure_channel(f"127.0.0.1:{port}") as channel:
        await channel.unary_unary("/test.Echo/Open")(b"y", timeout=5)
    assert seen[-1]["request_id"] == "req-456"
    assert seen[-1]["traceparent"] == traceparent


async def test_a_missing_request_id_is_minted_and_a_malformed_traceparent_dropped(guarded_host) -> None:
    """Every RPC gets a request id; a traceparent that is not W3C-shaped is not propagated."""
    port, seen = guarded_host
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        for _ in range(2):
            await channel.unary_unary("/test.Echo/Open")(b"x", metadata=(("traceparent", "garbage"),), timeout=5)
    minted = [call["request_id"] for call in seen[-2:]]
    assert [len(rid) for rid in minted] == [32, 32] and minted[0] != minted[1]
    assert "traceparent" not in seen[-1]


def _line_within(proc: subprocess.Popen[str], seconds: float) -> str:
    """The child's next stdout line, or a failure if none comes in time (never a hang on a silent child)."""
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], seconds)
    assert readable, f"no line from the child within {seconds} s"
    return proc.stdout.readline().strip()


def test_sigterm_drains_in_flight_rpcs_and_refuses_new_ones() -> None:
    """On SIGTERM an in-flight RPC finishes, the server turns NOT_SERVING and the process exits cleanly."""
    port = free_port()
    script = Path(__file__).with_name("slow_service.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=15)
            in_flight = channel.unary_unary("/test.Slow/Sleep").future(b"1.0", timeout=10)
            assert _line_within(proc, 15) == "sleeping"  # the handler runs: the signal finds the RPC in flight
            proc.send_signal(signal.SIGTERM)
            assert in_flight.result() == b"finished"
        _, stderr = proc.communicate(timeout=10)
        assert proc.returncode == 0
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.RpcError):
            channel.unary_unary("/test.Slow/Sleep")(b"0", timeout=1)
        log_lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
        messages = [line["message"] for line in log_lines]
        assert any("draining" in m for m in messages)
        assert messages[-1] == "slow stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _internal_handlers() -> grpc.GenericRpcHandler:
    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    return grpc.method_handlers_generic_handler("test.Internal", {"Any": grpc.unary_unary_rpc_method_handler(echo)})


@pytest.mark.parametrize(
    ("served_token", "channel_token", "expected"),
    [
        pytest.param("internal-secret", "internal-secret", grpc.StatusCode.OK, id="the-deployment-token-admits"),
        pytest.param("internal-secret", None, grpc.StatusCode.UNAUTHENTICATED, id="no-token-is-unauthenticated"),
        pytest.param("internal-secret", "other", grpc.StatusCode.PERMISSION_DENIED, id="another-token-is-denied"),
        pytest.param(None, "internal-secret", grpc.StatusCode.PERMISSION_DENIED, id="unset-on-the-server-refuses-all"),
    ],
)
async def test_an_internal_service_admits_only_the_internal_token_from_a_channel_that_carries_it(
    served_token: str | None, channel_token: str | None, expected: grpc.StatusCode
) -> None:
    """The chassis guards every method of an internal service with one rule; the public ones stay open."""
    host = ServiceHost(
        ServiceSpec(
            name="t",
            service_names=["test.Echo", "test.Internal"],
            internal_services=["test.Internal"],
            internal_token=served_token,
            register=lambda s: s.add_generic_rpc_handlers((_echo_handlers([]), _internal_handlers())),
        )
    )
    port = await host.start()
    try:
        async with insecure_channel(f"127.0.0.1:{port}", internal_token=channel_token) as channel:
            assert await channel.unary_unary("/test.Echo/Open")(b"x", timeout=5) == b"x"
            try:
                await channel.unary_unary("/test.Internal/Any")(b"x", timeout=5)
                code = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as error:
                code = error.code()
    finally:
        await host.stop(0.1)
    assert code == expected


def test_every_internal_service_of_the_registry_is_guarded_by_any_host() -> None:
    """A service added to the registry with internal RPCs needs no line of its own to be guarded."""
    from thermostat.chassis.registry import SERVICES

    spec = ServiceSpec(name="anything", service_names=[], register=lambda s: None)
    assert {name for s in SERVICES for name in s.internal_services} <= spec.internal
    assert "thermostat.pods.v1.PodControllerInternal" in spec.internal


async def test_a_nul_in_a_string_field_is_refused_naming_the_field_before_the_servicer_runs() -> None:
    """Postgres text cannot hold U+0000: every host refuses it at the door, unary and streaming alike."""
    host = ServiceHost(ServiceSpec(name="t", service_names=[], register=lambda s: None))
    port = await host.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as unary:
                await stub.Check(health_pb2.HealthCheckRequest(service="t\x00"), timeout=HANG_GUARD)
            assert unary.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert unary.value.details() == "service: must not contain a NUL character (U+0000)"
            with pytest.raises(grpc.aio.AioRpcError) as streamed:
                async for _ in stub.Watch(health_pb2.HealthCheckRequest(service="\x00"), timeout=HANG_GUARD):
                    pass
            assert streamed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert (await stub.Check(health_pb2.HealthCheckRequest(), timeout=HANG_GUARD)).status == SERVING
    finally:
        await host.stop(0.5)


async def test_a_string_field_that_is_not_utf8_is_refused_naming_the_field_not_a_crash() -> None:
    """What Envoy's transcoder sends for `/api/pods/%ff%fe`: INVALID_ARGUMENT naming the field, not UNKNOWN."""
    host = ServiceHost(ServiceSpec(name="t", service_names=[], register=lambda s: None))
    port = await host.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await check(b"\x0a\x02\xff\xfe", timeout=HANG_GUARD)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert refused.value.details() == "service: is not valid UTF-8"
            with pytest.raises(grpc.aio.AioRpcError) as garbage:
                await check(b"\xff\xff\xff", timeout=HANG_GUARD)
            assert garbage.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert garbage.value.details() == "the request is not a valid message of its type"
    finally:
        await host.stop(0.5)
