"""The OpenAI endpoint through the real Envoy edge (issue 34), with the official `openai` package unmodified: a request
to a stopped pod wakes it and returns the engine's answer, the next is forwarded at once, a stream arrives chunk by
chunk, the idle monitor stops the pod after its window and the next request wakes it again. The engine is the
simulator's (canned answers, real sockets); tests/e2e/test_openai_real_engine.py runs the same loop on a real vLLM."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from tests.fixtures.gateway import gateway_stack, history, openai_client, sim_call, sim_pods
from tests.fixtures.polling import eventually
from thermostat.dev.stack.supervisor import Stack

pytestmark = pytest.mark.e2e

CHAT = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
async def stack(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    env = {"IDLE_MINUTES": "0.05", "GATEWAY_REPORT_LIVE_SECONDS": "30"}  # an idle window of 3 s
    sim = ("--provisioning-seconds", "0.3", "--starting-seconds", "0.3", "--model-ready-seconds", "1.5",
           "--stream-chunk-seconds", "0.05", "--stopped-pod")  # fmt: skip
    async with gateway_stack(
        tmp_path_factory.mktemp("gateway"), module_database_url, env=env, simulator_args=sim
    ) as running:
        yield running


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai_client(stack.edge_url, timeout=60) as opened:
        yield opened


async def _pod(stack: Stack) -> dict[str, Any]:
    (pod,) = await sim_pods(stack)
    return pod


async def _stopped(stack: Stack) -> bool | None:
    return True if (await _pod(stack))["status"] == "EXITED" else None


async def test_the_model_list_shows_every_pod_with_its_state_and_wakes_nothing(
    stack: Stack, client: openai.AsyncOpenAI
) -> None:
    await eventually(lambda: _stopped(stack), timeout=30)
    models = await client.models.list()
    assert [(m.id, m.model_extra and m.model_extra["state"]) for m in models.data] == [("qwen", "down")]
    assert (await _pod(stack))["status"] == "EXITED"
    assert not [e for e in await history(stack) if e.get("wake")]


async def test_a_chat_to_a_stopped_pod_wakes_it_and_answers_then_the_next_is_forwarded_at_once(
    stack: Stack, client: openai.AsyncOpenAI
) -> None:
    await eventually(lambda: _stopped(stack), timeout=30)
    answer = await client.chat.completions.create(model="qwen", messages=CHAT, temperature=0)
    assert answer.choices[0].message.content and "simulated pod" in answer.choices[0].message.content
    assert answer.model == "tiny", "the name the engine serves went up in place of the pod's"
    wakes = [e["wake"] for e in await history(stack) if e.get("wake")]
    assert [(w["trigger"], w["outcome"]) for w in wakes[:1]] == [("request", "Succeeded")]
    began = time.monotonic()
    again = await client.completions.create(model="qwen", prompt="once more", max_tokens=8)
    assert again.choices[0].text and time.monotonic() - began < 5
    assert len([e for e in await history(stack) if e.get("wake")]) == len(wakes), "a warm pod is not woken again"
    models = await client.models.list()
    assert [m.model_extra and m.model_extra["state"] for m in models.data] == ["ready"]


async def test_a_stream_arrives_chunk_by_chunk(stack: Stack, client: openai.AsyncOpenAI) -> None:
    await client.completions.create(model="qwen", prompt="warm up", max_tokens=1)
    arrivals: list[float] = []
    texts: list[str] = []
    stream = await client.chat.completions.create(model="qwen", messages=CHAT, stream=True)
    async for chunk in stream:
        arrivals.append(time.monotonic())
        if chunk.choices and chunk.choices[0].delta.content:
            texts.append(chunk.choices[0].delta.content)
    assert len(texts) > 5
    assert "simulated pod" in "".join(texts)
    spread = arrivals[-1] - arrivals[0]
    assert spread > 0.05 * (len(arrivals) - 2) * 0.5, f"held back: {len(arrivals)} chunks within {spread:.3f} s"


async def test_a_cold_stream_gets_its_headers_at_once_and_comments_while_the_pod_wakes(stack: Stack) -> None:
    """The SSE comment lines keep a proxy with a first-byte limit (Cloudflare's 100 s, the seed's 524) from cutting
    a request held while the pod wakes."""
    async with httpx.AsyncClient(base_url=stack.edge_url, timeout=60) as edge:
        await edge.post("/api/pods/qwen/stop", headers={"X-Rig-Operator-Token": "e2e-operator-token"})
        await eventually(lambda: _stopped(stack), timeout=30)
        body = {"model": "qwen", "messages": CHAT, "stream": True}
        headers = {"Authorization": "Bearer e2e-inference-token"}
        began = time.monotonic()
        async with edge.stream("POST", "/openai/v1/chat/completions", json=body, headers=headers) as answer:
            headers_at = time.monotonic() - began
            lines = [line async for line in answer.aiter_lines() if line]
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    assert headers_at < 1.0, f"headers after {headers_at:.2f} s"
    comments = [line for line in lines if line.startswith(":")]
    assert comments and comments[0].startswith(": waking qwen: "), lines[:3]
    assert lines[-1] == "data: [DONE]"


async def test_the_idle_monitor_stops_the_pod_after_its_window_and_the_next_request_wakes_it_again(
    stack: Stack, client: openai.AsyncOpenAI
) -> None:
    """No client ever holds a stale proxy URL: after an idle stop the endpoint wakes the pod again."""
    await client.completions.create(model="qwen", prompt="hi", max_tokens=2)
    await eventually(lambda: _stopped(stack), timeout=60)
    stops = [e["action"] for e in await history(stack) if e.get("action") and e["action"]["action"] == "Stop"]
    assert stops[0]["trigger"] == "idle"
    answer = await client.completions.create(model="qwen", prompt="back again", max_tokens=4)
    assert answer.choices[0].text
    assert (await _pod(stack))["status"] == "RUNNING"


async def test_a_request_in_flight_keeps_the_pod_up_past_its_idle_window(stack: Stack) -> None:
    """A slow stream (about 5 s, over the 3 s window) holds the pod up from its first chunk to its last."""
    async with openai_client(stack.edge_url, timeout=60) as client:
        await client.completions.create(model="qwen", prompt="warm", max_tokens=1)
        before = len([e for e in await history(stack) if e.get("action") and e["action"]["action"] == "Stop"])
        await sim_call(stack, "PUT", "/settings", {"streamChunkSeconds": 0.25})
        try:
            began = time.monotonic()
            stream = await client.completions.create(model="qwen", prompt="slow", max_tokens=80, stream=True)
            chunks = [chunk async for chunk in stream]
        finally:
            await sim_call(stack, "PUT", "/settings", {"streamChunkSeconds": 0.05})
    assert len(chunks) > 10 and time.monotonic() - began > 3
    after = len([e for e in await history(stack) if e.get("action") and e["action"]["action"] == "Stop"])
    assert after == before, "stopped mid-answer"


async def test_a_client_that_goes_away_mid_stream_frees_the_engine(stack: Stack) -> None:
    async with openai_client(stack.edge_url, timeout=60) as client:
        await client.completions.create(model="qwen", prompt="warm", max_tokens=1)
        stream = await client.completions.create(model="qwen", prompt="long " * 4, max_tokens=400, stream=True)
        async for _ in stream:
            if (await _pod(stack))["vllm"]["running"] == 1:
                break
        await stream.close()

    async def freed() -> bool | None:
        return True if (await _pod(stack))["vllm"]["running"] == 0 else None

    await eventually(freed, timeout=10)


async def test_two_requests_together_at_a_stopped_pod_start_one_wake(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.edge_url, timeout=60) as edge:
        await edge.post("/api/pods/qwen/stop", headers={"X-Rig-Operator-Token": "e2e-operator-token"})
    await eventually(lambda: _stopped(stack), timeout=30)
    before = await _starts(stack)
    async with openai_client(stack.edge_url, timeout=60) as client:
        answers = await asyncio.gather(
            *(client.completions.create(model="qwen", prompt=f"together {i}", max_tokens=2) for i in range(2))
        )
    assert all(a.choices[0].text for a in answers)
    assert await _starts(stack) == before + 1


async def _starts(stack: Stack) -> int:
    return len([e for e in await history(stack) if e.get("action") and e["action"]["action"] == "Start"])
