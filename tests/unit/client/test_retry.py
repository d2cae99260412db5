"""Which failures are tried again and after how long: only UNAVAILABLE; never a call that may have billed once a
server could have received it; jittered exponential backoff within its bounds. The transport is exercised
against a real gRPC server on loopback that fails on purpose, with the sleep injected (nothing waits)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from thermostat.chassis.ports import free_port
from thermostat.client import AsyncThermostat, ClientConfig, RetryPolicy, errors
from thermostat.client.retry import backoff_delay, never_sent, should_retry
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc
from thermostat.pool.v1 import pool_pb2, pool_pb2_grpc

NEVER_CONNECTED = "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Connection refused"

# --- the decision, table-first ------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [c for c in grpc.StatusCode if c is not grpc.StatusCode.UNAVAILABLE])
def test_no_code_but_unavailable_is_retried(code: grpc.StatusCode) -> None:
    assert not should_retry(code, "", may_bill=False)
    assert not should_retry(code, NEVER_CONNECTED, may_bill=False)


def test_unavailable_is_retried_for_a_call_that_cannot_bill() -> None:
    assert should_retry(grpc.StatusCode.UNAVAILABLE, "Socket closed", may_bill=False)


def test_a_call_that_may_bill_is_not_retried_once_a_server_could_have_received_it() -> None:
    for detail in ("Socket closed", "upstream connect error or disconnect/reset before headers", "wake refused"):
        assert not should_retry(grpc.StatusCode.UNAVAILABLE, detail, may_bill=True)


def test_the_decision_retries_a_call_that_may_bill_when_no_connection_was_ever_made() -> None:
    assert never_sent(grpc.StatusCode.UNAVAILABLE, NEVER_CONNECTED)
    assert should_retry(grpc.StatusCode.UNAVAILABLE, NEVER_CONNECTED, may_bill=True)


def test_the_connect_failure_wording_means_nothing_under_another_code() -> None:
    assert not never_sent(grpc.StatusCode.INTERNAL, NEVER_CONNECTED)


@pytest.mark.parametrize(
    ("retry", "unit", "expected"),
    [
        (0, 0.0, 0.1),  # half of the first ceiling (0.2 s)
        (0, 0.999, 0.1999),
        (1, 0.0, 0.2),  # the ceiling doubles
        (2, 0.5, 0.6),  # 0.8 s ceiling: between 0.4 and 0.8
        (10, 0.0, 2.5),  # capped at max_delay (5 s): never below half of it
        (10, 0.999, 4.9975),
    ],
)
def test_backoff_is_jittered_between_half_and_all_of_an_exponential_ceiling(
    retry: int, unit: float, expected: float
) -> None:
    assert backoff_delay(RetryPolicy(), retry, unit) == pytest.approx(expected)


def test_a_draw_outside_zero_to_one_stays_within_the_bounds() -> None:
    assert backoff_delay(RetryPolicy(), 0, -5.0) == pytest.approx(0.1)
    assert backoff_delay(RetryPolicy(), 0, 7.0) == pytest.approx(0.2)


def test_a_policy_needs_one_attempt_and_finite_delays() -> None:
    with pytest.raises(ValueError, match=r"^attempts:"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match=r"^max_delay:"):
        RetryPolicy(max_delay=float("inf"))


# --- the transport against a server that fails on purpose ---------------------------------------------------


@dataclass
class Script:
    """What the fake services answer: `failures` calls fail with `code`, then each call answers."""

    code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    failures: int = 1_000
    calls: dict[str, int] = field(default_factory=dict)

    async def answer(self, method: str, context: grpc.aio.ServicerContext, reply: Any) -> Any:
        self.calls[method] = self.calls.get(method, 0) + 1
        if self.calls[method] <= self.failures:
            await context.abort(self.code, f"{method} refused on purpose")
        return reply


class FailingPods(pods_pb2_grpc.PodControllerServicer):  # type: ignore[misc]
    def __init__(self, script: Script) -> None:
        self.script = script

    async def StartPod(self, request, context):  # type: ignore[no-untyped-def]
        return await self.script.answer("StartPod", context, pods_pb2.StartPodResponse(name=request.name))

    async def GetPod(self, request, context):  # type: ignore[no-untyped-def]
        return await self.script.answer("GetPod", context, pods_pb2.GetPodResponse(name=request.name))

    async def StopPod(self, request, context):  # type: ignore[no-untyped-def]
        return await self.script.answer("StopPod", context, pods_pb2.StopPodResponse(name=request.name))


class FailingPool(pool_pb2_grpc.PoolDispatcherServicer):  # type: ignore[misc]
    def __init__(self, script: Script) -> None:
        self.script = script

    async def CreateJob(self, request, context):  # type: ignore[no-untyped-def]
        return await self.script.answer("CreateJob", context, pool_pb2.Job(id="j"))

    async def RunJob(self, request, context):  # type: ignore[no-untyped-def]
        return await self.script.answer("RunJob", context, None)

    async def SendHint(self, request, context):  # type: ignore[no-untyped-def]
        return await self.script.answer("SendHint", context, pool_pb2.SendHintResponse())

    async def GetJob(self, request, context):  # type: ignore[no-untyped-def]
        return await self.script.answer("GetJob", context, pool_pb2.Job(id=request.id, state="running"))

    async def WaitJob(self, request, context):  # type: ignore[no-untyped-def]
        await self.script.answer("WaitJob", context, None)
        yield pool_pb2.Job(id=request.id, state="completed")


@contextlib.asynccontextmanager
async def failing_services(script: Script) -> AsyncIterator[str]:
    server = grpc.aio.server()
    pods_pb2_grpc.add_PodControllerServicer_to_server(FailingPods(script), server)
    pool_pb2_grpc.add_PoolDispatcherServicer_to_server(FailingPool(script), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@dataclass
class Sleeps:
    taken: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.taken.append(seconds)


POLICY = RetryPolicy(attempts=4, base_delay=0.2, multiplier=2.0, max_delay=5.0)


def client_for(target: str, sleeps: Sleeps) -> AsyncThermostat:
    config = ClientConfig(target=target, pool_token="t", tenant="acme", operator_token="o", timeout=5)
    return AsyncThermostat(config, retry=POLICY, sleep=sleeps, draw=lambda: 0.5)


Call = Callable[[AsyncThermostat], Awaitable[Any]]
READS: dict[str, Call] = {
    "GetPod": lambda t: t.pods.status("qwen"),
    "StopPod": lambda t: t.pods.stop("qwen"),
    "GetJob": lambda t: t.pool.get("j"),
}
BILLED: dict[str, Call] = {
    "StartPod": lambda t: t.pods.start("qwen"),
    "CreateJob": lambda t: t.pool.submit("local", b"x"),
    "RunJob": lambda t: t.pool.run("local", b"x"),
    "SendHint": lambda t: t.pool.hint("local"),
}


@pytest.mark.parametrize("method", list(READS))
async def test_a_call_that_cannot_bill_is_retried_on_unavailable_until_it_answers(method: str) -> None:
    script, sleeps = Script(failures=2), Sleeps()
    async with failing_services(script) as target, client_for(target, sleeps) as client:
        await READS[method](client)
    assert script.calls == {method: 3}
    assert sleeps.taken == pytest.approx([0.15, 0.3])  # draw 0.5: three quarters of 0.2 s, then of 0.4 s


@pytest.mark.parametrize("method", list(READS))
async def test_retries_stop_at_the_policys_attempts_and_raise_unavailable(method: str) -> None:
    script, sleeps = Script(), Sleeps()
    async with failing_services(script) as target, client_for(target, sleeps) as client:
        with pytest.raises(errors.Unavailable, match="refused on purpose"):
            await READS[method](client)
    assert script.calls == {method: POLICY.attempts}
    assert len(sleeps.taken) == POLICY.attempts - 1


@pytest.mark.parametrize("method", list(BILLED))
async def test_a_call_that_may_bill_is_not_retried_once_the_server_received_it(method: str) -> None:
    script, sleeps = Script(), Sleeps()
    async with failing_services(script) as target, client_for(target, sleeps) as client:
        with pytest.raises(errors.Unavailable):
            await BILLED[method](client)
    assert script.calls == {method: 1}
    assert sleeps.taken == []


@pytest.mark.parametrize(
    "code",
    [grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED],
    ids=lambda c: c.name,
)
async def test_a_read_failing_with_another_code_is_not_retried(code: grpc.StatusCode) -> None:
    script, sleeps = Script(code=code), Sleeps()
    async with failing_services(script) as target, client_for(target, sleeps) as client:
        with pytest.raises(errors.ThermostatError) as raised:
            await client.pool.get("j")
    assert raised.value.code is code and script.calls == {"GetJob": 1} and sleeps.taken == []


@pytest.mark.parametrize("method", list(BILLED))
async def test_a_call_that_may_bill_is_retried_when_no_connection_was_ever_made(method: str) -> None:
    sleeps = Sleeps()
    async with client_for(f"127.0.0.1:{free_port()}", sleeps) as client:
        with pytest.raises(errors.Unavailable) as down:
            await BILLED[method](client)
    assert never_sent(down.value.code, down.value.detail)
    assert len(sleeps.taken) == POLICY.attempts - 1


async def test_a_stream_is_reopened_after_unavailable() -> None:
    script, sleeps = Script(failures=1), Sleeps()
    async with failing_services(script) as target, client_for(target, sleeps) as client:
        states = [job.state async for job in client.pool.wait("j")]
    assert states == ["completed"] and script.calls == {"WaitJob": 2} and len(sleeps.taken) == 1


async def test_every_call_carries_a_deadline() -> None:
    """A server that never answers: the call ends at the config's timeout as DeadlineExceeded."""
    server = grpc.aio.server()

    class Hanging(pool_pb2_grpc.PoolDispatcherServicer):  # type: ignore[misc]
        async def GetJob(self, request, context):  # type: ignore[no-untyped-def]
            await asyncio.Event().wait()  # never answers

    pool_pb2_grpc.add_PoolDispatcherServicer_to_server(Hanging(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        config = ClientConfig(target=f"127.0.0.1:{port}", pool_token="t", tenant="acme", timeout=0.3)
        async with AsyncThermostat(config) as client:
            with pytest.raises(errors.DeadlineExceeded):
                await client.pool.get("j")
            with pytest.raises(errors.DeadlineExceeded):
                await client.pool.get("j", timeout=0.2)
    finally:
        await server.stop(None)
