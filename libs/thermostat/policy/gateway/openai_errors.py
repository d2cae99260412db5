"""The gateway's refusals in OpenAI's error shape and status codes, so an OpenAI client raises its own typed errors.

OpenAI answers `{"error": {"message", "type", "param", "code"}}`; its Python package maps 401 to
AuthenticationError, 404 to NotFoundError, 429 to RateLimitError (whose `code` says `insufficient_quota` for a
spent budget), 503 and 504 to InternalServerError and APITimeoutError's siblings. Each refusal names its cause in
`message` and never carries a secret: no token, no RunPod key, no proxy URL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum


class Refusal(StrEnum):
    """Refusal names why the gateway answers instead of the engine."""

    NO_TOKEN = "no_token"  # noqa: S105 -- a refusal's name, not a token
    WRONG_TOKEN = "wrong_token"  # noqa: S105 -- a refusal's name
    BAD_REQUEST = "bad_request"
    UNKNOWN_MODEL = "unknown_model"
    OVER_BUDGET = "over_budget"
    TOO_MANY_HELD = "too_many_held"
    WAKE_FAILED = "wake_failed"
    STOPPED_WHILE_HELD = "stopped_while_held"
    WAIT_BOUND = "wait_bound"
    ENGINE_UNREACHABLE = "engine_unreachable"
    CONTROL_UNAVAILABLE = "control_unavailable"


# status, OpenAI's error type, OpenAI's error code
_SHAPES: dict[Refusal, tuple[int, str, str]] = {
    Refusal.NO_TOKEN: (401, "invalid_request_error", "missing_api_key"),
    Refusal.WRONG_TOKEN: (401, "invalid_request_error", "invalid_api_key"),
    Refusal.BAD_REQUEST: (400, "invalid_request_error", "invalid_request"),
    Refusal.UNKNOWN_MODEL: (404, "invalid_request_error", "model_not_found"),
    Refusal.OVER_BUDGET: (429, "insufficient_quota", "insufficient_quota"),
    Refusal.TOO_MANY_HELD: (503, "server_error", "too_many_held_requests"),
    Refusal.WAKE_FAILED: (503, "server_error", "wake_failed"),
    Refusal.STOPPED_WHILE_HELD: (503, "server_error", "pod_stopped"),
    Refusal.WAIT_BOUND: (504, "server_error", "model_not_ready"),
    Refusal.ENGINE_UNREACHABLE: (502, "server_error", "engine_unreachable"),
    Refusal.CONTROL_UNAVAILABLE: (503, "server_error", "control_unavailable"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayError:
    """GatewayError is one refusal: its kind, the sentence naming the cause, the field it concerns (OpenAI's
    `param`) and, for a 503 worth retrying, how many seconds to wait (`Retry-After`)."""

    refusal: Refusal
    message: str
    param: str | None = None
    retry_after_seconds: int | None = None

    @property
    def status(self) -> int:
        return _SHAPES[self.refusal][0]

    @property
    def error_type(self) -> str:
        return _SHAPES[self.refusal][1]

    @property
    def code(self) -> str:
        return _SHAPES[self.refusal][2]

    def body(self) -> dict[str, object]:
        """OpenAI's error object."""
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}

    def sse_event(self) -> bytes:
        """The refusal as one SSE event, for a stream whose headers (200) are already sent; the stream ends after it."""
        return b"data: " + json.dumps(self.body()).encode() + b"\n\n"
