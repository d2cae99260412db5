"""The OpenAI endpoint over two replicas of every service (issue 34): two requests arriving together at a stopped pod
through the two gateway replicas start one wake, and a pod the monitor stops for its boot grace while requests are
held fails them at once, naming the stop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import openai
import pytest

from tests.fixtures.gateway import gateway_stack, history, openai_client, sim_call
from tests.fixtures.polling import eventually
from thermostat.dev.stack.supervisor import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

# a boot grace of 6 s (12 ticks of 0.5 s), a wait bound past it, and a stopped pod to start
ENV = {"RUNPOD_BOOT_GRACE_MINUTES": "0.1", "GATEWAY_WAKE_WAIT_SECONDS": "60"}
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
    # the held request waits out the boot grace (12 ticks of two monitor replicas on a loaded machine): room for it
    async with openai_client(stack.edge_url, timeout=300) as client:
        await client.completions.create(model="qwen", prompt="warm", max_tokens=1)
        await sim_call(stack, "PUT", "/settings", {"modelReadySeconds": 3600})
        try:
            stops_before = len(await _actions(stack, "Stop"))
            await sim_call(stack, "POST", f"/pods/{await _pod_id(stack)}/status", {"status": "EXITED"})

            async def down() -> bool | None:
                models = await client.models.list()
                return True if models.data[0].model_extra and models.data[0].model_extra["state"] == "down" else None

            await eventually(down, timeout=30)
            with pytest.raises(openai.InternalServerError) as refused:
                await client.completions.create(model="qwen", prompt="held", max_tokens=2)
        finally:
            await sim_call(stack, "PUT", "/settings", {"modelReadySeconds": 1})
    assert refused.value.status_code == 503
    assert refused.value.code == "pod_stopped"
    assert "boot-grace" in refused.value.message
    stops = await _actions(stack, "Stop")
    assert len(stops) == stops_before + 1 and stops[0]["trigger"] == "boot-grace"


async def _pod_id(stack: Stack) -> str:
    (pod,) = await sim_call(stack, "GET", "/pods")
    return str(pod["id"])
