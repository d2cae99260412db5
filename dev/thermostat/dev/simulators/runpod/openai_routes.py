"""The simulated engine's OpenAI routes: what a pod's vLLM answers through the proxy when no real one runs.

`GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions` (and `GET /health`) in vLLM 0.32's exact
JSON shapes, recorded from the real engine (notes: vllm-recipe.md): a canned answer, the same words every time,
cut at `max_tokens` (finish_reason "length", else "stop"). `stream: true` answers Server-Sent Events in vLLM's
chunk shapes, one piece a chunk `stream_chunk_seconds` apart, then `data: [DONE]`. Tokens are whitespace words
(as the tiny model's word-level tokenizer counts them), so usage and the exposition's counters add up.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from thermostat.dev.simulators.runpod.streaming import Streamed
from thermostat.dev.simulators.runpod.vllm_exposition import VllmCounters
from thermostat.dev.simulators.runpod.world import PodWorld
from thermostat.dev.simulators.serving import Answer, RecordedRequest

ROUTES = frozenset({("GET", "/health"), ("GET", "/v1/models"), ("POST", "/v1/completions"),
                    ("POST", "/v1/chat/completions")})  # fmt: skip
CANNED_ANSWER = "Hello from the simulated pod . This canned answer is the same for every request : no model ran ."
SYSTEM_FINGERPRINT = "vllm-0.32.0-simulated"
EVENT_STREAM = "text/event-stream; charset=utf-8"


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()  # vLLM's own spacing: none


def json_answer(status: int, body: object) -> Answer:
    return status, {"Content-Type": "application/json"}, _json(body)


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """One canned answer: its pieces (one token each, as streamed), why it ended and what it counted."""

    chat: bool
    pieces: tuple[str, ...]
    finish_reason: str
    prompt_tokens: int
    include_usage: bool = False

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def usage(self) -> dict[str, object]:
        generated = len(self.pieces)
        return {"prompt_tokens": self.prompt_tokens, "total_tokens": self.prompt_tokens + generated,
                "completion_tokens": generated}  # fmt: skip


class OpenAIError(Exception):
    """An answer in vLLM's error shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, kind: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.param = status, kind, param

    def answer(self) -> Answer:
        error = {"message": str(self), "type": self.kind, "param": self.param, "code": self.status}
        return json_answer(self.status, {"error": error})


def _words(text: str) -> int:
    return len(text.split())


def _content(message: object) -> str:
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return content if isinstance(content, str) else ""


def _prompt_tokens(body: Mapping[str, object], chat: bool) -> int:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise OpenAIError(400, "BadRequestError", "messages must be a non-empty list", "messages")
        # the tiny model's template: "{role} : {content}\n" a message, then "assistant :"
        return sum(2 + _words(_content(message)) for message in messages) + 2
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return _words(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(item, int) for item in prompt):
        return len(prompt)
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return _words(prompt[0])
    raise OpenAIError(400, "BadRequestError", "prompt must be a string, a list of strings or token ids", "prompt")


def read_completion(body: object, *, chat: bool, served_model: str) -> Completion:
    """The canned answer to a request body; OpenAIError for what vLLM refuses (not JSON, another model)."""
    if not isinstance(body, Mapping):
        raise OpenAIError(400, "Bad Request", "the body must be a JSON object", "body")
    model = body.get("model")
    if model is not None and model != served_model:
        raise OpenAIError(
            404, "NotFoundError", f"The model `{model}` does not exist. Valid aliases: {served_model}.", "model"
        )
    prompt_tokens = _prompt_tokens(body, chat)
    limit = body.get("max_completion_tokens") if chat and "max_completion_tokens" in body else body.get("max_tokens")
    words = CANNED_ANSWER.split()
    cut = isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < len(words)
    kept = words[: int(limit)] if cut and isinstance(limit, int) else words
    options = body.get("stream_options")
    return Completion(
        chat=chat,
        pieces=tuple(f" {word}" for word in kept),
        finish_reason="length" if cut else "stop",
        prompt_tokens=prompt_tokens,
        include_usage=isinstance(options, Mapping) and options.get("include_usage") is True,
    )


def models_body(served_model: str, max_model_len: int = 1280) -> dict[str, object]:
    created = int(time.time())
    permission = {
        "id": f"modelperm-{secrets.token_hex(8)}", "object": "model_permission", "created": created,
        "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True, "allow_search_indices": False,
        "allow_view": True, "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False,
    }  # fmt: skip
    model = {"id": served_model, "object": "model", "created": created, "owned_by": "vllm", "root": served_model,
             "parent": None, "max_model_len": max_model_len, "permission": [permission]}  # fmt: skip
    return {"object": "list", "data": [model]}


def completion_body(completion: Completion, *, served_model: str) -> dict[str, object]:
    """The whole answer of a request without `stream` (vLLM's CompletionResponse / ChatCompletionResponse)."""
    head: dict[str, object] = {"object": "chat.completion" if completion.chat else "text_completion",
                               "created": int(time.time()), "model": served_model}  # fmt: skip
    choice: dict[str, object]
    if completion.chat:
        message = {"role": "assistant", "content": completion.text, "refusal": None, "annotations": None,
                   "audio": None, "function_call": None, "reasoning": None}  # fmt: skip
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": completion.finish_reason,
                  "stop_reason": None, "token_ids": None, "routed_experts": None}  # fmt: skip
    else:
        choice = {"index": 0, "text": completion.text, "logprobs": None, "finish_reason": completion.finish_reason,
                  "stop_reason": None, "token_ids": None, "prompt_logprobs": None, "prompt_token_ids": None,
                  "routed_experts": None}  # fmt: skip
    usage = {**completion.usage(), "prompt_tokens_details": None, "completion_tokens_details": None}
    tail: dict[str, object] = {"service_tier": None, "system_fingerprint": SYSTEM_FINGERPRINT, "usage": usage}
    if completion.chat:
        tail.update({"prompt_logprobs": None, "prompt_token_ids": None, "prompt_text": None})
    tail.update({"kv_transfer_params": None, "ec_transfer_params": None, "metrics": None})
    return {"id": _new_id(completion), **head, "choices": [choice], **tail}


