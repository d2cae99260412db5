"""The OpenAI endpoint's refusals through the real edge (issue 34), each in OpenAI's error shape with its status and
a message naming the cause, raised by the official client as its own typed error; nothing is billed where something
was refused. One pod per case, so the cases stand alone: `qwen` never becomes ready (the held-request bound and the
wait bound), `llama` has no GPU under its price cap (a failed wake), `gemma` has a spent budget (metering)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import openai
import pytest

from tests.fixtures.gateway import (
    INFERENCE_TOKEN,
    OPERATOR,
    SERVICES,
    gateway_stack,
    history,
    openai_client,
    sim_call,
)
from thermostat.chassis.registry import METERING
from thermostat.dev.stack.supervisor import Stack

pytestmark = pytest.mark.e2e

ENV = {
    "RUNPOD_PODS": "qwen,llama,gemma",
    "RUNPOD_LLAMA_VOLUME_ID": "agv6w2qcg7",
    "RUNPOD_LLAMA_DATACENTER_ID": "US-TX-3",
    "RUNPOD_LLAMA_MAX_PRICE_PER_HOUR": "0.01",
    "RUNPOD_GEMMA_VOLUME_ID": "gemmavol01",
    "GATEWAY_MAX_HELD_PER_POD": "1",
    "GATEWAY_WAKE_WAIT_SECONDS": "3",
}
# qwen's model never loads within the test; gemma's volume is one more in the simulator's EU datacenter
SIM = ("--provisioning-seconds", "0.2", "--starting-seconds", "0.2", "--model-ready-seconds", "3600",
       "--volume", "gemmavol01=EU-RO-1")  # fmt: skip


@pytest.fixture(scope="module")
async def stack(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with gateway_stack(
        tmp_path_factory.mktemp("refusals"),
        module_database_url,
        env=ENV,
        simulator_args=SIM,
        services=(*SERVICES, METERING),
    ) as running:
        yield running


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai_client(stack.edge_url, timeout=30) as opened:
        yield opened


async def _billed(stack: Stack) -> list[dict[str, object]]:
    billed: list[dict[str, object]] = await sim_call(stack, "GET", "/billed")
    return billed


@pytest.mark.parametrize(
    "api_key",
    [pytest.param("wrong", id="a wrong token"), pytest.param(INFERENCE_TOKEN + "x", id="the token with a suffix")],
)
async def test_a_wrong_token_is_401_and_wakes_nothing(stack: Stack, api_key: str) -> None:
    wakes = await _wakes(stack, "llama")
    async with openai_client(stack.edge_url, api_key=api_key) as client:
        with pytest.raises(openai.AuthenticationError) as refused:
            await client.chat.completions.create(model="llama", messages=[{"role": "user", "content": "hi"}])
    assert await _wakes(stack, "llama") == wakes
    assert refused.value.status_code == 401
    assert refused.value.code == "invalid_api_key"
    assert "THERMOSTAT_INFERENCE_TOKEN" in refused.value.message
    assert api_key not in refused.value.message


async def test_no_token_is_401(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.edge_url, timeout=10) as edge:
        answer = await edge.post("/openai/v1/completions", json={"model": "qwen", "prompt": "hi"})
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "missing_api_key"


async def test_the_operator_token_is_accepted_too(stack: Stack) -> None:
    async with openai_client(stack.edge_url, api_key=OPERATOR["X-Rig-Operator-Token"]) as client:
        models = await client.models.list()
    assert [m.id for m in models.data] == ["qwen", "llama", "gemma"]


async def test_the_inference_token_cannot_stop_a_pod_or_set_a_budget(stack: Stack) -> None:
    """It sends inference and, through it, wakes a pod; the operator's routes refuse it."""
    bearer = {"Authorization": f"Bearer {INFERENCE_TOKEN}", "X-Rig-Operator-Token": INFERENCE_TOKEN}
    async with httpx.AsyncClient(base_url=stack.edge_url, timeout=10) as edge:
        stop = await edge.post("/api/pods/qwen/stop", headers=bearer)
        budget = await edge.put("/api/pods/qwen/budget", json={"dailyUsd": 1000}, headers=bearer)
    assert (stop.status_code, budget.status_code) == (403, 403), (stop.text, budget.text)


async def _wakes(stack: Stack, name: str) -> int:
    return len([e for e in await history(stack, name) if e.get("wake")])


