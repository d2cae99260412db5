"""An OpenAI request as the gateway reads it: the model it names and whether it streams, else a 400 naming the field.

The body is otherwise the engine's business: every other field goes up as the client sent it, except `model`, which
names the pod (`qwen`) here and is replaced by the name the engine serves on the way up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from thermostat.policy.gateway.openai_errors import GatewayError, Refusal


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceRequest:
    """InferenceRequest is a parsed completion request: its body, the pod it names and whether it streams."""

    body: dict[str, Any]
    model: str
    stream: bool


def parse_request(raw: bytes) -> InferenceRequest | GatewayError:
    """The request, or the 400 naming what is wrong with it."""
    try:
        body = json.loads(raw) if raw else None
    except (ValueError, UnicodeDecodeError):
        return _bad("the body is not valid JSON", None)
    if not isinstance(body, dict):
        return _bad("the body must be a JSON object", None)
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        return _bad("model: required, the name of a pod (GET /openai/v1/models lists them)", "model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        return _bad("stream: must be true or false", "stream")
    return InferenceRequest(body=body, model=model.strip(), stream=stream)


def upstream_body(request: InferenceRequest, served_model: str) -> bytes:
    """The body sent to the engine: the client's, with `model` the name the engine serves."""
    return json.dumps({**request.body, "model": served_model}).encode()


def _bad(message: str, param: str | None) -> GatewayError:
    return GatewayError(refusal=Refusal.BAD_REQUEST, message=message, param=param)