def _new_id(completion: Completion) -> str:
    return f"{'chatcmpl' if completion.chat else 'cmpl'}-{secrets.token_hex(8)}"


def stream_events(completion: Completion, *, served_model: str) -> list[dict[str, object]]:
    """The `data:` events of a streamed answer, before `[DONE]` (vLLM's chunk shapes)."""
    head: dict[str, object] = {"id": _new_id(completion),
                               "object": "chat.completion.chunk" if completion.chat else "text_completion",
                               "created": int(time.time()), "model": served_model}  # fmt: skip
    events: list[dict[str, object]] = []
    if completion.chat:
        opening = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        events.append({**head, "choices": [opening], "prompt_token_ids": None, "prompt_text": None})
    last = len(completion.pieces) - 1
    for index, piece in enumerate(completion.pieces):
        ending = index == last
        choice: dict[str, object]
        if completion.chat:
            choice = {"index": 0, "delta": {"content": piece}, "logprobs": None,
                      "finish_reason": completion.finish_reason if ending else None}  # fmt: skip
            if ending:
                choice["stop_reason"] = None
            choice["token_ids"] = None
        else:
            choice = {"index": 0, "text": piece, "logprobs": None,
                      "finish_reason": completion.finish_reason if ending else None, "stop_reason": None,
                      "prompt_token_ids": None, "token_ids": None}  # fmt: skip
        event: dict[str, object] = {**head, "choices": [choice]}
        if ending and not completion.include_usage:
            event["system_fingerprint"] = SYSTEM_FINGERPRINT
        events.append(event)
    if completion.include_usage:
        events.append({**head, "choices": [], "usage": completion.usage(), "system_fingerprint": SYSTEM_FINGERPRINT})
    return events


def sse(event: object) -> bytes:
    return b"data: " + (event if isinstance(event, bytes) else _json(event)) + b"\n\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """How an answered request moves its pod's counters: `begin` (a request running), then `end` with the
    tokens it generated and why it ended (None: aborted, which vLLM does not count as a success)."""

    begin: Callable[[], None]
    end: Callable[[int, str | None], None]


def streamed(completion: Completion, *, served_model: str, chunk_seconds: float, turn: Turn,
             stopping: threading.Event) -> Streamed:  # fmt: skip
    """The answer as SSE, a chunk every `chunk_seconds`; a client gone (or the simulator stopping) aborts it."""
    aborted = threading.Event()
    events = stream_events(completion, served_model=served_model)

    def chunks() -> Iterator[bytes]:
        generated, finished, opening = 0, False, 1 if completion.chat else 0
        turn.begin()
        try:
            for index, event in enumerate(events):
                if index and (aborted.wait(chunk_seconds) or stopping.is_set()):
                    return
                yield sse(event)
                generated = min(len(completion.pieces), max(0, index + 1 - opening))
            yield sse(b"[DONE]")
            finished = True
        finally:
            turn.end(generated, completion.finish_reason if finished else None)

    return Streamed.now(200, {"Content-Type": EVENT_STREAM}, chunks(), aborted.set)


def answer(
    world: PodWorld, request: RecordedRequest, *, pod_id: str, port: int, route: str, stopping: threading.Event
) -> Answer | Streamed:
    """The simulated vLLM's answer to one of ROUTES on pod `pod_id`, behind the proxy's own refusals."""
    refused = world.vllm_gate(pod_id, port, request.headers.get("user-agent", ""))
    if refused is not None:
        return refused
    settings = world.settings
    served = settings.model_name
    if route == "/health":
        return 200, {}, b""
    if route == "/v1/models":
        return json_answer(200, models_body(served))
    try:
        completion = read_completion(request.json_body, chat=route == "/v1/chat/completions", served_model=served)
    except OpenAIError as error:
        return error.answer()
    body = request.json_body
    if isinstance(body, Mapping) and body.get("stream") is True:
        return streamed(
            completion,
            served_model=served,
            chunk_seconds=settings.stream_chunk_seconds,
            turn=_turn(world, pod_id, completion.prompt_tokens),
            stopping=stopping,
        )
    with contextlib.suppress(ValueError):  # the pod stopped meanwhile: nothing left to count on
        world.record_turn(pod_id, completion.prompt_tokens, len(completion.pieces), completion.finish_reason)
    return json_answer(200, completion_body(completion, served_model=served))


def _turn(world: PodWorld, pod_id: str, prompt_tokens: int) -> Turn:
    taken: list[VllmCounters] = []

    def begin() -> None:
        with contextlib.suppress(ValueError):  # the pod stopped meanwhile: nothing left to count on
            taken.append(world.begin_request(pod_id))

    def end(generated: int, finished_reason: str | None) -> None:
        if taken:
            world.end_request(taken[0], prompt_tokens, generated, finished_reason)

    return Turn(begin=begin, end=end)
