"""The OpenAI endpoint over two replicas of every service (issue 34): two requests arriving together at a stopped pod
through the two gateway replicas start one wake, and a pod the monitor stops for its boot grace while requests are
held fails them at once, naming the stop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import openai
import pytest

from tests.fixtures.gateway import gateway_stack, history, openai_client, sim_call
from tests.fixtures.polling import eventually
from thermostat.chassis.internal_auth import INTERNAL_TOKEN_ENV, INTERNAL_TOKEN_HEADER
from thermostat.dev.stack.supervisor import Stack
from thermostat.pods.v1 import pods_pb2, pods_pb2_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

# a wait bound past the test, and a stopped pod to start
ENV = {"GATEWAY_WAKE_WAIT_SECONDS": "120"}
SIM = ("--provisioning-seconds", "0.2", "--starting-seconds", "0.2", "--model-ready-seconds", "1", "--stopped-pod")


@pytest.fixture(scope="module")
async def stack(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with gateway_stack(
        tmp_path_factory.mktemp("replicas"), module_database_url, env=ENV, simulator_args=SIM, replicas=2
    ) as running:
        yield running


async def _actions(stack: Stack, action: str) -> list[dict[str, object]]:
    return [e["action"] for e in await history(stack) if e.get("action") and e["action"]["action"] == action]


async def test_two_requests_at_a_stopped_pod_through_two_gateway_replicas_start_one_wake(stack: Stack) -> None:
    ports = stack.replica_ports["gateway-http"]
    assert len(ports) == 2
    clients = [openai_client(f"http://127.0.0.1:{port}", timeout=60) for port in ports]
    try:
        answers = await asyncio.gather(
            *(c.completions.create(model="qwen", prompt=f"at once {i}", max_tokens=2) for i, c in enumerate(clients))
        )
    finally:
        for c in clients:
            await c.close()
    assert all(a.choices[0].text for a in answers)
    assert [a["trigger"] for a in await _actions(stack, "Start")] == ["request"]


async def test_a_pod_stopped_for_its_boot_grace_while_requests_are_held_fails_them_naming_the_stop(
    stack: Stack,
) -> None:
    """A request held for a pod whose model never loads; the monitor's boot-grace stop lands (issued here as the
    monitor issues it, through the controller's StopPods with trigger boot-grace, so the test does not wait on the
    monitor's clock): the held request is answered at once, 503, naming the stop."""
    async with openai_client(stack.edge_url, timeout=120) as client:
        await client.completions.create(model="qwen", prompt="warm", max_tokens=1)
        await sim_call(stack, "PUT", "/settings", {"modelReadySeconds": 3600})
        try:
            pod_id = await _pod_id(stack)
            await sim_call(stack, "POST", f"/pods/{pod_id}/status", {"status": "EXITED"})
            await eventually(lambda: _state(client, "down"), timeout=30)
            held = asyncio.create_task(client.completions.create(model="qwen", prompt="held", max_tokens=2))
            await eventually(lambda: _state(client, "booting"), timeout=30)
            await eventually(lambda: _running(stack), timeout=30)
            async with grpc.aio.insecure_channel(stack.env["POD_CONTROLLER_ADDR"]) as channel:
                stopped = await pods_pb2_grpc.PodControllerInternalStub(channel).StopPods(
                    pods_pb2.StopPodsRequest(name="qwen", pod_ids=[pod_id], trigger=pods_pb2.STOP_TRIGGER_BOOT_GRACE),
                    metadata=((INTERNAL_TOKEN_HEADER, stack.env[INTERNAL_TOKEN_ENV]),),
                    timeout=30,
                )
            assert stopped.ok
            with pytest.raises(openai.InternalServerError) as refused:
                await asyncio.wait_for(held, 60)
        finally:
            await sim_call(stack, "PUT", "/settings", {"modelReadySeconds": 1})
    assert refused.value.status_code == 503
    assert refused.value.code == "pod_stopped"
    assert "boot-grace" in refused.value.message


async def _state(client: openai.AsyncOpenAI, state: str) -> bool | None:
    models = await client.models.list()
    return True if models.data[0].model_extra and models.data[0].model_extra["state"] == state else None


async def _running(stack: Stack) -> bool | None:
    (pod,) = await sim_call(stack, "GET", "/pods")
    return True if pod["status"] == "RUNNING" else None


async def _pod_id(stack: Stack) -> str:
    (pod,) = await sim_call(stack, "GET", "/pods")
    return str(pod["id"])