async def test_an_unknown_model_is_404_naming_the_models(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as refused:
        await client.completions.create(model="gpt-4o", prompt="hi")
    assert refused.value.code == "model_not_found"
    assert "gpt-4o" in refused.value.message and "qwen, llama, gemma" in refused.value.message


async def test_a_body_without_a_model_is_400_naming_the_field(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.edge_url, timeout=10) as edge:
        answer = await edge.post(
            "/openai/v1/chat/completions",
            json={"messages": []},
            headers={"Authorization": f"Bearer {INFERENCE_TOKEN}"},
        )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "model"


async def test_past_the_held_bound_a_request_is_503_with_retry_after_and_the_held_one_meets_the_wait_bound(
    stack: Stack, client: openai.AsyncOpenAI
) -> None:
    """GATEWAY_MAX_HELD_PER_POD=1: a second request while one is held is refused at once; the held one, whose pod
    never becomes ready, gets the wait bound (GATEWAY_WAKE_WAIT_SECONDS) as an SSE error event saying what the pod
    was doing, and a request without a stream the same as a 504. Holding costs the gateway next to no CPU: it waits
    on the pod's view, it does not poll it."""
    cpu_before = await _gateway_cpu_seconds(stack)
    body = {"model": "qwen", "prompt": "hi", "stream": True}
    headers = {"Authorization": f"Bearer {INFERENCE_TOKEN}"}
    async with (
        httpx.AsyncClient(base_url=stack.edge_url, timeout=30) as edge,
        edge.stream("POST", "/openai/v1/completions", json=body, headers=headers) as held,
    ):
        lines = held.aiter_lines()
        first = await anext(lines)
        assert first.startswith(": waking qwen: ")
        second = await edge.post("/openai/v1/completions", json={**body, "stream": False}, headers=headers)
        rest = [line async for line in lines if line]
    assert second.status_code == 503
    assert second.json()["error"]["code"] == "too_many_held_requests"
    assert int(second.headers["retry-after"]) >= 1
    error = json.loads(rest[-1].removeprefix("data: "))["error"]
    assert error["code"] == "model_not_ready"
    assert "was not ready after 3 s" in error["message"] and "loading the model" in error["message"]
    with pytest.raises(openai.APIStatusError) as timed_out:
        await client.completions.create(model="qwen", prompt="hi")
    assert timed_out.value.status_code == 504
    held_cpu = await _gateway_cpu_seconds(stack) - cpu_before
    assert held_cpu < 1.5, f"two requests held 3 s each cost the gateway {held_cpu:.2f} s of CPU"


async def _gateway_cpu_seconds(stack: Stack) -> float:
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"http://127.0.0.1:{stack.metrics_ports['gateway']}/metrics")).text
    (line,) = [line for line in text.splitlines() if line.startswith("process_cpu_seconds_total ")]
    return float(line.split()[1])


async def test_a_failed_wake_is_503_with_the_wakes_own_reason_and_bills_nothing(
    stack: Stack, client: openai.AsyncOpenAI
) -> None:
    with pytest.raises(openai.InternalServerError) as refused:
        await client.completions.create(model="llama", prompt="hi")
    assert refused.value.status_code == 503
    assert refused.value.code == "wake_failed"
    assert "llama could not be woken" in refused.value.message and "0.01" in refused.value.message
    assert not [s for s in await _billed(stack) if s.get("volumeId") == "agv6w2qcg7"]


async def test_a_refused_budget_is_429_insufficient_quota_with_its_numbers_and_bills_nothing(
    stack: Stack, client: openai.AsyncOpenAI
) -> None:
    async with httpx.AsyncClient(base_url=stack.edge_url, timeout=10) as edge:
        answer = await edge.put("/api/pods/gemma/budget", json={"dailyUsd": 0}, headers=OPERATOR)
        assert answer.status_code == 200, answer.text
    with pytest.raises(openai.RateLimitError) as refused:
        await client.chat.completions.create(model="gemma", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.code == "insufficient_quota"
    assert "daily budget of 0.00 USD reached" in refused.value.message
    assert not [s for s in await _billed(stack) if s.get("volumeId") == "gemmavol01"]
    pods = await sim_call(stack, "GET", "/pods")
    assert [p["id"] for p in pods if p["v2"].get("networkVolumeId") == "gemmavol01"] == []
